package master

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/tidemark-io/tidemark/internal/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/internal/testutil/testwait"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// The master must close a worker's connection when the worker deregisters, not
// when a merge next lists the workers: with no merge due (or only maintenance
// tasks), the connection to a dead address reconnected for the life of the master.
func TestMasterClosesTheConnectionOfAWorkerWhenItDeregisters(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	var inFlight, maxSeen atomic.Int32
	w := startWorker(t, &countingWorker{name: "w1", inFlight: &inFlight, maxSeen: &maxSeen})
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
	caller := NewGRPCCaller(GRPCCallerConfig{})
	defer caller.Close()
	runMaster(t, client, Config{Caller: caller})

	if _, err := caller.MergeWal(ctx, w, "generic:g", 1); err != nil {
		t.Fatal(err)
	}
	cc, err := caller.conn(w.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	if s := cc.GetState(); s == connectivity.Shutdown {
		t.Fatal("the connection of a registered worker was closed")
	}

	if _, err := client.Revoke(ctx, lease.ID); err != nil { // what a worker's clean stop does
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the deregistered worker's connection to be closed", func() (bool, string) {
		caller.mu.Lock()
		_, kept := caller.conns[w.GRPCAddr]
		caller.mu.Unlock()
		s := cc.GetState()
		return !kept && s == connectivity.Shutdown, "kept " + map[bool]string{true: "yes", false: "no"}[kept] + ", state " + s.String()
	})
}

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
		r, err := caller.MergeWal(context.Background(), w, "generic:g", 1)
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
