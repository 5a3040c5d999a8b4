package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// devRun is one `master dev` process.
type devRun struct {
	*proc
	banner  string
	workers map[string]string // instance id -> HTTP base URL
}

var bannerWorker = regexp.MustCompile(`(?m)^\s+(w\d+)\s+HTTP (http://\S+)`)

// startDev runs `master dev` with args and waits for its banner.
func startDev(t *testing.T, logDir, name string, args []string, env map[string]string) *devRun {
	t.Helper()
	d := &devRun{proc: startProc(t, logDir, name, build(t).master, append([]string{"dev"}, args...), env)}
	t.Cleanup(func() { _ = d.stop(syscall.SIGINT, 60*time.Second) })
	testwait.ForEvery(t, time.Minute, poll, name+" prints its banner", func() (bool, string) {
		if d.exited() {
			t.Fatalf("%s exited while starting: %v\n%s", name, d.err, d.tail(30))
		}
		out, _ := os.ReadFile(d.logPath)
		return strings.Contains(string(out), "Finished tasks show below"), d.tail(5)
	})
	out, _ := os.ReadFile(d.logPath)
	d.banner = string(out)
	d.workers = map[string]string{}
	for _, m := range bannerWorker.FindAllStringSubmatch(d.banner, -1) {
		d.workers[m[1]] = m[2]
	}
	return d
}

// exampleCommands returns the banner's numbered examples: "1" -> its commands
// (continuation lines joined).
func exampleCommands(banner string) map[string][]string {
	out := map[string][]string{}
	for _, block := range strings.Split(banner, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		m := regexp.MustCompile(`^# (\d+)\.`).FindStringSubmatch(strings.TrimSpace(lines[0]))
		if m == nil {
			continue
		}
		var cmd string
		for _, l := range lines[1:] {
			l = strings.TrimSpace(l)
			if c, ok := strings.CutSuffix(l, "\\"); ok {
				cmd += c
				continue
			}
			out[m[1]] = append(out[m[1]], cmd+l)
			cmd = ""
		}
	}
	return out
}

// TestDevRunsAClusterWhoseExampleCommandsWork runs `master dev` as a user would:
// it starts etcd, a master and two worker processes, prints example commands
// that work as printed (add rows with curl, read tasks with etcdctl, requeue a
// merge with master admin and the dev token, merge through a worker's internal
// route with curl and the token, follow the store with worker tail, which finds
// a worker in etcd by itself), so do the README's (runReadmeCommands), it stops
// everything on SIGINT, and a second run reuses the data: the rows and the task
// are still there.
func TestDevRunsAClusterWhoseExampleCommandsWork(t *testing.T) {
	t.Parallel()
	skipShort(t)
	b := build(t)
	dir := t.TempDir()
	etcdAddr := freeAddr(t)
	masterGRPC := freeAddr(t)
	args := []string{
		"--dir", filepath.Join(dir, "data"), "--workers", "2", "--worker-binary", b.worker,
		"--etcd-addr", etcdAddr, "--master-grpc-addr", masterGRPC, "--master-http-addr", freeAddr(t),
		"--worker-http-port", "0", "--worker-grpc-port", "0", "--etcd-unsafe-no-fsync", "--echo-level", "error",
	}
	etcdctl, haveEtcdctl := lookEtcdctl()
	path := os.Getenv("PATH")
	if haveEtcdctl {
		path = filepath.Dir(etcdctl) + string(filepath.ListSeparator) + path
	} else if os.Getenv("CI") == "true" {
		t.Fatal("etcdctl not found: CI installs it with `make etcdctl`")
	}
	env := map[string]string{"PATH": path}
	sh := func(cmd string) string {
		t.Helper()
		c := exec.Command("sh", "-c", cmd)
		c.Env = []string{"PATH=" + path, "HOME=" + os.Getenv("HOME")}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("printed example %q: %v\n%s", cmd, err, out)
		}
		return string(out)
	}

	first := startDev(t, dir, "dev-1", args, env)
	if len(first.workers) != 2 {
		t.Fatalf("banner lists workers %v, want w1 and w2:\n%s", first.workers, first.banner)
	}
	examples := exampleCommands(first.banner)
	if len(examples["1"]) != 1 || len(examples["2"]) < 1 || len(examples["3"]) < 1 {
		t.Fatalf("banner examples %q, want 1 (add rows), 2 (etcdctl) and 3 (requeue a merge):\n%s", examples, first.banner)
	}
	addRows, getTasks := examples["1"][0], examples["2"][0]
	// Example 3 is a script: export AUTH_TOKEN_FILE, then master admin calls.
	requeue := ""
	for _, line := range examples["3"] {
		requeue += line + "\n"
		if strings.Contains(line, "requeue-merge") {
			break
		}
	}
	if !strings.Contains(requeue, "export AUTH_TOKEN_FILE=") {
		t.Fatalf("example 3 %q does not export AUTH_TOKEN_FILE for master admin", requeue)
	}
	if _, err := exec.LookPath("curl"); err == nil {
		if out := sh(addRows); !strings.Contains(out, `"count":2`) {
			t.Fatalf("%s\nanswered %q, want 2 rows added", addRows, out)
		}
	} else {
		t.Log("no curl: adding the example rows through Go instead")
		resp, err := http.Post(first.workers["w1"]+"/api/v1/rollouts/demo/records?flush=true", "application/json",
			strings.NewReader(`{"records":[{"id":"r1-0","rollout_id":"r1"},{"id":"r1-1","rollout_id":"r1"}]}`))
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("add rows: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	out := sh(requeue)
	id := regexp.MustCompile(`(?m)^id:\s+(\S+)`).FindStringSubmatch(out)
	if id == nil || !strings.Contains(out, "merge_wal") {
		t.Fatalf("%s\nprinted %q, want a merge_wal task", requeue, out)
	}
	testwait.ForEvery(t, 30*time.Second, poll, "the requeued merge shows as done in dev's output", func() (bool, string) {
		log, _ := os.ReadFile(first.logPath)
		return strings.Contains(string(log), "merge_wal demo done") && strings.Contains(string(log), id[1]), first.tail(3)
	})
	// The dev cluster's processes require its token: without it the same admin
	// call is refused, and the printed curl of a worker's internal route (which
	// sends it) is answered.
	noToken := exec.Command(b.master, "admin", "requeue-merge", "demo", "--addr", masterGRPC)
	noToken.Env = []string{"PATH=" + path, "HOME=" + os.Getenv("HOME")}
	if out, err := noToken.CombinedOutput(); err == nil || !strings.Contains(string(out), "refused the credential") {
		t.Errorf("master admin without the dev token: %v\n%s\nwant a refusal", err, out)
	}
	if len(examples["4"]) != 1 {
		t.Fatalf("banner example 4 %q, want one curl of a worker's internal merge route", examples["4"])
	}
	if _, err := exec.LookPath("curl"); err == nil {
		if out := sh(examples["4"][0]); !strings.Contains(out, `"generations"`) {
			t.Errorf("%s\nanswered %q, want a merge answer", examples["4"][0], out)
		}
	}
	// Example 5, `worker tail` as printed (without --follow, so it ends): it
	// finds a worker in the cluster's etcd by itself and prints the rows.
	if len(examples["5"]) != 1 || !strings.Contains(examples["5"][0], " tail rollouts/demo ") {
		t.Fatalf("banner example 5 %q, want one worker tail of the demo store", examples["5"])
	}
	tailOnce := strings.Replace(examples["5"][0], " --follow", "", 1)
	var tailed string
	testwait.ForEvery(t, 30*time.Second, poll, "worker tail prints the example rows", func() (bool, string) {
		tailed += sh(tailOnce) // a named consumer: each run prints what follows the last
		return strings.Contains(tailed, `"id":"r1-0"`) && strings.Contains(tailed, `"id":"r1-1"`), tailed
	})
	if haveEtcdctl {
		if out := sh(getTasks); !strings.Contains(out, `"id":"`+id[1]+`"`) || !strings.Contains(out, `"state":"done"`) {
			t.Errorf("%s\nprinted %q, want task %s done", getTasks, out, id[1])
		}
	}

	// The README's commands work as printed against the same cluster.
	runReadmeCommands(t, dir, b, first, etcdAddr, masterGRPC, path)

	if err := first.stop(syscall.SIGINT, time.Minute); err != nil {
		t.Fatalf("master dev on SIGINT: %v\n%s", err, first.tail(20))
	}
	if !strings.Contains(first.tail(3), "stopped; data kept in") {
		t.Errorf("master dev's last lines:\n%s\nwant a clean stop", first.tail(5))
	}
	for _, addr := range []string{etcdAddr, strings.TrimPrefix(first.workers["w1"], "http://"), strings.TrimPrefix(first.workers["w2"], "http://")} {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after master dev stopped", addr)
		}
	}

	// The second run finds the rows (through the other worker) and the task.
	second := startDev(t, dir, "dev-2", args, env)
	code, body, err := httpGet(second.workers["w2"] + "/api/v1/rollouts/demo/records/r1-0")
	var got struct {
		Record *struct {
			RolloutID string `json:"rollout_id"`
		} `json:"record"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &got) != nil || got.Record == nil || got.Record.RolloutID != "r1" {
		t.Errorf("second run: GET record r1-0 through w2: %d %s %v, want the record written by the first run", code, body, err)
	}
	if haveEtcdctl {
		if out := sh(getTasks); !strings.Contains(out, id[1]) {
			t.Errorf("second run: %s\nprinted %q, want the first run's task %s", getTasks, out, id[1])
		}
	}
	if err := second.stop(syscall.SIGINT, time.Minute); err != nil {
		t.Fatalf("second master dev on SIGINT: %v\n%s", err, second.tail(20))
	}
}
