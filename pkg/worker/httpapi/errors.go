package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
)

// Error codes of the answers errorAnswer adds to those of respond.go.
const (
	// CodeConflict (409): the request lost a race with a concurrent create, delete
	// or merge of the same store. Sending it again is safe and runs it against the
	// store as it is now.
	CodeConflict = "CONFLICT"
	// CodeDataLoss (500): a stored object the request needed is corrupt; the
	// message names it. Retrying does not help: an operator must look.
	CodeDataLoss = "DATA_LOSS"
)

// retryAfter is the Retry-After of every 503 answer, in seconds: long enough to
// let a throttled store or a merge catch up a little, short enough for a client
// that sleeps exactly that long.
const retryAfter = "1"

// apiError is an answer a handler decided on: the status, code and message go to the
// client as they are. cause, if set, is logged and never sent.
type apiError struct {
	status  int
	code    string
	message string
	cause   error
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return e.message + ": " + e.cause.Error()
	}
	return e.message
}

func (e *apiError) Unwrap() error { return e.cause }

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidRequest, message: fmt.Sprintf(format, args...)}
}

// internalError is a 500 whose message says what happened, in the client's terms, without
// the details of cause. If cause is a condition of the store or its storage (gone,
// lost a race, overloaded, unavailable, corrupt), the answer's status and code are
// the cause's instead (errorAnswer), with this message.
func internalError(cause error, format string, args ...any) error {
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: fmt.Sprintf(format, args...), cause: cause}
}

func notFound(format string, args ...any) error {
	return &apiError{status: http.StatusNotFound, code: CodeNotFound, message: fmt.Sprintf(format, args...)}
}

// apiHandler is a data route: it writes its success answer itself and returns any
// failure, which is turned into the JSON error shape in one place (errorAnswer).
type apiHandler func(w http.ResponseWriter, r *http.Request) error

// api adapts h to http.Handler.
func (s *Server) api(h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		// An answer the handler decided on stands; anything else may be the wreck
		// of a store deleted under the request.
		var ae *apiError
		if kind, name, ok := routeStore(r); ok && (!errors.As(err, &ae) || ae.status >= http.StatusInternalServerError) {
			err = mergesvc.StoreGone(r.Context(), s.cfg.Stores.Registry(), kind, name, err)
			err = referenceWording(kind, name, err)
		}
		s.writeFailure(w, r, err)
	})
}

// routeStore returns the store a data route names ({name} under /rollouts or
// /generic), and false for routes that name none.
func routeStore(r *http.Request) (registry.Kind, string, bool) {
	_, path, _ := strings.Cut(r.Pattern, " ")
	switch {
	case strings.HasPrefix(path, "/api/v1/rollouts/{name}"):
		return registry.KindRollout, r.PathValue("name"), true
	case strings.HasPrefix(path, "/api/v1/generic/{name}"):
		return registry.KindGeneric, r.PathValue("name"), true
	}
	return "", "", false
}

// referenceWording gives a store that does not exist, or exists already, the
// reference API's message ("Rollout store 'x' does not exist"), which its
// clients may match on; the cause, already classified, stays wrapped.
func referenceWording(kind registry.Kind, name string, err error) error {
	title := "Rollout"
	if kind == registry.KindGeneric {
		title = "Generic"
	}
	switch errclass.Of(err) {
	case errclass.Gone:
		return &apiError{status: http.StatusNotFound, code: CodeNotFound,
			message: fmt.Sprintf("%s store '%s' does not exist", title, name), cause: err}
	case errclass.Exists:
		return &apiError{status: http.StatusConflict, code: CodeAlreadyExists,
			message: fmt.Sprintf("%s store '%s' already exists", title, name), cause: err}
	}
	return err
}

// writeFailure answers err. Client mistakes and known conditions carry their own
// message; anything else is a 500 whose details go to the log only. A 503 carries
// Retry-After.
func (s *Server) writeFailure(w http.ResponseWriter, r *http.Request, err error) {
	status, code, message := errorAnswer(err)
	switch {
	case status >= http.StatusInternalServerError && status != http.StatusServiceUnavailable:
		s.cfg.Logger.Error("data API request failed", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "code", code, "err", err)
	case status == http.StatusServiceUnavailable || code == CodeConflict:
		s.cfg.Logger.Warn("data API request refused", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "code", code, "err", err)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", retryAfter)
	}
	httpjson.WriteError(w, status, code, message)
}

// errorAnswer maps an error to its status, code and client message: the answers a
// handler decided on as they are, the rest by class (package errclass).
func errorAnswer(err error) (status int, code, message string) {
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		if ae.status == http.StatusInternalServerError && ae.cause != nil {
			return causeAnswer(ae)
		}
		return ae.status, ae.code, ae.message
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
			fmt.Sprintf("request body over the limit of %d bytes", tooLarge.Limit)
	}
	return classAnswer(err)
}

// causeAnswer answers an internalError by its cause's class when the cause is a
// condition of the store or of storage, keeping the handler's message (and naming
// a corrupt object). A cause that blames a request (invalid, exists) does not blame
// this one - the handler chose 500 knowing that - and stays a 500. A store gone
// says only that: whatever the handler had done went with it.
func causeAnswer(ae *apiError) (status int, code, message string) {
	switch errclass.Of(ae.cause) {
	case errclass.Internal, errclass.Invalid, errclass.Exists, errclass.Precondition:
		return ae.status, ae.code, ae.message
	case errclass.Gone:
		return classAnswer(ae.cause)
	case errclass.Halt:
		status, code, message = classAnswer(ae.cause)
		return status, code, ae.message + ": " + message
	default:
		status, code, _ = classAnswer(ae.cause)
		return status, code, ae.message
	}
}

// classAnswer is the answer of an error by its class.
func classAnswer(err error) (status int, code, message string) {
	switch errclass.Of(err) {
	case errclass.Invalid:
		// schema.Error and registry messages are written for clients: they name the
		// row, the column, the name and what is wrong with it.
		return http.StatusBadRequest, CodeInvalidRequest, err.Error()
	case errclass.Gone:
		return http.StatusNotFound, CodeNotFound, err.Error()
	case errclass.Exists:
		return http.StatusConflict, CodeAlreadyExists, err.Error()
	case errclass.Conflict:
		// Details (which object vanished, which writer closed) go to the log.
		return http.StatusConflict, CodeConflict,
			"the store was created, deleted or merged while the request ran; send the request again"
	case errclass.Overloaded:
		return http.StatusServiceUnavailable, CodeOverloaded, err.Error()
	case errclass.Busy:
		// The object store is throttling or the base table is contended: retry later.
		return http.StatusServiceUnavailable, CodeOverloaded, "the object store is busy; retry later"
	case errclass.Unavailable:
		// The store failed the request (after its SDK's retries). An add answered
		// this was not acknowledged; sending it again is safe, since rows are
		// deduplicated by id.
		return http.StatusServiceUnavailable, CodeStoreUnavailable, "object storage failed the request; retry later"
	case errclass.Timeout:
		// Our own operation timeout (a throttled object store); retrying is safe.
		return http.StatusServiceUnavailable, CodeOverloaded, "the operation timed out; retry later"
	case errclass.Canceled:
		// The client went away (reads and merges follow the request's context); it
		// will not see this answer, but the request metric will.
		return http.StatusServiceUnavailable, CodeOverloaded, "request cancelled"
	case errclass.Halt:
		// A stored object is corrupt: a server-side loss a retry cannot mend. The
		// message names the object, so the operator the client calls knows where
		// to look.
		return http.StatusInternalServerError, CodeDataLoss, err.Error()
	}
	// Internal, and Precondition, which no data route can fail with (only the
	// master's fenced merges can).
	return http.StatusInternalServerError, CodeInternal, "internal error"
}
