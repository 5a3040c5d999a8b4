package errclass_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

func wrap(err error) error { return fmt.Errorf("store generic:x: %w", err) }

func TestEverySentinelHasTheClassItsRemedyNeeds(t *testing.T) {
	for _, c := range []struct {
		err  error
		want errclass.Class
	}{
		{wrap(table.ErrCorrupt), errclass.Halt},
		{wrap(wal.ErrCorrupt), errclass.Halt},
		{wrap(registry.ErrCorrupt), errclass.Halt},
		{wrap(table.ErrUnsupportedFormat), errclass.Halt},
		{wrap(wal.ErrUnsupportedFormat), errclass.Halt},
		{wrap(schema.ErrInvalid), errclass.Invalid},
		{wrap(registry.ErrInvalidName), errclass.Invalid},
		{wrap(tasks.ErrInvalidArgument), errclass.Invalid},
		{wrap(&http.MaxBytesError{Limit: 1}), errclass.Invalid},
		{wrap(&store.VersionError{Version: 3, Pruned: true}), errclass.Invalid},
		{wrap(&schema.Error{Row: 2, Column: "score", Reason: "expected a number"}), errclass.Invalid},
		{wrap(registry.ErrNotFound), errclass.Gone},
		{wrap(store.ErrDeleted), errclass.Gone},
		{wrap(table.ErrNotFound), errclass.Gone},
		{wrap(tasks.ErrTaskNotFound), errclass.Gone},
		{wrap(stats.ErrRowNotFound), errclass.Gone},
		{wrap(registry.ErrExists), errclass.Exists},
		{wrap(tasks.ErrNotCancellable), errclass.Precondition},
		{wrap(wal.ErrFenced), errclass.Conflict},
		{wrap(wal.ErrClosed), errclass.Conflict},
		{wrap(wal.ErrNoShard), errclass.Conflict},
		{wrap(wal.ErrEpochShared), errclass.Conflict},
		{wrap(objstore.ErrNotFound), errclass.Conflict},
		{wrap(store.ErrOverloaded), errclass.Overloaded},
		{wrap(objstore.ErrThrottled), errclass.Busy},
		{wrap(table.ErrTooManyWriters), errclass.Busy},
		{wrap(merge.ErrBusy), errclass.Busy},
		{wrap(objstore.ErrUnavailable), errclass.Unavailable},
		{wrap(context.DeadlineExceeded), errclass.Timeout},
		{wrap(context.Canceled), errclass.Canceled},
		{errors.New("disk on fire"), errclass.Internal},
	} {
		if got := errclass.Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// The master sees a worker's failure as a gRPC status: the class must survive the
// hop, or a deleted store's merge fails instead of being skipped, and a corrupt
// object is retried every sweep.
func TestAGRPCStatusKeepsItsClassAcrossTheWire(t *testing.T) {
	for code, want := range map[codes.Code]errclass.Class{
		codes.InvalidArgument:    errclass.Invalid,
		codes.NotFound:           errclass.Gone,
		codes.AlreadyExists:      errclass.Exists,
		codes.FailedPrecondition: errclass.Precondition,
		codes.Aborted:            errclass.Conflict,
		codes.ResourceExhausted:  errclass.Busy,
		codes.Unavailable:        errclass.Unavailable,
		codes.DeadlineExceeded:   errclass.Timeout,
		codes.Canceled:           errclass.Canceled,
		codes.DataLoss:           errclass.Halt,
		codes.Internal:           errclass.Internal,
		codes.Unauthenticated:    errclass.Internal,
	} {
		err := fmt.Errorf("worker w1 (127.0.0.1:1): %w", status.Error(code, "x"))
		if got := errclass.Of(err); got != want {
			t.Errorf("Of(status %s) = %s, want %s", code, got, want)
		}
	}
	// etcd's client errors carry their code without being a status.
	if got := errclass.Of(fmt.Errorf("claim: %w", rpctypes.ErrNoLeader)); got != errclass.Unavailable {
		t.Errorf("Of(etcd no leader) = %s, want unavailable", got)
	}
}

func TestHaltWinsOverEveryOtherSentinel(t *testing.T) {
	err := errors.Join(wrap(context.DeadlineExceeded), wrap(objstore.ErrNotFound), wrap(table.ErrCorrupt))
	if got := errclass.Of(err); got != errclass.Halt {
		t.Fatalf("Of(%v) = %s, want halt", err, got)
	}
}

// A chain holding several sentinels (errors.Join, several %w) takes the most
// severe class, whichever order they come in: a merge that met a corrupt object on
// one worker and a timeout on another halts instead of being retried.
func TestTheMoreSevereSentinelWinsInEitherOrder(t *testing.T) {
	bySeverity := []errclass.Class{errclass.Halt, errclass.Invalid, errclass.Gone, errclass.Exists,
		errclass.Precondition, errclass.Conflict, errclass.Overloaded, errclass.Busy,
		errclass.Unavailable, errclass.Timeout, errclass.Canceled}
	for i, more := range bySeverity {
		for _, less := range bySeverity[i+1:] {
			a, b := errclass.New(more, more.String()), errclass.New(less, less.String())
			for _, err := range []error{errors.Join(wrap(a), wrap(b)), fmt.Errorf("%w; %w", b, a)} {
				if got := errclass.Of(err); got != more {
					t.Errorf("Of(%v) = %s, want %s", err, got, more)
				}
			}
		}
	}
	// The standard library's errors rank among the sentinels.
	busy := errclass.New(errclass.Busy, "busy")
	if got := errclass.Of(errors.Join(context.Canceled, busy)); got != errclass.Busy {
		t.Errorf("Of(canceled, busy) = %s, want busy", got)
	}
	if got := errclass.Of(errors.Join(busy, &http.MaxBytesError{Limit: 1})); got != errclass.Invalid {
		t.Errorf("Of(busy, too large) = %s, want invalid", got)
	}
	// A sentinel says more than a gRPC code met in the same chain.
	if got := errclass.Of(errors.Join(status.Error(codes.DataLoss, "x"), busy)); got != errclass.Busy {
		t.Errorf("Of(status data loss, busy) = %s, want busy", got)
	}
}

func TestAnExplicitClassWinsOutermostFirst(t *testing.T) {
	vanished := wrap(table.ErrNotFound)
	err := errclass.Wrap(errclass.Conflict, fmt.Errorf("create: %w", vanished))
	if got := errclass.Of(err); got != errclass.Conflict {
		t.Fatalf("Of(Wrap(conflict, gone)) = %s", got)
	}
	if !errors.Is(err, table.ErrNotFound) || err.Error() != "create: "+vanished.Error() {
		t.Fatalf("Wrap lost the chain or the text: %v", err)
	}
	outer := errclass.Wrap(errclass.Gone, fmt.Errorf("x: %w", err))
	if got := errclass.Of(outer); got != errclass.Gone {
		t.Fatalf("outer Wrap: %s, want gone", got)
	}
	if errclass.Wrap(errclass.Halt, nil) != nil {
		t.Fatal("Wrap(nil) is not nil")
	}

	errStale := errclass.New(errclass.Precondition, "stale fencing token")
	if e := fmt.Errorf("target a: %w: 3 < 4", errStale); errclass.Of(e) != errclass.Precondition || !errors.Is(e, errStale) {
		t.Fatalf("New: Of = %s, Is = %v", errclass.Of(e), errors.Is(e, errStale))
	}
}

func TestOnlyTransientClassesAreRetryable(t *testing.T) {
	retry := map[errclass.Class]bool{errclass.Conflict: true, errclass.Overloaded: true, errclass.Busy: true,
		errclass.Unavailable: true, errclass.Timeout: true}
	for c := errclass.Internal; c <= errclass.Halt; c++ {
		if c.Retryable() != retry[c] {
			t.Errorf("%s.Retryable() = %v", c, c.Retryable())
		}
		if strings.HasPrefix(c.String(), "class(") {
			t.Errorf("class %d has no name: %q", c, c.String())
		}
	}
}
