package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// The binaries are built once per test run, into a directory removed at the end.
var (
	buildOnce sync.Once
	bins      binaries
	buildErr  error
)

type binaries struct {
	dir, master, worker string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
	}
	chaosBinary.remove()
	historyCheckBinary.remove()
	os.Exit(code)
}

// build builds master, worker and master-dev of this module once (go build uses
// its cache, so this is a link when nothing changed).
func build(t *testing.T) binaries {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			buildErr = err
			return
		}
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
			buildErr = fmt.Errorf("module root %s: %w", root, err)
			return
		}
		dir, err := os.MkdirTemp("", "tidemark-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		bins = binaries{dir: dir, master: filepath.Join(dir, "master"), worker: filepath.Join(dir, "worker")}
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		if os.Getenv("TIDEMARK_E2E_RACE") == "1" {
			args = append(args, "-race")
		}
		if chaosBuildTags { // chaos runs: binaries with the fault hook (tools/chaos)
			args = append(args, "-tags", "chaos")
		}
		// master-dev: `master dev` (the embedded etcd of every cluster here) execs it.
		args = append(args, "./cmd/master", "./cmd/worker", "./cmd/master-dev")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build the binaries: %v", buildErr)
	}
	return bins
}

// chaosWorker builds, once, a worker with the fault hook (-tags chaos): started
// with TIDEMARK_CHAOS_FAULTS_FILE, its object store follows that file (latency,
// errors, rules), so one process of a normal test cluster can be made slow.
func chaosWorker(t *testing.T) string {
	t.Helper()
	return chaosBinary.get(t, "worker", "-tags", "chaos", "./cmd/worker")
}

// goBuild builds a package of the module into out with go build's args (tags,
// the package), not under the race detector whatever the tests run under.
func goBuild(out string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// prebuilt is a binary of the module built once for the whole test run, outside
// the race detector (goBuild), in a temporary directory TestMain removes.
type prebuilt struct {
	once sync.Once
	path string
	err  error
}

// get builds the binary the first time it is asked for, named name, from go
// build's args, and returns its path; a failed build fails every test that asks.
func (p *prebuilt) get(t *testing.T, name string, args ...string) string {
	t.Helper()
	p.once.Do(func() {
		dir, err := os.MkdirTemp("", "tidemark-e2e-bin-")
		if err != nil {
			p.err = err
			return
		}
		p.path = filepath.Join(dir, name)
		p.err = goBuild(p.path, args...)
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.path
}

// remove deletes the binary's directory, if it was built.
func (p *prebuilt) remove() {
	if p.path != "" {
		_ = os.RemoveAll(filepath.Dir(p.path))
	}
}

// The binaries the tests build beside the production ones.
var chaosBinary, historyCheckBinary prebuilt

// seededRand is a random source of a new seed, which it logs so that a failed
// run can be read back to it; stream tells a test's sources apart.
func seededRand(t *testing.T, stream uint64) *rand.Rand {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(uint64(seed), stream))
}

// skipShort skips cluster tests under -short.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end cluster test: skipped with -short")
	}
}

// etcdctlPath finds the real etcdctl (lookEtcdctl). Missing, the test skips
// locally and fails in CI.
func etcdctlPath(t *testing.T) string {
	t.Helper()
	p, ok := lookEtcdctl()
	if ok {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("etcdctl not found in PATH, GOBIN or GOPATH/bin: CI installs it with `make etcdctl`")
	}
	t.Skip("etcdctl not found in PATH, GOBIN or GOPATH/bin: `make etcdctl` installs it")
	return ""
}

// lookEtcdctl looks for etcdctl in PATH, then GOBIN, then GOPATH/bin (where
// `make etcdctl` puts it).
func lookEtcdctl() (string, bool) {
	if p, err := exec.LookPath("etcdctl"); err == nil {
		return p, true
	}
	for _, v := range []string{"GOBIN", "GOPATH"} {
		out, err := exec.Command("go", "env", v).Output()
		d := strings.TrimSpace(string(out))
		if err != nil || d == "" {
			continue
		}
		if v == "GOPATH" {
			d = filepath.Join(filepath.SplitList(d)[0], "bin")
		}
		p := filepath.Join(d, "etcdctl")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, true
		}
	}
	return "", false
}

// freeAddr returns a loopback address with a port that was free a moment ago, for
// a process the test starts next to listen on. The port is drawn below the
// kernel's ephemeral range: a port the kernel hands out (":0") may be given, once
// closed, to the next outgoing connection as its local port, which then makes the
// process's listen fail with "address already in use" (seen in the e2e suite with
// a benchmark running beside it). Outgoing connections never take ports below that
// range, and a random draw keeps concurrent tests apart.
func freeAddr(t *testing.T) string {
	t.Helper()
	lo, hi := belowEphemeral()
	for range 100 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo)))
		if err != nil {
			continue // taken: draw again
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// belowEphemeral is a port range under the kernel's ephemeral ports
// (/proc/sys/net/ipv4/ip_local_port_range; Linux's default starts at 32768).
func belowEphemeral() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 22000 {
				hi = n
			}
		}
	}
	return 20000, hi
}

// proc is one child process.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// startProc starts bin args with exactly env (plus PATH and HOME), output to a
// log file in dir.
func startProc(t *testing.T, dir, name, bin string, args []string, env map[string]string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill kills the process with SIGKILL and waits for it.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop sends sig and waits up to timeout, then kills; it reports how the
// process exited, or that it had to be killed.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) error {
	if p.exited() {
		return p.err
	}
	p.signal(syscall.SIGCONT) // a stopped process cannot handle sig
	p.signal(sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s still running %s after %v: killed", p.name, timeout, sig)
	}
}

func (p *proc) tail(n int) string {
	data, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cluster is etcd (run by `master dev --workers 0 --master=false`), masters and
// workers, each a process of the built binaries.
type cluster struct {
	t       *testing.T
	bin     binaries
	dir     string
	etcdURL string
	prefix  string
	dataURL string
	// dataEnv is what every process needs to open dataURL (credentials, an
	// endpoint): nothing for a file:// store.
	dataEnv map[string]string
	client  *clientv3.Client

	etcd    *proc
	mu      sync.Mutex
	procs   []*proc
	workers map[string]*workerProc
	masters map[string]*masterProc

	// WorkerEnv and MasterEnv override the test defaults of every worker and master.
	workerEnv, masterEnv map[string]string

	// tokenPath is the cluster's token file (AUTH_TOKEN_FILE of every process and
	// of `master admin`), written on first use; it holds e2eToken.
	tokenPath string
	// For clusters serving TLS (auth_test.go): scheme is "https", httpc trusts the
	// cluster's CA (and presents a client certificate), adminEnv is the TLS
	// client settings of `master admin`. Zero: plaintext.
	scheme   string
	httpc    *http.Client
	adminEnv map[string]string
}

// e2eToken is the bearer token every test cluster's processes accept: made once
// per test binary and never changed, so httpGet can send it to any cluster.
var e2eToken = func() string {
	tok, err := auth.GenerateToken()
	if err != nil {
		panic(err)
	}
	return tok
}()

// tokenFile returns the cluster's token file, writing it (0600) on first use.
func (c *cluster) tokenFile() string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokenPath == "" {
		p := filepath.Join(c.dir, "auth-token")
		if err := os.WriteFile(p, []byte(e2eToken+"\n"), 0o600); err != nil {
			c.t.Fatal(err)
		}
		c.tokenPath = p
	}
	return c.tokenPath
}

// base is the URL of a server's HTTP address in this cluster.
func (c *cluster) base(addr string) string {
	if c.scheme != "" {
		return c.scheme + "://" + addr
	}
	return "http://" + addr
}

// get is httpGet through the cluster's client (TLS when the cluster serves it).
func (c *cluster) get(u string) (int, []byte, error) {
	if c.httpc != nil {
		return httpGetWith(c.httpc, u)
	}
	return httpGet(u)
}

type workerProc struct {
	*proc
	id, httpAddr, grpcAddr string
	scheme                 string // "" is http
}

func (w *workerProc) url() string {
	if w.scheme != "" {
		return w.scheme + "://" + w.httpAddr
	}
	return "http://" + w.httpAddr
}

type masterProc struct {
	*proc
	name, grpcAddr, httpAddr string
}

// newCluster starts etcd; tests start masters and workers, which keep their
// stores in a file:// directory of the test. Everything is stopped when the test
// ends, and every process's log tail is printed if it failed.
func newCluster(t *testing.T, workerEnv, masterEnv map[string]string) *cluster {
	t.Helper()
	return newClusterOn(t, dataStore{}, workerEnv, masterEnv)
}

// newClusterOn is newCluster with the stores in store (zero: the file://
// directory), e.g. a MinIO bucket.
func newClusterOn(t *testing.T, store dataStore, workerEnv, masterEnv map[string]string) *cluster {
	t.Helper()
	skipShort(t)
	c := &cluster{
		t: t, bin: build(t), dir: t.TempDir(), prefix: "/tidemark",
		workers: map[string]*workerProc{}, masters: map[string]*masterProc{},
		workerEnv: workerEnv, masterEnv: masterEnv,
		dataURL: store.url, dataEnv: store.env,
	}
	devDir := filepath.Join(c.dir, "dev")
	if c.dataURL == "" {
		c.dataURL = "file://" + filepath.Join(devDir, "store")
	}
	addr := freeAddr(t)
	c.etcdURL = "http://" + addr
	c.etcd = startProc(t, c.dir, "etcd", c.bin.master,
		[]string{"dev", "--dir", devDir, "--workers", "0", "--master=false", "--etcd-addr", addr, "--etcd-unsafe-no-fsync"}, nil)
	t.Cleanup(c.shutdown)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	c.client = client
	testwait.ForEvery(c.t, 30*time.Second, poll, "etcd answers", func() (bool, string) {
		if c.etcd.exited() {
			t.Fatalf("master dev (etcd) exited: %v\n%s", c.etcd.err, c.etcd.tail(20))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.client.Get(ctx, "probe")
		return err == nil, fmt.Sprint(err)
	})
	return c
}

func (c *cluster) track(p *proc) {
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
}

// shutdown stops masters, then workers, then etcd; dumps logs if the test failed.
func (c *cluster) shutdown() {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range c.masters {
		wg.Go(func() { _ = m.stop(syscall.SIGTERM, 10*time.Second) })
	}
	wg.Wait()
	for _, w := range c.workers {
		wg.Go(func() { _ = w.stop(syscall.SIGTERM, 10*time.Second) })
	}
	wg.Wait()
	for _, p := range procs { // replaced processes, already stopped
		p.kill()
	}
	if c.client != nil {
		_ = c.client.Close()
	}
	if c.etcd != nil { // nil: the test runs etcd itself (etcd_tls_test.go)
		if err := c.etcd.stop(syscall.SIGINT, 20*time.Second); err != nil {
			c.t.Errorf("master dev (etcd) did not stop cleanly on SIGINT: %v", err)
		}
		procs = append(procs, c.etcd)
	}
	if c.t.Failed() {
		for _, p := range procs {
			c.t.Logf("----- last lines of %s (%s) -----\n%s", p.name, p.logPath, p.tail(40))
		}
	}
}

// startWorker starts worker id, on the ports it had before if it ran already,
// and waits until it serves and registered in etcd.
func (c *cluster) startWorker(id string) *workerProc {
	c.t.Helper()
	return c.startWorkerWith(id, c.bin.worker, nil)
}

// startWorkerWith is startWorker with another worker binary (e.g. a chaos build's)
// and environment of its own on top of the cluster's.
func (c *cluster) startWorkerWith(id, bin string, extra map[string]string) *workerProc {
	c.t.Helper()
	w := c.workers[id]
	if w == nil {
		w = &workerProc{id: id, httpAddr: freeAddr(c.t), grpcAddr: freeAddr(c.t), scheme: c.scheme}
	} else if !w.exited() {
		c.t.Fatalf("worker %s is still running", id)
	}
	env := map[string]string{
		"INSTANCE_ID":      id,
		"HTTP_ADDR":        w.httpAddr,
		"GRPC_ADDR":        w.grpcAddr,
		"DATA_URL":         c.dataURL,
		"ETCD_ENDPOINTS":   c.etcdURL,
		"ETCD_PREFIX":      c.prefix,
		"FLUSH_INTERVAL":   "1s",
		"LEASE_TTL":        "4s", // a killed worker leaves the list soon
		"SHUTDOWN_TIMEOUT": "5s",
		"LOG_LEVEL":        "debug",
		"AUTH_TOKEN_FILE":  c.tokenFile(),
	}
	for _, over := range []map[string]string{c.dataEnv, c.workerEnv, extra} {
		for k, v := range over {
			env[k] = v
		}
	}
	c.workers[id] = w
	key := c.prefix + "/workers/" + id
	for attempt := 1; ; attempt++ {
		env["HTTP_ADDR"], env["GRPC_ADDR"] = w.httpAddr, w.grpcAddr
		started := time.Now()
		w.proc = startProc(c.t, c.dir, id, bin, []string{"serve"}, env)
		c.track(w.proc)
		if !c.waitWorker(w, key, started, attempt) {
			return w
		}
		w.httpAddr, w.grpcAddr = freeAddr(c.t), freeAddr(c.t)
	}
}

// maxBindAttempts is how many times a process whose port was taken between
// freeAddr and its listen is started again on new ports.
const maxBindAttempts = 5

// lostPortRace says whether p exited because a port freeAddr drew free was taken
// before p listened on it: another test's process drew the same port. Nothing of
// the test has happened yet, so starting it again on other ports is safe.
func lostPortRace(p *proc, attempt int) bool {
	return attempt < maxBindAttempts && strings.Contains(p.tail(20), "address already in use")
}

// exitedWhileStarting answers for p (what names it), which exited before it
// served: true if it lost a port race and must be started again on new ports;
// otherwise the test fails with p's last lines.
func (c *cluster) exitedWhileStarting(p *proc, what string, attempt int) bool {
	c.t.Helper()
	if lostPortRace(p, attempt) {
		return true
	}
	c.t.Fatalf("%s exited while starting: %v\n%s", what, p.err, p.tail(20))
	return false
}

// waitWorker waits until w serves and is registered at key, after a start at
// started; true: it lost a port race and must be started again on new ports.
func (c *cluster) waitWorker(w *workerProc, key string, started time.Time, attempt int) (rebind bool) {
	c.t.Helper()
	id := w.id
	testwait.ForEvery(c.t, 30*time.Second, poll, "worker "+id+" serves and is registered", func() (bool, string) {
		if w.exited() {
			rebind = c.exitedWhileStarting(w.proc, "worker "+id, attempt)
			return true, ""
		}
		if _, err := c.dataClient(w.url()).Health(context.Background()); err != nil {
			return false, fmt.Sprintf("health: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := c.client.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			return false, fmt.Sprintf("%s not in etcd (%v)", key, err)
		}
		var rec struct {
			StartedAt time.Time `json:"started_at"`
			GRPCAddr  string    `json:"grpc_addr"`
		}
		if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
			return false, err.Error()
		}
		// A record of an earlier (killed) process of this id may still be there.
		return rec.StartedAt.After(started.Add(-time.Second)) && rec.GRPCAddr == w.grpcAddr, string(resp.Kvs[0].Value)
	})
	return rebind
}

// startMaster starts a master named name and waits until it is healthy.
func (c *cluster) startMaster(name string, extra map[string]string) *masterProc {
	c.t.Helper()
	m := &masterProc{name: name, grpcAddr: freeAddr(c.t), httpAddr: freeAddr(c.t)}
	env := map[string]string{
		"ETCD_ENDPOINTS":            c.etcdURL,
		"ETCD_PREFIX":               c.prefix,
		"DATA_URL":                  c.dataURL,
		"GRPC_ADDR":                 m.grpcAddr,
		"HTTP_ADDR":                 m.httpAddr,
		"MASTER_ID":                 name,
		"STATS_SCAN_INTERVAL":       "1s",
		"MERGE_WAL_INTERVAL":        "1s",
		"MERGE_WAL_MIN_GENERATIONS": "2",
		"LEASE_TTL":                 "3s",
		"SHUTDOWN_TIMEOUT":          "5s",
		"LOG_LEVEL":                 "debug",
		"AUTH_TOKEN_FILE":           c.tokenFile(),
	}
	for _, over := range []map[string]string{c.dataEnv, c.masterEnv, extra} {
		for k, v := range over {
			env[k] = v
		}
	}
	c.masters[name] = m
	for attempt := 1; ; attempt++ {
		env["GRPC_ADDR"], env["HTTP_ADDR"] = m.grpcAddr, m.httpAddr
		m.proc = startProc(c.t, c.dir, name, c.bin.master, []string{"serve"}, env)
		c.track(m.proc)
		rebind := false
		testwait.ForEvery(c.t, 30*time.Second, poll, "master "+name+" is healthy", func() (bool, string) {
			if m.exited() {
				rebind = c.exitedWhileStarting(m.proc, "master "+name, attempt)
				return true, ""
			}
			code, body, err := c.get(c.base(m.httpAddr) + "/api/v1/health")
			return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
		})
		if !rebind {
			return m
		}
		m.grpcAddr, m.httpAddr = freeAddr(c.t), freeAddr(c.t)
	}
}

// poll is how often at most the tests check what they wait for
// (testwait.ForEvery): a check is an HTTP round trip through real processes or a
// process of its own (etcdctl, master admin).
const poll = 100 * time.Millisecond

// admin runs `master admin <args> --addr <master> -o json` with the cluster's
// token (and TLS client settings) and returns stdout.
func (c *cluster) admin(m *masterProc, args ...string) []byte {
	c.t.Helper()
	cmd := c.adminCmd(m, args...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		c.t.Fatalf("master %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, stderr)
	}
	return out
}

// adminCmd is the command `master admin args` against m, JSON output, with the

// requeueMerge enqueues a merge_wal task of target through m's AdminService
// (`master admin requeue-merge`) and returns the task's id.
func (c *cluster) requeueMerge(m *masterProc, target string) string {
	c.t.Helper()
	var requeued struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	out := c.admin(m, "requeue-merge", target)
	if err := json.Unmarshal(out, &requeued); err != nil || requeued.Task.ID == "" {
		c.t.Fatalf("requeue-merge %s answer %q: %v", target, out, err)
	}
	return requeued.Task.ID
}

// cluster's credentials.
func (c *cluster) adminCmd(m *masterProc, args ...string) *exec.Cmd {
	args = append(append([]string{"admin"}, args...), "--addr", m.grpcAddr, "-o", "json")
	cmd := exec.Command(c.bin.master, args...)
	cmd.Env = append(os.Environ(), "AUTH_TOKEN_FILE="+c.tokenFile(), "AUTH_TOKEN=")
	for k, v := range c.adminEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// etcdctl runs the real etcdctl against the cluster and returns stdout.
func (c *cluster) etcdctl(path string, args ...string) string {
	c.t.Helper()
	args = append([]string{"--endpoints", c.etcdURL}, args...)
	cmd := exec.Command(path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// task is a task record as etcdctl prints it (P/tasks/<id>).
type task struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Target     string    `json:"target"`
	State      string    `json:"state"`
	Error      string    `json:"error"`
	Detail     string    `json:"detail"`
	Attempts   int       `json:"attempts"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Stats are a few of the counts the record keeps beside its detail.
	Stats struct {
		Workers           count `json:"workers"`
		WorkersMerged     count `json:"workers_merged"`
		GenerationsMerged count `json:"generations_merged"`
	} `json:"stats"`
}

// count is a task stat as the etcd record has it (a JSON number) or as master
// admin -o json prints it (protojson writes int64 as a JSON string).
type count int64

func (c *count) UnmarshalJSON(data []byte) error {
	n, err := strconv.ParseInt(strings.Trim(string(data), `"`), 10, 64)
	*c = count(n)
	return err
}

// tasksInEtcd reads every task record with etcdctl.
func (c *cluster) tasksInEtcd(etcdctl string) []task {
	c.t.Helper()
	out := c.etcdctl(etcdctl, "get", "--prefix", c.prefix+"/tasks/", "--print-value-only")
	var list []task
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var tk task
		if err := json.Unmarshal([]byte(line), &tk); err != nil {
			c.t.Fatalf("etcdctl printed a task record that is not JSON: %q: %v", line, err)
		}
		list = append(list, tk)
	}
	return list
}

// tasksNow reads the task records with the client (for polling).
func (c *cluster) tasksNow() []task {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.client.Get(ctx, c.prefix+"/tasks/", clientv3.WithPrefix())
	if err != nil {
		return nil
	}
	var out []task
	for _, kv := range resp.Kvs {
		var tk task
		if json.Unmarshal(kv.Value, &tk) == nil {
			out = append(out, tk)
		}
	}
	return out
}

// awaitNoLiveTask waits until every task is done or failed (a sweep may have
// enqueued one more merge from stats older than the last merge).
func (c *cluster) awaitNoLiveTask() {
	c.t.Helper()
	testwait.ForEvery(c.t, 30*time.Second, poll, "no task is queued or running", func() (bool, string) {
		for _, tk := range c.tasksNow() {
			if tk.State == "queued" || tk.State == "running" {
				return false, fmt.Sprintf("task %s (%s %s) is %s", tk.ID, tk.Kind, tk.Target, tk.State)
			}
		}
		return true, ""
	})
}

// statsRow is the master's stats row of a target (GET /api/v1/stats).
type statsRow struct {
	Target                string `json:"target"`
	RowCount              int64  `json:"row_count"`
	PendingWALGenerations int    `json:"pending_wal_generations"`
}

func (c *cluster) stats(m *masterProc) map[string]statsRow {
	code, body, err := c.get(c.base(m.httpAddr) + "/api/v1/stats?limit=1000")
	if err != nil || code != http.StatusOK {
		return nil
	}
	var page struct {
		Stats []statsRow `json:"stats"`
	}
	if json.Unmarshal(body, &page) != nil {
		return nil
	}
	out := map[string]statsRow{}
	for _, r := range page.Stats {
		out[r.Target] = r
	}
	return out
}

// target is the target string of a store.
func target(kind loadgen.Kind, store string) string {
	if kind == loadgen.KindGeneric {
		return "generic:" + store
	}
	return store
}

// dataKind is the data API's kind of a loadgen kind.
func dataKind(kind loadgen.Kind) client.Kind {
	if kind == loadgen.KindGeneric {
		return client.Generic
	}
	return client.Rollouts
}

// dataClient is a pkg/client of the worker at base with the test clusters'
// token (e2eToken), through hc when given (a probing transport, a TLS client),
// each call bounded by 10 s. It answers lists of any size: the tests list whole
// stores.
func dataClient(base string, hc ...*http.Client) *client.Client {
	opts := []client.Option{client.WithToken(e2eToken), client.WithTimeout(10 * time.Second), client.WithMaxAnswer(1 << 40)}
	if len(hc) > 0 && hc[0] != nil {
		opts = append(opts, client.WithHTTPClient(hc[0]))
	}
	wc, err := client.New(base, opts...)
	if err != nil {
		panic(err) // base is a URL the harness made
	}
	return wc
}

// dataClient is dataClient through the cluster's client (TLS when the cluster
// serves it).
func (c *cluster) dataClient(base string) *client.Client { return dataClient(base, c.httpc) }

// listIDs lists every row id of a store through one worker (no limit: one
// streamed answer from one snapshot), ids repeated as often as the worker
// returns them.
func listIDs(base string, kind loadgen.Kind, store string) ([]string, error) {
	page, err := dataClient(base).ListRows(context.Background(), dataKind(kind), store, client.ListOptions{})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(page.Rows))
	for i, raw := range page.Rows {
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, err
		}
		ids[i] = r.ID
	}
	return ids, nil
}

// exactlyOnce compares what a worker lists with what was written: every acked id
// once, nothing twice, nothing that was never sent. It returns "" when all holds.
func exactlyOnce(listed []string, acked, maybe map[string]bool) string {
	seen := map[string]int{}
	var problems []string
	for _, id := range listed {
		seen[id]++
		if seen[id] == 2 {
			problems = append(problems, "duplicate "+id)
		}
		if !acked[id] && !maybe[id] && seen[id] == 1 {
			problems = append(problems, "never written "+id)
		}
	}
	missing := 0
	example := ""
	for id := range acked {
		if seen[id] == 0 {
			missing++
			example = id
		}
	}
	if missing > 0 {
		problems = append(problems, fmt.Sprintf("%d acknowledged rows missing (e.g. %s)", missing, example))
	}
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
	}
	return strings.Join(problems, "; ")
}

// httpGet GETs u with the test clusters' token (e2eToken): the master's task
// routes need it, the other routes ignore it.
func httpGet(u string) (int, []byte, error) {
	return httpGetWith(&http.Client{Timeout: 10 * time.Second}, u)
}

func httpGetWith(client *http.Client, u string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	auth.SetHeader(req.Header, e2eToken)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// ledger records what a load run wrote: acknowledged ids, and ids whose request
// failed (written or not: unknown), per kind.
type ledger struct {
	mu    sync.Mutex
	acked map[loadgen.Kind]map[string]bool
	maybe map[loadgen.Kind]map[string]bool
}

func newLedger() *ledger {
	l := &ledger{acked: map[loadgen.Kind]map[string]bool{}, maybe: map[loadgen.Kind]map[string]bool{}}
	for _, k := range []loadgen.Kind{loadgen.KindRollout, loadgen.KindGeneric} {
		l.acked[k], l.maybe[k] = map[string]bool{}, map[string]bool{}
	}
	return l
}

func (l *ledger) record(b loadgen.Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	dst := l.acked[b.Kind]
	if b.Err != nil {
		dst = l.maybe[b.Kind]
	}
	for _, id := range b.IDs {
		dst[id] = true
	}
}

func (l *ledger) counts() (acked, maybe int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.acked {
		acked += len(l.acked[k])
		maybe += len(l.maybe[k])
	}
	return acked, maybe
}

// backgroundLoad runs the load generator with cfg until the returned stop is
// called (or the test ends); stop waits for the requests in flight and returns
// the run's figures. A run loadgen refuses to start fails the test.
func backgroundLoad(t *testing.T, cfg loadgen.Config) (stop func() loadgen.Stats) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan loadgen.Stats, 1)
	go func() {
		st, err := loadgen.Run(ctx, cfg)
		if err != nil {
			t.Errorf("load: %v", err)
		}
		done <- st
	}()
	var (
		once sync.Once
		st   loadgen.Stats
	)
	stop = func() loadgen.Stats {
		once.Do(func() {
			cancel()
			st = <-done
		})
		return st
	}
	t.Cleanup(func() { stop() })
	return stop
}

// awaitMergedExactlyOnce waits until the master's stats say a store has no
// pending generation and as many live rows as every worker lists, and every
// worker lists each acknowledged row exactly once. Only the master's sweeps and
// tasks merge: generations below its threshold stay pending.
func (c *cluster) awaitMergedExactlyOnce(m *masterProc, l *ledger, kind loadgen.Kind, store string, timeout time.Duration) {
	c.t.Helper()
	tg := target(kind, store)
	l.mu.Lock()
	acked, maybe := l.acked[kind], l.maybe[kind]
	l.mu.Unlock()
	testwait.ForEvery(c.t, timeout, poll, tg+" merged and readable exactly once through every worker", func() (bool, string) {
		var counts []int
		for _, id := range sortedIDs(c.workers) {
			w := c.workers[id]
			ids, err := listIDs(w.url(), kind, store)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", id, err)
			}
			if p := exactlyOnce(ids, acked, maybe); p != "" {
				return false, fmt.Sprintf("%s: %s", id, p)
			}
			counts = append(counts, len(ids))
		}
		for _, n := range counts[1:] {
			if n != counts[0] {
				return false, fmt.Sprintf("workers list different row counts: %v", counts)
			}
		}
		row, ok := c.stats(m)[tg]
		if !ok {
			return false, "no stats row yet"
		}
		status := fmt.Sprintf("stats: %d rows, %d pending generations; workers list %d rows", row.RowCount, row.PendingWALGenerations, counts[0])
		return row.PendingWALGenerations == 0 && row.RowCount == int64(counts[0]), status
	})
}

func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// TestAWorkerWhosePortWasTakenStartsOnOthers tries the race lostPortRace covers:
// another process listens on the port freeAddr drew for a worker before the
// worker does. The harness starts it again on new ports instead of failing a
// test that has not begun.
func TestAWorkerWhosePortWasTakenStartsOnOthers(t *testing.T) {
	c := newCluster(t, nil, nil)
	held, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// A worker of this id that ran and exited, on the held port: startWorker
	// starts it again on the ports it had.
	gone := startProc(t, c.dir, "gone", "true", nil, nil)
	<-gone.done
	c.workers["w1"] = &workerProc{proc: gone, id: "w1", httpAddr: held.Addr().String(), grpcAddr: freeAddr(t)}
	w := c.startWorker("w1")
	if w.httpAddr == held.Addr().String() {
		t.Fatalf("worker serves on %s, which another listener holds", w.httpAddr)
	}
	if !strings.Contains(w.tail(1000), "address already in use") {
		t.Fatalf("the worker's first start did not lose its port:\n%s", w.tail(40))
	}
}
