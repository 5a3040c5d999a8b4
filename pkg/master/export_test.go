package master

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// exportingWorker is a WorkerService whose Export streams progress: rows
// reports of 100 rows each, then (unless hang) the manifest's summary; with hang
// it streams until its call ends and says so on ended.
type exportingWorker struct {
	tidemarkv1.UnimplementedWorkerServiceServer
	id    string
	rows  int
	hang  bool
	ended chan error

	mu    sync.Mutex
	calls []*tidemarkv1.ExportRequest
}

func (w *exportingWorker) Export(req *tidemarkv1.ExportRequest, stream tidemarkv1.WorkerService_ExportServer) error {
	w.mu.Lock()
	w.calls = append(w.calls, req)
	w.mu.Unlock()
	for i := 1; i <= w.rows; i++ {
		if err := stream.Send(&tidemarkv1.ExportProgress{InstanceId: w.id, Rows: int64(100 * i), Files: 1, Bytes: int64(1000 * i), Estimate: int64(100 * w.rows)}); err != nil {
			return err
		}
	}
	if w.hang {
		<-stream.Context().Done()
		if w.ended != nil {
			w.ended <- stream.Context().Err()
		}
		return stream.Context().Err()
	}
	return stream.Send(&tidemarkv1.ExportProgress{InstanceId: w.id, Rows: int64(100 * w.rows), Files: 1, Bytes: int64(1000 * w.rows),
		Done: true, Manifest: "file:///x/_manifest.json", Version: 7, FeedCursor: "c1.cursor"})
}

func (w *exportingWorker) called() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.calls)
}

// serveWorker serves svc over gRPC on a loopback port and returns the worker's
// record and the server (Stop it to kill the worker: its calls break).
func serveWorker(t *testing.T, id string, svc tidemarkv1.WorkerServiceServer) (fanout.Worker, *grpc.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	tidemarkv1.RegisterWorkerServiceServer(gs, svc)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return fanout.Worker{InstanceID: id, GRPCAddr: ln.Addr().String()}, gs
}

// runExportMaster runs a master whose export runner calls workers over gRPC.
func runExportMaster(t *testing.T, workers ...fanout.Worker) *runningMaster {
	t.Helper()
	client, _ := etcdtest.Start(t)
	caller := fanout.NewGRPCCaller(fanout.GRPCCallerConfig{DialTimeout: time.Second})
	t.Cleanup(func() { _ = caller.Close() })
	return runMaster(t, client, Config{Caller: caller, Runners: map[tasks.Kind]Runner{}, Discovery: fanout.StaticDiscovery(workers)})
}

func enqueueTestExport(t *testing.T, m *runningMaster) tasks.Task {
	t.Helper()
	task, _, err := m.Tasks().EnqueueExport(context.Background(), registry.MustParseTarget("generic:g"),
		[]byte(`{"destination":"file:///tmp/exports","columns":["score"]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// Production failure guarded against: an export of a large store whose worker
// is killed (a deploy, an OOM) must not be lost nor left running: the stream
// breaks, the task goes back to the queue and runs again on another worker,
// which completes it; its progress and summary are the second worker's.
func TestExportWhoseWorkerDiesIsRetriedOnAnotherAndCompletes(t *testing.T) {
	dying := &exportingWorker{id: "w1", rows: 3, hang: true}
	w1, s1 := serveWorker(t, "w1", dying)
	healthy := &exportingWorker{id: "w2", rows: 5}
	w2, _ := serveWorker(t, "w2", healthy)
	m := runExportMaster(t, w1, w2)
	task := enqueueTestExport(t, m)

	testwait.For(t, 30*time.Second, "the first attempt's progress from w1", func() (bool, string) {
		got, err := m.Tasks().Get(context.Background(), task.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Progress != nil && got.Progress.Worker == "w1" && got.Progress.Rows > 0, "no progress from w1 yet"
	})
	if healthy.called() != 0 {
		t.Fatalf("w2 was called while w1 exported")
	}
	s1.Stop() // the worker dies mid-export

	done := waitState(t, m.Tasks(), task.ID, tasks.StateDone)
	if done.Attempts != 2 || done.Exported == nil || done.Exported.Rows != 500 || done.Exported.FeedCursor != "c1.cursor" ||
		done.Progress == nil || done.Progress.Worker != "w2" || !strings.Contains(done.Detail, "(on w2)") {
		t.Fatalf("done task: attempts %d, exported %+v, progress %+v, detail %q", done.Attempts, done.Exported, done.Progress, done.Detail)
	}
	healthy.mu.Lock()
	req := healthy.calls[0]
	healthy.mu.Unlock()
	if req.GetTaskId() != task.ID || req.GetTarget() != "generic:g" || req.GetSpec().GetDestination() != "file:///tmp/exports" ||
		strings.Join(req.GetSpec().GetColumns(), ",") != "score" || req.GetFencingToken() != done.FencingToken {
		t.Errorf("w2 was asked %v; want the task's id, target, spec and fencing token %d", req, done.FencingToken)
	}
}

// An operator who cancels a running export stops its worker (the call is
// cancelled, so no manifest is written) and the task fails as cancelled, not
// retried.
func TestCancelledExportStopsItsWorkerAndFails(t *testing.T) {
	hanging := &exportingWorker{id: "w1", rows: 1, hang: true, ended: make(chan error, 1)}
	w1, _ := serveWorker(t, "w1", hanging)
	m := runExportMaster(t, w1)
	task := enqueueTestExport(t, m)
	waitState(t, m.Tasks(), task.ID, tasks.StateRunning)
	testwait.Until(t, 30*time.Second, "the worker to be called", func() bool { return hanging.called() == 1 })

	if got, err := m.Tasks().Cancel(context.Background(), task.ID); err != nil || !got.CancelRequested {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	select {
	case <-hanging.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker's export call was not cancelled")
	}
	failed := waitState(t, m.Tasks(), task.ID, tasks.StateFailed)
	if !strings.HasPrefix(failed.Error, "cancelled") || failed.Attempts != 1 {
		t.Errorf("failed task: error %q, attempts %d; want cancelled after one attempt", failed.Error, failed.Attempts)
	}
}

// A worker that predates Export answers UNIMPLEMENTED: the export goes to a
// worker that runs it, and when none does the task fails once, saying so,
// instead of going back to the queue again and again.
func TestExportOnWorkersThatPredateItFailsOnceSayingSo(t *testing.T) {
	old1, _ := serveWorker(t, "old1", mergingWorker{})
	old2, _ := serveWorker(t, "old2", mergingWorker{})
	m := runExportMaster(t, old1, old2)
	task := enqueueTestExport(t, m)
	failed := waitState(t, m.Tasks(), task.ID, tasks.StateFailed)
	if failed.Attempts != 1 || !strings.Contains(failed.Error, "old1, old2") || !strings.Contains(failed.Error, "upgrade") {
		t.Errorf("failed task: attempts %d, error %q", failed.Attempts, failed.Error)
	}

	current := &exportingWorker{id: "new", rows: 1}
	cur, _ := serveWorker(t, "new", current)
	m2 := runExportMaster(t, old1, cur)
	done := waitState(t, m2.Tasks(), enqueueTestExport(t, m2).ID, tasks.StateDone)
	if done.Progress == nil || done.Progress.Worker != "new" {
		t.Errorf("export with an old and a new worker: %+v", done)
	}
}
