package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeBlocks are the README's sections whose shell blocks run as printed against
// a `make run` cluster (TestDevRunsAClusterWhoseExampleCommandsWork), and the
// commands of its prose that do too.
var readmeBlocks = []string{"## Quickstart", "## Operating a cluster"}

// readmeProseCommands are commands the README shows inline, in backquotes, that a
// reader runs as printed.
var readmeProseCommands = regexp.MustCompile("`((?:bin/)?worker tail [^`]+)`")

// otherCluster matches a block that starts a cluster of its own rather than using
// the one `make run` started: never run here (it would reach for a cloud bucket).
var otherCluster = regexp.MustCompile(`(?m)(^|\s)(bin/)?master dev\b|make run`)

// readmeCommand is one command of the README: its text as printed (continuation
// lines joined) and whether it runs until interrupted (a watch, a follow, load).
type readmeCommand struct {
	text    string
	endless bool
}

// readmeCommands returns the README's runnable commands, in order: every line of
// the sh blocks of readmeBlocks (comments dropped, continuations joined) and the
// prose commands of "## Following a store"; a block that starts a cluster of its
// own (otherCluster) is left out.
func readmeCommands(t *testing.T, readme string) []readmeCommand {
	t.Helper()
	var cmds []readmeCommand
	add := func(text string) {
		text = strings.TrimSpace(text)
		endless := strings.Contains(text, " watch ") || strings.Contains(text, "--follow") ||
			strings.Contains(text, " load ") && !strings.Contains(text, "--duration")
		cmds = append(cmds, readmeCommand{text: text, endless: endless})
	}
	for _, heading := range readmeBlocks {
		section := markdownSection(readme, heading)
		if section == "" {
			t.Fatalf("README.md has no %q section", heading)
		}
		for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
			if otherCluster.MatchString(block[1]) {
				continue // starts a cluster of its own (on a bucket of the reader's)
			}
			var cont string
			for _, line := range strings.Split(block[1], "\n") {
				line = strings.TrimSpace(line)
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				if c, ok := strings.CutSuffix(line, "\\"); ok {
					cont += c
					continue
				}
				add(cont + line)
				cont = ""
			}
		}
	}
	for _, m := range readmeProseCommands.FindAllStringSubmatch(markdownSection(readme, "## Following a store"), -1) {
		add(m[1])
	}
	return cmds
}

// runReadmeCommands runs every command of the README against the dev cluster d, as a
// reader would after `make run`: from a directory holding the dev cluster's data/
// and bin/, with the default addresses the README prints mapped to the cluster's
// (its ports are drawn at random so tests can run side by side). A command that runs
// until interrupted runs for a few seconds and is then interrupted, as a reader
// would with Ctrl-C; every other command must exit 0.
func runReadmeCommands(t *testing.T, root string, b binaries, d *devRun, etcdAddr, masterGRPC, path string) {
	t.Helper()
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, exe := range []string{b.master, b.worker} {
		if err := os.Symlink(exe, filepath.Join(bin, filepath.Base(exe))); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	// The README's defaults (make run: w1..w3 on 8081..8083, etcd on 2379, the
	// master's admin gRPC on 7070 without a flag) -> this cluster's.
	workers := []string{d.workers["w1"], d.workers["w2"], d.workers["w2"]}
	rewrite := strings.NewReplacer(
		"http://127.0.0.1:8081", workers[0], "http://127.0.0.1:8082", workers[1], "http://127.0.0.1:8083", workers[2],
		"http://127.0.0.1:2379", "http://"+etcdAddr, "127.0.0.1:2379", etcdAddr,
	)
	env := []string{"PATH=" + bin + string(filepath.ListSeparator) + path, "HOME=" + os.Getenv("HOME"),
		"MASTER_ADDR=" + masterGRPC, "ETCD_ENDPOINTS=http://" + etcdAddr}
	readme := readFile(t, filepath.Join(moduleRoot(t), "README.md"))
	cmds := readmeCommands(t, readme)
	if len(cmds) < 8 {
		t.Fatalf("found %d commands in README.md, want the quickstart's, the operator's and worker tail's", len(cmds))
	}
	var exports []string // a block's `export`s hold for the commands after them
	for _, c := range cmds {
		text := rewrite.Replace(c.text)
		if strings.HasPrefix(text, "export ") {
			exports = append(exports, text)
			continue
		}
		if strings.HasPrefix(text, "etcdctl ") && !haveEtcdctlOnPath(path) {
			t.Logf("no etcdctl: skipped %q", c.text)
			continue
		}
		if strings.HasPrefix(text, "curl ") {
			if _, err := exec.LookPath("curl"); err != nil {
				t.Logf("no curl: skipped %q", c.text)
				continue
			}
		}
		script := strings.Join(append(slices.Clone(exports), text), "\n")
		if c.endless {
			// timeout's 124 is the interrupt a reader sends with Ctrl-C (the script runs
			// under sh -e, so the status is taken with ||).
			script = strings.Join(append(slices.Clone(exports), "rc=0; timeout -s INT 4 "+text+" || rc=$?; [ $rc -eq 124 ] || [ $rc -eq 0 ] || exit $rc"), "\n")
		}
		cmd := exec.Command("sh", "-ec", script)
		cmd.Dir = root
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("README.md's %q, as printed after make run: %v\n%s", c.text, err, out)
			continue
		}
		if strings.HasPrefix(text, "curl ") && strings.Contains(string(out), `"error"`) {
			t.Errorf("README.md's %q answered an error:\n%s", c.text, out)
		}
		if strings.Contains(text, "worker tail ") && !strings.Contains(string(out), "r1-0") {
			t.Errorf("README.md's %q printed %q, want the demo store's rows", c.text, out)
		}
	}
}

func haveEtcdctlOnPath(path string) bool {
	for _, dir := range filepath.SplitList(path) {
		if fi, err := os.Stat(filepath.Join(dir, "etcdctl")); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}
