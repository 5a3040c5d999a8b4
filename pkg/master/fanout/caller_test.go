package fanout

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// blockingWorker's MergeWal answers once release is closed.
type blockingWorker struct {
	tidemarkv1.UnimplementedWorkerServiceServer
	entered chan struct{}
	release chan struct{}
}

func (w *blockingWorker) MergeWal(context.Context, *tidemarkv1.MergeWalRequest) (*tidemarkv1.MergeWalResponse, error) {
	close(w.entered)
	<-w.release
	return &tidemarkv1.MergeWalResponse{Generations: 1}, nil
}

// A worker that stops cleanly deregisters first and then finishes the calls it
// admitted: closing its connection at the deregistration must not cancel the merge
// it is finishing (the task would fail after the worker merged).
func TestRetainClosesAConnectionOnlyAfterItsCallInFlightReturns(t *testing.T) {
	bw := &blockingWorker{entered: make(chan struct{}), release: make(chan struct{})}
	w := Worker{InstanceID: "w1", GRPCAddr: startWorkerService(t, bw)}
	caller := NewGRPCCaller(GRPCCallerConfig{})
	defer caller.Close()
	type result struct {
		r   MergeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := caller.MergeWal(context.Background(), w, tgt("generic:g"), 1)
		done <- result{r, err}
	}()
	select {
	case <-bw.entered:
	case <-time.After(30 * time.Second): // liveness bound only
		t.Fatal("the call never reached the worker")
	}
	cc, err := caller.conn(w.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}

	caller.Retain(nil) // the worker deregistered
	caller.mu.Lock()
	_, kept := caller.conns[w.GRPCAddr]
	caller.mu.Unlock()
	if kept {
		t.Error("a retired connection is still handed out to new calls")
	}
	if s := cc.GetState(); s == connectivity.Shutdown {
		t.Fatal("the connection was closed under the call in flight")
	}

	close(bw.release)
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second): // liveness bound only
		t.Fatal("the call did not return")
	}
	if res.err != nil || res.r.Generations != 1 {
		t.Fatalf("MergeWal = %+v, %v; want the merge the worker finished", res.r, res.err)
	}
	if s := cc.GetState(); s != connectivity.Shutdown {
		t.Errorf("after its last call the retired connection is %s, want SHUTDOWN", s)
	}
}
