package devcluster

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/testutil/testlog"
)

func TestChildEnvIsDefaultsUnderTheEnvironmentUnderTheCluster(t *testing.T) {
	got := ChildEnv("worker",
		[]string{"FLUSH_INTERVAL=1s", "HTTP_ADDR=0.0.0.0:1", "HOME=/root"},
		[]string{"FLUSH_INTERVAL=5s", "MAX_OPEN_STORES=32"},
		[]string{"HTTP_ADDR=127.0.0.1:8081", "INSTANCE_ID=w1"},
	)
	want := []string{"FLUSH_INTERVAL=1s", "MAX_OPEN_STORES=32", "HTTP_ADDR=127.0.0.1:8081", "HOME=/root", "INSTANCE_ID=w1"}
	if !slices.Equal(got, want) {
		t.Errorf("ChildEnv = %q, want %q", got, want)
	}
}

// A reference alias in the environment overrides a dev default as its Tidemark
// variable would: the default is left out, so the child applies the alias
// (docs/CONFIGURATION.md, "master dev": any variable in the environment overrides
// the dev defaults). An alias of the other binary leaves the default in place.
func TestChildEnvLeavesOutADefaultTheEnvironmentSetsThroughAnAlias(t *testing.T) {
	environ := []string{"ROLLOUT_FLUSH_INTERVAL_SECS=1", "MASTER_PORT=9000"}
	got := ChildEnv("worker", environ, []string{"FLUSH_INTERVAL=5s", "MAX_OPEN_STORES=32"}, nil)
	want := []string{"MAX_OPEN_STORES=32", "ROLLOUT_FLUSH_INTERVAL_SECS=1", "MASTER_PORT=9000"}
	if !slices.Equal(got, want) {
		t.Errorf("worker ChildEnv = %q, want %q", got, want)
	}
	got = ChildEnv("master", environ, []string{"FLUSH_INTERVAL=5s", "HTTP_ADDR=127.0.0.1:7080"}, nil)
	want = []string{"FLUSH_INTERVAL=5s", "ROLLOUT_FLUSH_INTERVAL_SECS=1", "MASTER_PORT=9000"}
	if !slices.Equal(got, want) {
		t.Errorf("master ChildEnv = %q, want %q", got, want)
	}
}

func TestLineFilterEchoesWarningsAndWhatIsNotALogLine(t *testing.T) {
	f := LineFilter{Level: slog.LevelWarn}
	for _, c := range []struct {
		line, want string
		echo       bool
	}{
		{`{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"worker starting"}`, "", false},
		{`{"time":"2026-01-01T00:00:00Z","level":"WARN","msg":"merge failed","store":"demo","err":"boom: it broke"}`,
			`WARN merge failed store=demo err="boom: it broke"`, true},
		{`{"level":"ERROR+2","msg":"x","n":3}`, "ERROR+2 x n=3", true},
		{"panic: runtime error: index out of range", "panic: runtime error: index out of range", true},
		{"Error: unknown flag: --nope", "Error: unknown flag: --nope", true},
		{"   ", "", false},
	} {
		got, echo := f.Render([]byte(c.line))
		if got != c.want || echo != c.echo {
			t.Errorf("Render(%s) = %q, %v; want %q, %v", c.line, got, echo, c.want, c.echo)
		}
	}
}

func TestTaskLineReportsOnlyATaskThatJustFinished(t *testing.T) {
	running := &mvccpb.KeyValue{Value: []byte(`{"id":"t1","state":"running"}`)}
	done := []byte(`{"id":"t1","kind":"merge_wal","target":"demo","state":"done","detail":"merged 3 generations across 3/3 workers",` +
		`"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01.5Z","attempts":2}`)
	line, ok := taskLine(done, running)
	if !ok || line != "merge_wal demo done in 1.5s (attempt 2): merged 3 generations across 3/3 workers  [task t1]" {
		t.Errorf("taskLine = %q, %v", line, ok)
	}
	if _, ok := taskLine(done, &mvccpb.KeyValue{Value: done}); ok {
		t.Error("a rewrite of a finished task was reported again")
	}
	if _, ok := taskLine([]byte(`{"id":"t1","state":"queued"}`), nil); ok {
		t.Error("a queued task was reported")
	}
	line, ok = taskLine([]byte(`{"id":"t2","kind":"merge_wal","target":"x","state":"failed","error":"w2 unavailable"}`), nil)
	if !ok || !strings.Contains(line, "failed: w2 unavailable") {
		t.Errorf("failed task line = %q, %v", line, ok)
	}
}

// TestEtcdRestartsOnItsData is what makes a second `master dev` reuse the first
// one's tasks: a new embedded etcd on the same directory (its peer port picked
// anew) has the keys.
func TestEtcdRestartsOnItsData(t *testing.T) {
	dir := t.TempDir()
	cfg := EtcdConfig{Dir: filepath.Join(dir, "etcd"), ClientAddr: "127.0.0.1:0", LogPath: filepath.Join(dir, "etcd.log"), UnsafeNoFsync: true}
	put := func(e *Etcd, key string) string {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if key != "" {
			if _, err := c.Put(ctx, key, "kept"); err != nil {
				t.Fatal(err)
			}
			return ""
		}
		resp, err := c.Get(ctx, "/tidemark/tasks/x")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get after restart: %v %v", resp, err)
		}
		return string(resp.Kvs[0].Value)
	}
	e, err := StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	put(e, "/tidemark/tasks/x")
	e.Close()
	e, err = StartEtcd(cfg)
	if err != nil {
		t.Fatalf("restart on the same data: %v", err)
	}
	defer e.Close()
	if v := put(e, ""); v != "kept" {
		t.Errorf("value after restart = %q", v)
	}
}

func TestEtcdOnABusyPortSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	_, err = StartEtcd(EtcdConfig{Dir: filepath.Join(dir, "etcd"), ClientAddr: ln.Addr().String(), LogPath: filepath.Join(dir, "etcd.log")})
	if err == nil || !strings.Contains(err.Error(), "--etcd-addr") {
		t.Fatalf("err = %v, want one pointing at --etcd-addr", err)
	}
}

// script writes an executable shell script.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "child")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProcessOutputGoesToItsLogAndFilteredToTheConsole(t *testing.T) {
	var out testlog.Buffer
	log := filepath.Join(t.TempDir(), "w1.log")
	p, err := startProcess(processConfig{
		name: "w1", path: script(t, `echo '{"level":"INFO","msg":"quiet"}'; echo '{"level":"WARN","msg":"loud"}' >&2; printf 'no newline'; exit 3`),
		args: []string{"serve"}, logPath: log, echo: NewConsole(&out), filter: LineFilter{Level: slog.LevelWarn},
	})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Err() == nil || !strings.Contains(p.Err().Error(), "exit status 3") {
		t.Errorf("Err = %v, want exit status 3", p.Err())
	}
	data, _ := os.ReadFile(log)
	for _, want := range []string{`"msg":"quiet"`, `"msg":"loud"`, "no newline"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("log %q lacks %q", data, want)
		}
	}
	if got := out.String(); got != "w1     | WARN loud\nw1     | no newline\n" {
		t.Errorf("console = %q", got)
	}
}

func TestProcessStopKillsAChildThatIgnoresSIGTERM(t *testing.T) {
	p, err := startProcess(processConfig{
		name: "stubborn", path: script(t, `trap '' TERM; echo ready; while :; do sleep 0.05; done`),
		logPath: filepath.Join(t.TempDir(), "stubborn.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the trap be set
	err = p.Stop(300 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "was killed") {
		t.Errorf("Stop = %v, want an error saying it was killed", err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Stop returned before the child exited")
	}
}

func TestRunWithoutProcessesServesEtcdUntilCancelled(t *testing.T) {
	var out testlog.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Endpoints, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			Dir: t.TempDir(), NoMaster: true, EtcdAddr: "127.0.0.1:0", EtcdUnsafeNoFsync: true,
			Console: NewConsole(&out), OnReady: func(ep Endpoints) { ready <- ep },
		})
	}()
	var ep Endpoints
	select {
	case ep = <-ready:
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v", err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep.Etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = c.Put(pctx, ep.Prefix+"/probe", "x")
	pcancel()
	c.Close()
	if err != nil {
		t.Fatalf("etcd at %s: %v", ep.Etcd, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if !strings.Contains(out.String(), ep.Etcd) || !strings.Contains(out.String(), "stopped; data kept in") {
		t.Errorf("console:\n%s\nwant the banner with %s and a clean stop", out.String(), ep.Etcd)
	}
	if conn, err := net.Dial("tcp", strings.TrimPrefix(ep.Etcd, "http://")); err == nil {
		conn.Close()
		t.Error("etcd still listens after Run returned")
	}
	// The dev token: made once, readable by its owner only, in the data directory.
	fi, err := os.Stat(ep.TokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(ep.TokenFile) != ep.Dir {
		t.Errorf("token file %s: %v, %v; want a 0600 file in %s", ep.TokenFile, fi, err, ep.Dir)
	}
}

func TestRunFailsNamingAChildThatExitsWhileStarting(t *testing.T) {
	var out testlog.Buffer
	err := Run(context.Background(), Config{
		Dir: t.TempDir(), MasterBinary: script(t, `echo "Error: --etcd-endpoints: bad" >&2; exit 1`),
		EtcdAddr: "127.0.0.1:0", MasterGRPCAddr: "127.0.0.1:0", MasterHTTPAddr: "127.0.0.1:0",
		EtcdUnsafeNoFsync: true, Console: NewConsole(&out),
	})
	if err == nil || !strings.Contains(err.Error(), "master exited while starting") {
		t.Fatalf("Run = %v, want an error naming the master", err)
	}
	if !strings.Contains(out.String(), "master | Error: --etcd-endpoints: bad") {
		t.Errorf("console %q: want the master's own error echoed", out.String())
	}
}

func TestBannerPrintsTheThreeExampleCommands(t *testing.T) {
	ep := Endpoints{
		Dir: "/d", DataURL: "file:///d/store", Etcd: "http://127.0.0.1:2379", Prefix: "/tidemark",
		MasterGRPC: "127.0.0.1:7070", MasterHTTP: "127.0.0.1:7080",
		Workers:   []membership.Worker{{InstanceID: "w1", HTTPAddr: "127.0.0.1:8081", GRPCAddr: "127.0.0.1:9091"}},
		TokenFile: "/d/auth-token",
	}
	b := Banner(ep, Config{MasterCommand: "bin/master", WorkerCommand: "bin/worker"})
	for _, want := range []string{
		"export AUTH_TOKEN_FILE=/d/auth-token\n",
		`curl -sS -X POST http://127.0.0.1:8081/api/v1/internal/merge-wal/demo -H "Authorization: Bearer $(cat /d/auth-token)"`,
		"curl -sS -X POST 'http://127.0.0.1:8081/api/v1/rollouts/demo/records?flush=true'",
		"etcdctl --endpoints http://127.0.0.1:2379 get --prefix /tidemark/tasks/ --print-value-only",
		"bin/master admin requeue-merge demo\n",
		"bin/worker load --etcd-endpoints http://127.0.0.1:2379 --rate 200",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("banner lacks %q:\n%s", want, b)
		}
	}
	ep.MasterGRPC, ep.Prefix = "127.0.0.1:7171", "/other"
	b = Banner(ep, Config{MasterCommand: "bin/master", WorkerCommand: "bin/worker"})
	for _, want := range []string{"requeue-merge demo --addr 127.0.0.1:7171", "get --prefix /other/tasks/", "--etcd-prefix /other"} {
		if !strings.Contains(b, want) {
			t.Errorf("banner with non-default addresses lacks %q:\n%s", want, b)
		}
	}
}

// With --auth-disabled there is no token to print: the banner must say that the
// cluster is open rather than show commands with an empty token file.
func TestBannerOfAClusterWithoutAuthSaysSoAndPrintsNoToken(t *testing.T) {
	ep := Endpoints{
		Dir: "/d", DataURL: "file:///d/store", Etcd: "http://127.0.0.1:2379", Prefix: "/tidemark",
		Workers: []membership.Worker{{InstanceID: "w1", HTTPAddr: "127.0.0.1:8081", GRPCAddr: "127.0.0.1:9091"}},
	}
	b := Banner(ep, Config{MasterCommand: "bin/master", WorkerCommand: "bin/worker", NoMaster: true, NoAuth: true})
	for _, want := range []string{"auth    disabled", "AUTH_DISABLED=true bin/master serve"} {
		if !strings.Contains(b, want) {
			t.Errorf("banner lacks %q:\n%s", want, b)
		}
	}
	for _, unwanted := range []string{"AUTH_TOKEN_FILE", "Authorization: Bearer"} {
		if strings.Contains(b, unwanted) {
			t.Errorf("banner of a cluster without auth mentions %q:\n%s", unwanted, b)
		}
	}
}

func TestRunRefusesBusyPortsBeforeStartingAnything(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	err = Run(context.Background(), Config{
		Dir: dir, MasterBinary: "/nonexistent", MasterGRPCAddr: ln.Addr().String(), MasterHTTPAddr: "127.0.0.1:0",
		EtcdAddr: "127.0.0.1:0", Console: NewConsole(io.Discard),
	})
	if err == nil || !strings.Contains(err.Error(), "--master-grpc-addr") {
		t.Fatalf("Run = %v, want an error naming --master-grpc-addr", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); !os.IsNotExist(err) {
		t.Errorf("etcd's directory exists (%v): etcd was started before the ports were checked", err)
	}
}

// master dev's own log lines (its settings warnings) read like the children's
// echoed ones, under its own name; a child that warns the same (every process
// reads the same environment) is not echoed again, so the console says it once,
// and its log still has it.
func TestConsoleLoggerSaysMasterDevsWarningsOnce(t *testing.T) {
	var out testlog.Buffer
	console := NewConsole(&out)
	console.Logger("dev").Warn("environment: X is ignored", "variable", "X", "use", "Y")
	log := filepath.Join(t.TempDir(), "w1.log")
	p, err := startProcess(processConfig{
		name: "w1", path: script(t, `echo '{"time":"2026-01-01T00:00:00Z","level":"WARN","msg":"environment: X is ignored","variable":"X","use":"Y"}'; echo '{"level":"WARN","msg":"its own"}'`),
		args: []string{"serve"}, logPath: log, echo: console, filter: LineFilter{Level: slog.LevelWarn},
	})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	want := "dev    | WARN environment: X is ignored variable=X use=Y\nw1     | WARN its own\n"
	if out.String() != want {
		t.Errorf("console:\n%s\nwant:\n%s", out.String(), want)
	}
	if data, _ := os.ReadFile(log); !strings.Contains(string(data), "X is ignored") {
		t.Errorf("the child's log lacks its warning: %q", data)
	}
}

// A dev cluster on the user's bucket (--data-url): every child gets that URL as its
// DATA_URL and no store/ directory is made; without one, the children share
// file://<dir>/store. The master here is a script that records its DATA_URL and
// exits, which ends Run right after the start.
func TestChildrenShareTheDataURLOrTheStoreInTheDataDirectory(t *testing.T) {
	for _, tc := range []struct{ name, dataURL string }{
		{"bucket", "s3://tidemark-dev?region=us-east-1&prefix=dev/"},
		{"default", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			got := filepath.Join(t.TempDir(), "data-url")
			var out testlog.Buffer
			err := Run(context.Background(), Config{
				Dir: dir, DataURL: tc.dataURL, MasterBinary: script(t, `printf %s "$DATA_URL" >`+got+`; exit 1`),
				EtcdAddr: "127.0.0.1:0", MasterGRPCAddr: "127.0.0.1:0", MasterHTTPAddr: "127.0.0.1:0",
				EtcdUnsafeNoFsync: true, Console: NewConsole(&out),
			})
			if err == nil || !strings.Contains(err.Error(), "master exited while starting") {
				t.Fatalf("Run = %v, want the scripted master's exit", err)
			}
			data, err := os.ReadFile(got)
			if err != nil {
				t.Fatalf("the master did not record its DATA_URL: %v", err)
			}
			want := tc.dataURL
			if want == "" {
				want = "file://" + filepath.ToSlash(filepath.Join(dir, "store"))
			}
			if string(data) != want {
				t.Errorf("the master's DATA_URL = %q, want %q", data, want)
			}
			_, statErr := os.Stat(filepath.Join(dir, "store"))
			if made := statErr == nil; made != (tc.dataURL == "") {
				t.Errorf("%s/store made: %v, want it only without a data URL", dir, made)
			}
		})
	}
}

// A path where the data URL belongs is refused before anything starts, naming the
// URL forms, rather than failing in every child's log.
func TestRunRefusesADataURLWithoutAScheme(t *testing.T) {
	var out testlog.Buffer
	err := Run(context.Background(), Config{
		Dir: t.TempDir(), DataURL: "./data/store", NoMaster: true, EtcdAddr: "127.0.0.1:0", Console: NewConsole(&out),
	})
	if err == nil || !strings.Contains(err.Error(), "has no scheme") || !strings.Contains(err.Error(), "s3://") {
		t.Fatalf("Run = %v, want a refusal of the data URL naming the URL forms", err)
	}
	if out.String() != "" {
		t.Errorf("console %q: want nothing started", out.String())
	}
}
