package fanout

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// hangingWorker is a WorkerService whose merge never finishes on its own: it
// returns only when the call's context ends, like a worker whose object store
// stopped answering.
type hangingWorker struct {
	tidemarkv1.UnimplementedWorkerServiceServer
	ended chan error
}

func (w *hangingWorker) MergeWal(ctx context.Context, _ *tidemarkv1.MergeWalRequest) (*tidemarkv1.MergeWalResponse, error) {
	<-ctx.Done()
	w.ended <- ctx.Err()
	return nil, ctx.Err()
}

// startWorkerService serves srv over gRPC on loopback and returns its address.
func startWorkerService(t *testing.T, srv tidemarkv1.WorkerServiceServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	tidemarkv1.RegisterWorkerServiceServer(gs, srv)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// A stuck worker must not hold the target (and a master's merge slot) forever: the
// call ends at WorkerTimeout, the worker's own context is cancelled, and the task
// fails with an error that names the worker and says it ran out of time, so an
// operator reading the task record knows which process to look at.
func TestStuckWorkerFailsTheTaskAtTheWorkerTimeoutNamingIt(t *testing.T) {
	var inFlight, maxSeen atomic.Int32
	w0 := &countingWorker{name: "w0", inFlight: &inFlight, maxSeen: &maxSeen}
	stuck := &hangingWorker{ended: make(chan error, 1)}
	sw := startWorkerService(t, stuck)
	w2 := &countingWorker{name: "w2", inFlight: &inFlight, maxSeen: &maxSeen}
	workers := StaticDiscovery{startWorker(t, w0), {InstanceID: "w1", GRPCAddr: sw}, startWorker(t, w2)}
	caller := NewGRPCCaller(GRPCCallerConfig{})
	defer caller.Close()

	const timeout = 300 * time.Millisecond
	start := time.Now()
	_, err := New(Config{Discovery: workers, Caller: caller, WorkerTimeout: timeout}).Run(context.Background(), claimFor("s", 7))
	if took := time.Since(start); took > timeout+5*time.Second {
		t.Errorf("the fan-out took %s with a %s worker timeout", took, timeout)
	}
	want := "worker w1 (" + sw + "): merge did not finish within the worker timeout of 300ms"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "after 1/3 workers") {
		t.Fatalf("got %v, want an error containing %q and how far the fan-out got", err, want)
	}
	select {
	case <-stuck.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck worker's merge context was not cancelled")
	}
	if w2.calls.Load() != 0 {
		t.Error("the fan-out went on after the stuck worker")
	}
}
