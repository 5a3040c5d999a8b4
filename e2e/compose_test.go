package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// composeService is the part of a docker-compose service the test checks.
type composeService struct {
	Build       any            `json:"build"`
	Image       string         `json:"image"`
	Command     []string       `json:"command"`
	Environment map[string]any `json:"environment"`
	Ports       []string       `json:"ports"`
	Volumes     []string       `json:"volumes"`
	DependsOn   []string       `json:"depends_on"`
}

// flagInfo is one flag of a subcommand, read from its --help.
type flagInfo struct {
	name, typ, env string
}

// helpFlagLine matches a pflag usage line: "  -o, --name type   usage".
var helpFlagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: ([a-zA-Z0-9]+))?\s{2,}(.*)$`)

var envAnnotation = regexp.MustCompile(`\[env ([A-Z0-9_]+)\]`)

// commandEnv runs `<bin> <args> --help` and returns the flags by environment
// variable: the binary's own word on what it reads.
func commandEnv(t *testing.T, bin string, args []string) map[string]flagInfo {
	t.Helper()
	out, err := exec.Command(bin, append(slices.Clone(args), "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s --help: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	env := map[string]flagInfo{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		m := helpFlagLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if e := envAnnotation.FindStringSubmatch(m[3]); e != nil {
			env[e[1]] = flagInfo{name: m[1], typ: m[2], env: e[1]}
		}
	}
	if len(env) == 0 {
		t.Fatalf("%s %s --help lists no [env X] annotation:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	}
	return env
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

// envString renders a YAML scalar the way compose passes it to the container.
func envString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		return fmt.Sprint(x)
	}
}

// dockerfileEnv reads the ENV lines of the Dockerfile's final stage.
func dockerfileEnv(t *testing.T, dockerfile string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, line := range strings.Split(dockerfile, "\n") {
		if strings.HasPrefix(line, "FROM ") {
			clear(env) // only the final stage's ENV reaches the container
		}
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("Dockerfile: ENV %q: want KEY=VALUE pairs", rest)
				}
				env[k] = v
			}
		}
	}
	return env
}

// TestComposeFileMatchesTheBinaries checks docker-compose.yml without a Docker
// engine: every Tidemark service runs a real subcommand of a binary the
// Dockerfile builds and installs, sets only environment variables that
// subcommand reads (with values of the right type), listens on 0.0.0.0 on the
// ports it publishes, reaches etcd at the address etcd advertises, registers a
// worker address other containers can dial, and keeps DATA_URL on the shared
// volume. The guarded failure: a renamed flag or variable that leaves the
// compose file silently running on defaults.
func TestComposeFileMatchesTheBinaries(t *testing.T) {
	t.Parallel()
	b := build(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	var compose struct {
		Services map[string]composeService `json:"services"`
		Volumes  map[string]any            `json:"volumes"`
	}
	if err := yaml.Unmarshal([]byte(read("docker-compose.yml")), &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	dockerfile := read("Dockerfile")
	for _, want := range []string{"./cmd/worker", "./cmd/master", "/out/worker /out/master /usr/local/bin/"} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("Dockerfile does not contain %q: it must build and install both binaries", want)
		}
	}
	imageEnv := dockerfileEnv(t, dockerfile)
	binaryOf := map[string]string{"worker": b.worker, "master": b.master}

	// etcd: the version the code is built against, and where it is reached.
	etcd, ok := compose.Services["etcd"]
	if !ok {
		t.Fatal("docker-compose.yml has no etcd service")
	}
	etcdVersion := regexp.MustCompile(`go\.etcd\.io/etcd/server/v3 (v[0-9.]+)`).FindStringSubmatch(read("go.mod"))
	if etcdVersion == nil || !strings.HasSuffix(etcd.Image, ":"+etcdVersion[1]) {
		t.Errorf("etcd image %q: want the version of go.etcd.io/etcd/server/v3 in go.mod (%v)", etcd.Image, etcdVersion)
	}
	var etcdAdvertised []string
	for _, arg := range etcd.Command {
		if v, ok := strings.CutPrefix(arg, "--advertise-client-urls="); ok {
			etcdAdvertised = strings.Split(v, ",")
		}
	}
	if len(etcdAdvertised) == 0 {
		t.Fatalf("etcd command %v sets no --advertise-client-urls", etcd.Command)
	}

	kinds := map[string][]string{}
	hostPorts := map[string]string{}
	instanceIDs := map[string]string{}
	dataURLs := map[string]bool{}
	for name, svc := range compose.Services {
		for _, p := range svc.Ports {
			hp := p[:strings.LastIndex(p, ":")]
			if other, dup := hostPorts[hp]; dup {
				t.Errorf("services %s and %s both publish %s", other, name, hp)
			}
			hostPorts[hp] = name
		}
		if name == "etcd" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			if len(svc.Command) < 2 || binaryOf[svc.Command[0]] == "" {
				t.Fatalf("command %v: want [worker serve] or [master serve]", svc.Command)
			}
			kinds[svc.Command[0]] = append(kinds[svc.Command[0]], name)
			if svc.Build != "." || svc.Image == "" {
				t.Errorf("build %v, image %q: want the repository's Dockerfile (build: .) and an image name", svc.Build, svc.Image)
			}
			known := commandEnv(t, binaryOf[svc.Command[0]], svc.Command[1:])
			env := map[string]string{}
			for k, v := range imageEnv {
				env[k] = v
			}
			for k, v := range svc.Environment {
				f, ok := known[k]
				if !ok {
					t.Errorf("environment %s: `%s --help` lists no such variable", k, strings.Join(svc.Command, " "))
					continue
				}
				env[k] = envString(v)
				if err := checkValue(f.typ, env[k]); err != nil {
					t.Errorf("environment %s=%q: not a valid %s for --%s: %v", k, env[k], f.typ, f.name, err)
				}
			}
			for k := range imageEnv {
				if _, ok := known[k]; !ok {
					t.Errorf("the Dockerfile sets %s, which `%s --help` does not list", k, strings.Join(svc.Command, " "))
				}
			}

			// Listeners: on every interface, each port published, nothing else published.
			var listenPorts []string
			for _, k := range []string{"HTTP_ADDR", "GRPC_ADDR"} {
				host, port, err := net.SplitHostPort(env[k])
				if err != nil {
					t.Errorf("%s=%q: %v (the image or the service must set it)", k, env[k], err)
					continue
				}
				if host != "0.0.0.0" && host != "" {
					t.Errorf("%s=%q listens on %s only: other containers and the host cannot reach it", k, env[k], host)
				}
				listenPorts = append(listenPorts, port)
			}
			var published []string
			for _, p := range svc.Ports {
				published = append(published, p[strings.LastIndex(p, ":")+1:])
			}
			slices.Sort(listenPorts)
			slices.Sort(published)
			if !slices.Equal(listenPorts, published) {
				t.Errorf("publishes container ports %v, listens on %v", published, listenPorts)
			}

			// etcd: exactly where etcd advertises itself.
			eps := strings.Split(env["ETCD_ENDPOINTS"], ",")
			if slices.Compare(eps, etcdAdvertised) != 0 {
				t.Errorf("ETCD_ENDPOINTS=%q, etcd advertises %v", env["ETCD_ENDPOINTS"], etcdAdvertised)
			}
			if !slices.Contains(svc.DependsOn, "etcd") {
				t.Errorf("depends_on %v: want etcd", svc.DependsOn)
			}

			// Storage: a file:// URL inside the shared named volume.
			u, err := url.Parse(env["DATA_URL"])
			if err != nil || u.Scheme != "file" {
				t.Errorf("DATA_URL=%q: want file:// on the shared volume", env["DATA_URL"])
			} else {
				onVolume := false
				for _, v := range svc.Volumes {
					parts := strings.Split(v, ":")
					if len(parts) >= 2 && compose.Volumes != nil && hasKey(compose.Volumes, parts[0]) &&
						strings.HasPrefix(u.Path+"/", strings.TrimSuffix(parts[1], "/")+"/") {
						onVolume = true
					}
				}
				if !onVolume {
					t.Errorf("DATA_URL=%q is not inside a named volume of %v", env["DATA_URL"], svc.Volumes)
				}
				dataURLs[env["DATA_URL"]] = true
			}

			if svc.Command[0] == "worker" {
				id := env["INSTANCE_ID"]
				if id == "" {
					t.Error("INSTANCE_ID is not set: the shard name would be the container's hostname, new on every recreate")
				} else if other, dup := instanceIDs[id]; dup {
					t.Errorf("INSTANCE_ID %s is also %s's", id, other)
				}
				instanceIDs[id] = name
				for adv, listen := range map[string]string{"ADVERTISE_GRPC_ADDR": "GRPC_ADDR", "ADVERTISE_HTTP_ADDR": "HTTP_ADDR"} {
					_, lport, _ := net.SplitHostPort(env[listen])
					if want := net.JoinHostPort(name, lport); env[adv] != want {
						t.Errorf("%s=%q: other containers reach this worker at %s", adv, env[adv], want)
					}
				}
			}
		})
	}
	if len(kinds["master"]) != 1 || len(kinds["worker"]) != 3 {
		t.Errorf("services by binary: %v, want one master and three workers", kinds)
	}
	if len(dataURLs) > 1 {
		t.Errorf("services use different DATA_URLs %v: the master and every worker must share one store", dataURLs)
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}
