package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/objstore"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/schema"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/table"
)

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

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidRequest, message: fmt.Sprintf(format, args...)}
}

// internalError is a 500 whose message says what happened, in the client's terms, without
// the details of cause.
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
		if err := h(w, r); err != nil {
			s.writeFailure(w, r, err)
		}
	})
}

// writeFailure answers err. Client mistakes and known conditions carry their own
// message; anything else is a 500 whose details go to the log only.
func (s *Server) writeFailure(w http.ResponseWriter, r *http.Request, err error) {
	status, code, message := errorAnswer(err)
	if status == http.StatusInternalServerError {
		s.cfg.Logger.Error("data API request failed", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "err", err)
	} else if status == http.StatusServiceUnavailable {
		s.cfg.Logger.Warn("data API request refused", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "err", err)
	}
	httpjson.WriteError(w, status, code, message)
}

// errorAnswer maps an error to its status, code and client message.
func errorAnswer(err error) (status int, code, message string) {
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code, ae.message
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
			fmt.Sprintf("request body over the limit of %d bytes", tooLarge.Limit)
	case errors.Is(err, schema.ErrInvalid), errors.Is(err, registry.ErrInvalidName):
		// schema.Error and registry messages are written for clients: they name the
		// row, the column, the name and what is wrong with it.
		return http.StatusBadRequest, CodeInvalidRequest, err.Error()
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, store.ErrDeleted):
		return http.StatusNotFound, CodeNotFound, err.Error()
	case errors.Is(err, registry.ErrExists):
		return http.StatusConflict, CodeAlreadyExists, err.Error()
	case errors.Is(err, store.ErrOverloaded):
		return http.StatusServiceUnavailable, CodeOverloaded, err.Error()
	case errors.Is(err, table.ErrTooManyWriters), errors.Is(err, objstore.ErrThrottled):
		// The object store is throttling or the base table is contended: retry later.
		return http.StatusServiceUnavailable, CodeOverloaded, "the object store is busy; retry later"
	case errors.Is(err, objstore.ErrUnavailable):
		// The store failed the request (after its SDK's retries). An add answered
		// this was not acknowledged; sending it again is safe, since rows are
		// deduplicated by id.
		return http.StatusServiceUnavailable, CodeStoreUnavailable, "object storage failed the request; retry later"
	case errors.Is(err, context.DeadlineExceeded):
		// Our own operation timeout (a throttled object store); retrying is safe.
		return http.StatusServiceUnavailable, CodeOverloaded, "the operation timed out; retry later"
	case errors.Is(err, context.Canceled):
		// The client went away (reads and merges follow the request's context); it
		// will not see this answer, but the request metric will.
		return http.StatusServiceUnavailable, CodeOverloaded, "request cancelled"
	}
	return http.StatusInternalServerError, CodeInternal, "internal error"
}
