// Package errclass sorts every failure of Tidemark's packages into a class that says
// what whoever sees it should do: answer a client, retry, skip a task, or stop and
// call a human. The worker's HTTP answers, the master's merge fan-out, its
// scheduler and its admin service each turn a Class into their own status with a
// switch over the classes, never over the errors themselves. The worker's gRPC
// answers are made here (ToGRPC), since the master reads them back (Of): one place
// converts both ways.
//
// The classes follow Thanos' halt/retry errors: Halt means retrying cannot help (a
// corrupt object: a human must look), the retryable classes mean trying again later
// can, and Gone means there is nothing left to do.
//
// errclass is a leaf: it imports no Tidemark package. Each package declares its
// sentinels with their class (New) beside the code that returns them, so whatever
// classifies errors (the worker, the master) links only errclass, not every package
// whose errors it may see.
//
// Invariants:
//
//   - Of is total and deterministic: every error has exactly one class, decided by
//     the error chain alone (no I/O, no state). An error nobody anticipated is
//     Internal, never a retryable class, so a bug is not retried forever in silence.
//   - A class given explicitly (Wrap) wins over what the chain wraps, the outermost
//     first: the code that knows the context decides.
//   - Among the sentinels of a chain (errors.Join, several %w) the more severe class
//     wins, in the order Halt, Invalid, Gone, Exists, Precondition, Conflict,
//     Overloaded, Busy, Unavailable, Timeout, Canceled: Halt before everything, so a
//     corrupt object is never answered as something worth retrying. The standard
//     library's errors (context's, http.MaxBytesError) rank among them.
//   - A chain is walked as errors.Is walks it (Unwrap, not Is methods): a custom
//     error type that stands for a sentinel unwraps to it, or its class is lost.
//   - A class survives one hop over gRPC exactly: a server answers with ToGRPC,
//     whose status names the class (an ErrorInfo detail, domain "tidemark.io")
//     beside its code, and Of on the client reads that name first, ranking it with
//     the sentinels as if the server's chain were there. What crosses is the class
//     and the error's text, whatever either side wrapped around it with %w; the
//     sentinel itself does not (errors.Is finds no store.ErrOverloaded at the
//     master, Of finds Overloaded).
//   - A gRPC status without that detail (an older worker, etcd's transport
//     failures) is classified by its code when the chain holds no sentinel. Codes
//     merge classes: RESOURCE_EXHAUSTED reads as Busy, though ToGRPC sends
//     Overloaded, Busy and Unavailable all with it.
package errclass

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// severity ranks the classes for a chain holding several sentinels: the higher
// wins (the invariant in the package doc). Internal is a sentinel's class only if
// its package declared it so, and then anything else in the chain says more.
var severity = [...]uint8{
	Internal:     0,
	Canceled:     1,
	Timeout:      2,
	Unavailable:  3,
	Busy:         4,
	Overloaded:   5,
	Conflict:     6,
	Precondition: 7,
	Exists:       8,
	Gone:         9,
	Invalid:      10,
	Halt:         11,
}

// sentinel is an error value declared with its class (New).
type sentinel struct {
	class Class
	text  string
}

func (e *sentinel) Error() string { return e.text }

// New returns a sentinel error of class c, for a package to declare the errors it
// returns: Of(fmt.Errorf("…: %w", err)) is c, and errors.Is finds it as usual.
func New(c Class, text string) error { return &sentinel{class: c, text: text} }

// wrapped is an error given a class by the code that knows its context (Wrap).
type wrapped struct {
	class Class
	err   error
}

func (e *wrapped) Error() string { return e.err.Error() }
func (e *wrapped) Unwrap() error { return e.err }

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
	var w *wrapped
	if errors.As(err, &w) {
		return w.class
	}
	c, found := ofSentinels(err)
	if std, ok := ofStdlib(err); ok && (!found || severity[std] > severity[c]) {
		c, found = std, true
	}
	if found {
		return c
	}
	return ofCode(err)
}

// ofSentinels returns the most severe class among the sentinels (New) and the
// gRPC statuses that name a class (ToGRPC) in err's tree, walked as errors.Is
// walks it; found is false if there is none.
func ofSentinels(err error) (c Class, found bool) {
	for err != nil {
		if s, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
			// A server's answer naming its class (ToGRPC) stands for the
			// server's chain, which classified as that.
			if c, ok := ofDetail(s.GRPCStatus()); ok {
				return c, true
			}
		}
		switch e := err.(type) {
		case *sentinel:
			return e.class, true
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		case interface{ Unwrap() []error }:
			for _, branch := range e.Unwrap() {
				if bc, ok := ofSentinels(branch); ok && (!found || severity[bc] > severity[c]) {
					c, found = bc, true
				}
			}
			return c, found
		default:
			return c, found
		}
	}
	return c, found
}

// ofStdlib classifies the standard library's errors in err's chain, which no
// package can declare with a class.
func ofStdlib(err error) (Class, bool) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return Invalid, true
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout, true
	case errors.Is(err, context.Canceled):
		return Canceled, true
	}
	return Internal, false
}

// ofCode classifies a gRPC status in err's chain by its code (one without a class
// detail: ofSentinels read those), or an etcd client error by the code it
// carries; Internal for anything else.
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
