package master

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/master/api"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// runningMaster is a master whose Run runs in the background: ran receives the
// target of every task the test runner ran, stop shuts it down and returns Run's
// error.
type runningMaster struct {
	*Master
	ran  chan string
	stop func() error
	done chan error
}

// runMaster runs a master on client with cfg, short test intervals, and (unless
// cfg.Runners is set) a merge_wal RunnerFunc that records the targets it ran.
func runMaster(t *testing.T, client *clientv3.Client, cfg Config) *runningMaster {
	t.Helper()
	ran := make(chan string, 16)
	cfg.Client = client
	if cfg.Prefix == "" {
		cfg.Prefix = "/m"
	}
	if cfg.Bucket == nil {
		cfg.Bucket = objstoretest.Mem(t)
	}
	if cfg.Runners == nil {
		cfg.Runners = map[tasks.Kind]Runner{tasks.KindMergeWAL: RunnerFunc(func(_ context.Context, c *tasks.Claim) (tasks.Report, error) {
			ran <- c.Task.Target.String()
			return tasks.Report{Detail: "merged " + c.Task.Target.String()}, nil
		})}
	}
	cfg.LeaseTTL = max(cfg.LeaseTTL, 2*time.Second)
	cfg.Scheduler.PollInterval = 20 * time.Millisecond
	cfg.ProbeInterval = 100 * time.Millisecond
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Logger = testLogger(t)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second): // liveness bound only
				runErr = fmt.Errorf("Run did not return 30 s after its context ended")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	// Run has started a session once the lease is set.
	testwait.Until(t, 10*time.Second, "Run to start a session", func() bool { return m.Lease() != clientv3.NoLease })
	return &runningMaster{Master: m, ran: ran, stop: stop, done: done}
}

// enqueueAndWait enqueues merge_wal on target (retrying while etcd comes back)
// and waits until the runner ran it and the task is done.
func (m *runningMaster) enqueueAndWait(t *testing.T, target string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // liveness bound only
	var task tasks.Task
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		task, _, err = m.Tasks().Enqueue(ctx, tasks.KindMergeWAL, registry.MustParseTarget(target))
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("enqueue %s: %v", target, err)
		}
	}
	select {
	case got := <-m.ran:
		if got != target {
			t.Fatalf("ran %s, want %s", got, target)
		}
	case <-time.After(time.Until(deadline)):
		t.Fatalf("task %s on %s not run within 60 s", task.ID, target)
	}
	waitState(t, m.Tasks(), task.ID, tasks.StateDone)
}

// leaseAlive reports whether etcd still holds lease id. etcd answers the
// remaining TTL in whole seconds, truncated: a live lease can read 0 between two
// keepalives, and only -1 says it is gone.
func leaseAlive(t *testing.T, client *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return resp.TTL >= 0
}

// Production failure guarded against: a master that exits (or stops claiming for
// good) when etcd goes away for longer than its lease TTL. Here etcd is gone for
// twice the TTL, so the session's keepalive ends; the master keeps running, starts
// a session again when etcd is back, and claims and runs a task enqueued after
// the restart. At shutdown it revokes its lease.
func TestMasterKeepsRunningThroughAnEtcdOutageAndResumesClaiming(t *testing.T) {
	srv := etcdtest.StartServer(t)
	client := srv.Client(t)
	m := runMaster(t, client, Config{LeaseTTL: 2 * time.Second})
	m.enqueueAndWait(t, "before")

	session := m.session.current()
	srv.Stop()
	status, _, body := get(t, m.Handler(), "GET", "/api/v1/health")
	if status != http.StatusServiceUnavailable {
		t.Errorf("health with etcd stopped = %d %s, want 503", status, body)
	}
	select {
	case <-session.Done(): // no keepalive answer for a TTL: the session has ended
	case <-time.After(30 * time.Second): // liveness bound only
		t.Fatal("the session did not end 30 s after etcd stopped")
	}
	select {
	case err := <-m.done:
		t.Fatalf("master exited while etcd was away: %v", err)
	default:
	}
	srv.Restart(t)

	m.enqueueAndWait(t, "after")
	testwait.For(t, 30*time.Second, "the lease of the running master to be alive after etcd came back", func() (bool, string) {
		return leaseAlive(t, client, m.Lease()), fmt.Sprintf("lease %x is not alive", int64(m.Lease()))
	})
	status, _, body = get(t, m.Handler(), "GET", "/api/v1/health")
	if status != http.StatusOK {
		t.Errorf("health after etcd came back = %d %s", status, body)
	}

	lease := m.Lease()
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
	if leaseAlive(t, client, lease) {
		t.Errorf("lease %x still alive after shutdown; want it revoked", int64(lease))
	}
}

// A lease that is gone (here revoked by an operator; in production expired while
// etcd was partitioned away) is replaced by a new session, and claiming goes on
// under the new lease.
func TestMasterStartsANewSessionWhenItsLeaseIsGone(t *testing.T) {
	client, _ := etcdtest.Start(t)
	m := runMaster(t, client, Config{})
	old := m.Lease()
	if _, err := client.Revoke(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "a new session after the lease was revoked", func() bool { return m.Lease() != old })
	if !leaseAlive(t, client, m.Lease()) {
		t.Fatalf("new lease %x is not alive", int64(m.Lease()))
	}
	m.enqueueAndWait(t, "s1")
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
}

// A kind without a runner (compact, with a Caller that cannot run maintenance)
// stays queued, and does not hold up merge_wal tasks behind it.
func TestMasterLeavesKindsWithoutARunnerQueued(t *testing.T) {
	client, _ := etcdtest.Start(t)
	m := runMaster(t, client, Config{})
	compact, _, err := m.Tasks().Enqueue(context.Background(), tasks.KindCompact, registry.MustParseTarget("s1"))
	if err != nil {
		t.Fatal(err)
	}
	m.enqueueAndWait(t, "s2")
	if got, err := m.Tasks().Get(context.Background(), compact.ID); err != nil || got.State != tasks.StateQueued {
		t.Fatalf("compact task = %+v, %v; want it queued", got, err)
	}
}

// The process end to end on loopback: AdminService (with health) over gRPC and
// the HTTP API, an admin requeue that the scheduler runs at once, and metrics that
// count it.
func TestMasterServesAdminGRPCAndHTTP(t *testing.T) {
	client, _ := etcdtest.Start(t)
	bucket := objstoretest.Mem(t)
	createStores(t, bucket)
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := runMaster(t, client, Config{Bucket: bucket, GRPCListener: gln, HTTPListener: hln,
		Discovery: fanout.StaticDiscovery{{InstanceID: "w1", GRPCAddr: "127.0.0.1:9"}}})

	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: api.AdminServiceName})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", hr, err)
	}
	admin := tidemarkv1.NewAdminServiceClient(conn)
	rq, err := admin.RequeueMerge(ctx, &tidemarkv1.RequeueMergeRequest{Target: "generic:g1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-m.ran:
		if got != "generic:g1" {
			t.Fatalf("ran %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("requeued merge not run")
	}
	done := waitState(t, m.Tasks(), rq.Task.Id, tasks.StateDone)
	if done.Detail != "merged generic:g1" {
		t.Errorf("detail %q", done.Detail)
	}

	base := "http://" + hln.Addr().String()
	resp, err := http.Get(base + "/api/v1/tasks/" + rq.Task.Id)
	if err != nil {
		t.Fatal(err)
	}
	var task api.TaskRecord
	err = json.NewDecoder(resp.Body).Decode(&task)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || task.State != tasks.StateDone {
		t.Fatalf("GET task = %d %+v %v", resp.StatusCode, task, err)
	}
	// The probe loop publishes master_etcd_up within its interval.
	testwait.For(t, 10*time.Second, "master_etcd_up 1, master_tasks_total{merge_wal,success} 1 and the scanner's series", func() (bool, string) {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := string(body)
		return strings.Contains(text, "master_etcd_up 1") &&
			strings.Contains(text, `master_tasks_total{kind="merge_wal",result="success"} 1`) &&
			strings.Contains(text, `http_requests_total{method="GET",path="/api/v1/tasks/{id}",status="200"} 1`) &&
			strings.Contains(text, "master_stats_scan_rounds_total"), "metrics:\n" + text
	})
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", gln.Addr().String()); err == nil {
		t.Error("gRPC listener still open after shutdown")
	}
}

// A session that ended while etcd still has its lease (a short outage: an etcd
// restart resets lease TTLs) resumes on that lease, keeping the claims and locks
// under it; a lease etcd no longer has is replaced.
func TestSessionResumesOnTheSameLeaseWhileEtcdHasIt(t *testing.T) {
	client, _ := etcdtest.Start(t)
	k := &sessionKeeper{client: client, ttl: 5, log: testLogger(t)}
	if err := k.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = k.close() }()
	first := k.lease()
	k.current().Orphan() // the keepalive ended, as when etcd stops answering

	s, reused, err := k.open(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	if !reused || s.Lease() != first {
		t.Fatalf("open on live lease %x: reused=%v lease %x", int64(first), reused, int64(s.Lease()))
	}
	k.set(s)
	if _, err := client.Revoke(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	s.Orphan()
	s2, reused, err := k.open(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	k.set(s2)
	if reused || s2.Lease() == first {
		t.Fatalf("open on revoked lease %x: reused=%v lease %x", int64(first), reused, int64(s2.Lease()))
	}
}

// Run stops everything it started: after it returns, no goroutine of the master
// (scheduler, scanner, sweep, prune and probe loops, session keeper, servers) is
// left. The etcd client's own lease goroutines are started before counting, and
// the embedded etcd server's are not the master's.
func TestMasterRunLeavesNoGoroutineBehind(t *testing.T) {
	client, _ := etcdtest.Start(t)
	warm, err := concurrency.NewSession(client, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Close()
	bucket := objstoretest.Mem(t)
	createStores(t, bucket)
	running := goleak.IgnoreCurrent()

	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := runMaster(t, client, Config{Bucket: bucket, GRPCListener: gln, HTTPListener: hln})
	m.enqueueAndWait(t, "generic:g1")
	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tidemarkv1.NewAdminServiceClient(conn).ListTasks(context.Background(), &tidemarkv1.ListTasksRequest{}); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	if resp, err := hc.Get("http://" + hln.Addr().String() + "/api/v1/health"); err == nil {
		resp.Body.Close()
	}
	hc.CloseIdleConnections()
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}

	// The embedded etcd server runs in this process: the stream it serves a
	// session's lease keep-alives on lives as long as the client's connection
	// (the test's, not the master's), so it is the server's goroutine, not one
	// the master left.
	etcdKeepAlive := goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*LeaseServer).leaseKeepAlive")
	testwait.For(t, 10*time.Second, "the goroutines Run started to end", func() (bool, string) {
		if err := goleak.Find(running, etcdKeepAlive); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// The built-in merge_wal runner is the serial FanOut over Discovery and Caller,
// with each worker call timed in master_merge_wal_worker_duration_seconds.
func TestMasterRunsMergeWALThroughTheFanOut(t *testing.T) {
	client, _ := etcdtest.Start(t)
	caller := &fakeCaller{known: map[string]int64{"w1": 3, "w2": 4}}
	reg := refmetrics.NewProcessRegistry()
	m := runMaster(t, client, Config{Caller: caller, Runners: map[tasks.Kind]Runner{}, Metrics: reg,
		Discovery: fanout.StaticDiscovery{{InstanceID: "w1", GRPCAddr: "127.0.0.1:1"}, {InstanceID: "w2", GRPCAddr: "127.0.0.1:2"}}})
	ok, _, err := m.Tasks().Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("generic:gs"))
	if err != nil {
		t.Fatal(err)
	}
	done := waitState(t, m.Tasks(), ok.ID, tasks.StateDone)
	if done.Detail != "merged 7 generations across 2/2 workers" {
		t.Errorf("detail %q", done.Detail)
	}
	caller.mu.Lock()
	calls := slices.Clone(caller.calls)
	caller.known = map[string]int64{"w2": 1} // w1 is gone
	caller.mu.Unlock()
	want := []string{fmt.Sprintf("w1 generic:gs %d", done.FencingToken), fmt.Sprintf("w2 generic:gs %d", done.FencingToken)}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	failed, _, err := m.Tasks().Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("generic:gs"))
	if err != nil {
		t.Fatal(err)
	}
	if got := waitState(t, m.Tasks(), failed.ID, tasks.StateFailed); !strings.Contains(got.Error, "unavailable: w1") {
		t.Errorf("error %q, want w1 named unavailable", got.Error)
	}
	_, _, body := get(t, m.Handler(), "GET", "/metrics")
	for _, line := range []string{
		`master_merge_wal_workers_total{result="ok"} 3`,
		`master_merge_wal_workers_total{result="unreachable"} 1`,
		`master_merge_wal_worker_duration_seconds_count 4`,
		`master_tasks_total{kind="merge_wal",result="success"} 1`,
		`master_task_enqueued_total{kind="merge_wal"} 2`,
		`master_task_phase_duration_seconds_count{kind="merge_wal",phase="work"} 2`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("metrics lack %s:\n%s", line, body)
		}
	}
	if got := testutil.ToFloat64(m.metrics.Tasks.WithLabelValues("merge_wal", "failed")); got != 1 {
		t.Errorf("master_tasks_total{merge_wal,failed} = %v", got)
	}
	// 7 by the first task, 1 by the failed one before it stopped: progress counts.
	if got := testutil.ToFloat64(m.metrics.GenerationsReclaimed); got != 8 {
		t.Errorf("master_merge_wal_generations_reclaimed_total = %v, want 8", got)
	}
}

// mergingWorker is a WorkerService whose MergeWal merges nothing.
type mergingWorker struct {
	tidemarkv1.UnimplementedWorkerServiceServer
}

func (mergingWorker) MergeWal(context.Context, *tidemarkv1.MergeWalRequest) (*tidemarkv1.MergeWalResponse, error) {
	return &tidemarkv1.MergeWalResponse{}, nil
}

// closeWatch is a listener whose accepted connections report on closed when the
// server closes them (it does once the client hung up).
type closeWatch struct {
	net.Listener
	closed chan string
}

func (l *closeWatch) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, closed: l.closed}, nil
}

type watchedConn struct {
	net.Conn
	once   sync.Once
	closed chan string
}

func (c *watchedConn) Close() error {
	c.once.Do(func() { c.closed <- c.RemoteAddr().String() })
	return c.Conn.Close()
}

// The master must close a worker's connection when the worker deregisters, not
// when a merge next lists the workers: with no merge due (or only maintenance
// tasks), the connection to a dead address reconnected for the life of the master.
// The worker sees its connection closed.
func TestMasterClosesTheConnectionOfAWorkerWhenItDeregisters(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	watch := &closeWatch{Listener: ln, closed: make(chan string, 16)}
	gs := grpc.NewServer()
	tidemarkv1.RegisterWorkerServiceServer(gs, mergingWorker{})
	go func() { _ = gs.Serve(watch) }()
	t.Cleanup(gs.Stop)
	w := fanout.Worker{InstanceID: "w1", GRPCAddr: ln.Addr().String()}
	lease, err := client.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, "/m/workers/w1", string(rec), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	caller := fanout.NewGRPCCaller(fanout.GRPCCallerConfig{})
	defer caller.Close()
	runMaster(t, client, Config{Caller: caller})

	if _, err := caller.MergeWal(ctx, w, registry.MustParseTarget("generic:g"), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case from := <-watch.closed:
		t.Fatalf("the connection of a registered worker (from %s) was closed", from)
	case <-time.After(100 * time.Millisecond):
	}

	if _, err := client.Revoke(ctx, lease.ID); err != nil { // what a worker's clean stop does
		t.Fatal(err)
	}
	select {
	case <-watch.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the deregistered worker's connection was not closed within 30 s")
	}
}
