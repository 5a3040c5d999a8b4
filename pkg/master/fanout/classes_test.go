package fanout

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// A worker answers a merge's failure with errclass.ToGRPC (its grpcError): the
// master must see the worker's class, not the code's. An overloaded store (retry
// once merges caught up) and failing object storage were both seen as a busy merge
// slot while only RESOURCE_EXHAUSTED crossed. Each still stops the fan-out and
// fails the task naming the worker, for the next sweep to retry; a worker that
// could not be reached is still skipped and named unavailable (the connection
// decides that, not a code).
func TestAWorkersClassReachesTheMasterThroughTheFanOut(t *testing.T) {
	for _, class := range []errclass.Class{errclass.Overloaded, errclass.Busy, errclass.Unavailable} {
		t.Run(class.String(), func(t *testing.T) {
			tr := newTrio(t, GRPCCallerConfig{})
			w1, w2 := tr.worker("w1"), tr.w2
			sentinel := errclass.New(class, "the worker's "+class.String()+" sentinel")
			w1.fail = errclass.ToGRPC(fmt.Errorf("merge generic:s shard w1: %w", sentinel))
			_, err := tr.run(t, startWorker(t, w1), Config{})
			if got := errclass.Of(err); got != class {
				t.Errorf("Of(%v) = %s at the master, want %s", err, got, class)
			}
			if err == nil || !strings.Contains(err.Error(), "worker w1") || !strings.Contains(err.Error(), sentinel.Error()) {
				t.Errorf("got %v, want an error naming w1 and its message", err)
			}
			if w2.calls.Load() != 0 {
				t.Error("the fan-out went on after the error")
			}
		})
	}
}
