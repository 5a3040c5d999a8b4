package kubernetes

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the main module's directory, relative to this one.
const repoRoot = "../.."

// flagInfo is one flag of a subcommand, read from its --help.
type flagInfo struct {
	name, typ, env, def string
}

// command is what `<binary> <subcommand> --help` says the subcommand reads.
type command struct {
	byEnv  map[string]flagInfo
	byName map[string]flagInfo
}

// helpFlagLine matches a pflag usage line: "  -o, --name type   usage".
var helpFlagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: ([a-zA-Z0-9]+))?\s{2,}(.*)$`)

var (
	envAnnotation = regexp.MustCompile(`\[env ([A-Z0-9_]+)\]`)
	helpDefault   = regexp.MustCompile(`\(default "?(.*?)"?\)$`)
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
	helps   = map[string]command{}
	helpsMu sync.Mutex
)

// binaries builds the production binaries (cmd/worker, cmd/master) of the main
// module once, into a directory removed when the tests end.
func binaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tidemark-k8s-bin-")
		if err != nil {
			binErr = err
			return
		}
		binDir = dir
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/worker", "./cmd/master")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/worker ./cmd/master: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// help runs `<binary> <subcommand> --help` and returns the flags it lists: the
// binary's own word on what it reads.
func help(t *testing.T, binary, sub string) (command, error) {
	t.Helper()
	key := binary + " " + sub
	helpsMu.Lock()
	defer helpsMu.Unlock()
	if c, ok := helps[key]; ok {
		return c, nil
	}
	if binary != "worker" && binary != "master" {
		return command{}, fmt.Errorf("binary %q: the image has worker and master", binary)
	}
	out, err := exec.Command(filepath.Join(binaries(t), binary), sub, "--help").CombinedOutput()
	if err != nil {
		return command{}, fmt.Errorf("%s --help: %v\n%s", key, err, out)
	}
	c := command{byEnv: map[string]flagInfo{}, byName: map[string]flagInfo{}}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		m := helpFlagLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := flagInfo{name: m[1], typ: m[2]}
		if d := helpDefault.FindStringSubmatch(m[3]); d != nil {
			f.def = d[1]
		}
		if e := envAnnotation.FindStringSubmatch(m[3]); e != nil {
			f.env = e[1]
			c.byEnv[f.env] = f
		}
		c.byName[f.name] = f
	}
	if len(c.byEnv) == 0 {
		return command{}, fmt.Errorf("%s --help lists no [env X] annotation:\n%s", key, out)
	}
	helps[key] = c
	return c, nil
}

// checkValue reports whether v is a valid value of a flag of type typ.
func checkValue(typ, v string) error {
	var err error
	switch typ {
	case "duration":
		_, err = time.ParseDuration(v)
	case "int", "int32", "int64":
		_, err = strconv.ParseInt(v, 10, 64)
	case "uint", "uint32", "uint64":
		_, err = strconv.ParseUint(v, 10, 64)
	case "float", "float32", "float64":
		_, err = strconv.ParseFloat(v, 64)
	case "": // bool
		_, err = strconv.ParseBool(v)
	}
	return err
}
