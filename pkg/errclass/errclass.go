// Package errclass sorts every failure of Tidemark's packages into a class that says
// what whoever sees it should do: answer a client, retry, skip a task, or stop and
// call a human. It is the one place errors are classified; the worker's HTTP and
// gRPC answers, the master's merge fan-out, its scheduler and its admin service each
// turn a Class into their own status with a switch over the classes, never over the
// errors themselves.
//
// The classes follow Thanos' halt/retry errors: Halt means retrying cannot help (a
// corrupt object: a human must look), the retryable classes mean trying again later
// can, and Gone means there is nothing left to do.
//
// Invariants:
//
//   - Of is total and deterministic: every error has exactly one class, decided by
//     the error chain alone (no I/O, no state). An error nobody anticipated is
//     Internal, never a retryable class, so a bug is not retried forever in silence.
//   - A class given explicitly (New, Wrap) wins over what the chain wraps, the
//     outermost first: the code that knows the context decides.
//   - Among sentinels the more severe class wins: Halt before everything, so a
//     corrupt object is never answered as something worth retrying.
//   - A gRPC status (a worker's answer to the master, etcd's transport failures) is
//     classified by its code, so a class survives one hop over gRPC.
package errclass

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/coord/tasks"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/worker/merge"
	"github.com/tidemark-io/tidemark/pkg/worker/store"
)

// Class is what to do about a failure.
type Class uint8

// The classes. Retryable reports which of them a retry may mend.
const (
	// Internal is a failure nobody anticipated: a bug, or a store refusing our
	// credentials. Log it; a human looks when it repeats.
	Internal Class = iota
	// Invalid is the caller's mistake (a malformed name, row, target or argument):
	// the same request fails the same way, so fix it instead of retrying.
	Invalid
	// Gone is a store (or task, or stats row) that does not exist: never created,
	// or deleted before or while the operation ran. Nothing is left to do; a task
	// on it is skipped.
	Gone
	// Exists is a create of something that already exists.
	Exists
	// Precondition is a request whose premise no longer holds and that must not be
	// retried as is: a fencing token older than one already seen (a newer claim of
	// the target exists), a task that is no longer queued.
	Precondition
	// Conflict is an operation that lost a race with a concurrent change of the
	// same store - a create or delete of the name, a newer writer of the shard, an
	// object deleted under a read - or a create that lost to another create. Retry
	// the whole operation: it then runs against the store as it is now.
	Conflict
	// Overloaded is a store with more pending generations than a read may fan out
	// over: retry once merges caught up.
	Overloaded
	// Busy is a throttled object store, a contended base table or no free merge
	// slot: retry with backoff.
	Busy
	// Unavailable is a dependency (object storage, etcd) failing the request after
	// its own retries: retry with backoff. A write that failed so may still have
	// happened.
	Unavailable
	// Timeout is the operation's own deadline running out: retry, the work may be
	// slow rather than broken.
	Timeout
	// Canceled is the caller giving up (or the server shutting down) before the
	// operation ended.
	Canceled
	// Halt is a stored object that cannot be read: corrupt, or of a format this
	// build does not know. Retrying cannot help; a human must look at the object the
	// error names.
	Halt
)

var names = [...]string{
	Internal:     "internal",
	Invalid:      "invalid",
	Gone:         "gone",
	Exists:       "exists",
	Precondition: "precondition",
	Conflict:     "conflict",
	Overloaded:   "overloaded",
	Busy:         "busy",
	Unavailable:  "unavailable",
	Timeout:      "timeout",
	Canceled:     "canceled",
	Halt:         "halt",
}

// String is the class's name, as logs and metrics print it.
func (c Class) String() string {
	if int(c) < len(names) {
		return names[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Retryable reports whether trying the same operation again later may succeed.
func (c Class) Retryable() bool {
	switch c {
	case Conflict, Overloaded, Busy, Unavailable, Timeout:
		return true
	}
	return false
}

// classed is an error that carries its class (New, Wrap).
type classed interface {
	error
	errClass() Class
}

// sentinel is an error value declared with its class (New).
type sentinel struct {
	class Class
	text  string
}

func (e *sentinel) Error() string   { return e.text }
func (e *sentinel) errClass() Class { return e.class }

// New returns a sentinel error of class c, for packages that declare their own
// sentinels above this one (errclass cannot import them): Of(fmt.Errorf("…: %w",
// err)) is c, and errors.Is finds it as usual.
func New(c Class, text string) error { return &sentinel{class: c, text: text} }

// wrapped is an error given a class by the code that knows its context (Wrap).
type wrapped struct {
	class Class
	err   error
}

func (e *wrapped) Error() string   { return e.err.Error() }
func (e *wrapped) Unwrap() error   { return e.err }
func (e *wrapped) errClass() Class { return e.class }

// Wrap returns err with class c, keeping its text and its chain: for a caller that
// knows more than the error does, e.g. that a table which vanished under a create
// means another create or delete of the name ran at once (Conflict), not that the
// store is gone. Wrap(c, nil) is nil.
func Wrap(c Class, err error) error {
	if err == nil {
		return nil
	}
	return &wrapped{class: c, err: err}
}

// Of returns the class of err. Of(nil) is Internal: ask about failures only.
func Of(err error) Class {
	if err == nil {
		return Internal
	}
	var c classed
	if errors.As(err, &c) {
		return c.errClass()
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, table.ErrCorrupt), errors.Is(err, wal.ErrCorrupt), errors.Is(err, registry.ErrCorrupt),
		errors.Is(err, table.ErrUnsupportedFormat), errors.Is(err, wal.ErrUnsupportedFormat):
		return Halt
	case errors.Is(err, schema.ErrInvalid), errors.Is(err, registry.ErrInvalidName),
		errors.Is(err, tasks.ErrInvalidArgument), errors.As(err, &tooLarge),
		// A read at a version retention pruned, or one never written.
		errors.Is(err, store.ErrVersionNotFound):
		return Invalid
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, store.ErrDeleted),
		// A table's versions are deleted only with its store (table.Refresh).
		errors.Is(err, table.ErrNotFound),
		errors.Is(err, tasks.ErrTaskNotFound), errors.Is(err, stats.ErrRowNotFound):
		return Gone
	case errors.Is(err, registry.ErrExists):
		return Exists
	case errors.Is(err, tasks.ErrNotCancellable):
		return Precondition
	case errors.Is(err, wal.ErrFenced), errors.Is(err, wal.ErrClosed), errors.Is(err, wal.ErrEpochShared),
		// A shard with no manifest under a writer or a read: deleted with its store.
		errors.Is(err, wal.ErrNoShard),
		// Objects of a store are deleted by merges (drained generations), by
		// compaction and with the store: one that vanished between the snapshot
		// that named it and its read means the read raced one of those.
		errors.Is(err, objstore.ErrNotFound),
		// A put-if-absent that lost and was not resolved by its caller.
		errors.Is(err, objstore.ErrExists):
		return Conflict
	case errors.Is(err, store.ErrOverloaded):
		return Overloaded
	case errors.Is(err, objstore.ErrThrottled), errors.Is(err, table.ErrTooManyWriters), errors.Is(err, merge.ErrBusy):
		return Busy
	case errors.Is(err, objstore.ErrUnavailable):
		return Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	return ofCode(err)
}

// ofCode classifies a gRPC status in err's chain by its code, or an etcd client
// error by the code it carries; Internal for anything else.
func ofCode(err error) Class {
	code := status.Code(err)
	var coded interface{ Code() codes.Code }
	if code == codes.Unknown && errors.As(err, &coded) {
		code = coded.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.OutOfRange:
		return Invalid
	case codes.NotFound:
		return Gone
	case codes.AlreadyExists:
		return Exists
	case codes.FailedPrecondition:
		return Precondition
	case codes.Aborted:
		return Conflict
	case codes.ResourceExhausted:
		return Busy
	case codes.Unavailable:
		return Unavailable
	case codes.DeadlineExceeded:
		return Timeout
	case codes.Canceled:
		return Canceled
	case codes.DataLoss:
		return Halt
	}
	return Internal
}
