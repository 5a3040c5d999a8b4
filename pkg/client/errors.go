package client

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The codes of the worker's error answers (pkg/worker's Code* constants and
// internal/httpjson's, docs/API.md "Errors, and which to retry").
const (
	CodeInvalidRequest       = "INVALID_REQUEST"
	CodeUnauthenticated      = "UNAUTHENTICATED"
	CodeNotFound             = "NOT_FOUND"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodeAlreadyExists        = "ALREADY_EXISTS"
	CodeConflict             = "CONFLICT"
	CodeCursorBehind         = "CURSOR_BEHIND"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	CodeOverloaded           = "OVERLOADED"
	CodeStoreUnavailable     = "STORE_UNAVAILABLE"
	CodeConsumerLag          = "CONSUMER_LAG"
	CodeConsumersUnavailable = "CONSUMERS_UNAVAILABLE"
	CodeFeedUnavailable      = "FEED_UNAVAILABLE"
	CodeTasksUnavailable     = "TASKS_UNAVAILABLE"
	CodeDataLoss             = "DATA_LOSS"
	CodeInternal             = "INTERNAL"
)

// Sentinels an *Error matches with errors.Is, one per code.
var (
	ErrInvalidRequest       = errors.New("invalid request")
	ErrUnauthenticated      = errors.New("unauthenticated")
	ErrNotFound             = errors.New("not found")
	ErrMethodNotAllowed     = errors.New("method not allowed")
	ErrAlreadyExists        = errors.New("already exists")
	ErrConflict             = errors.New("conflict with a concurrent create, delete or merge")
	ErrCursorBehind         = errors.New("cursor behind the consumer's committed cursor")
	ErrPayloadTooLarge      = errors.New("request body too large")
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	ErrOverloaded           = errors.New("overloaded")
	ErrStoreUnavailable     = errors.New("object storage unavailable")
	ErrConsumerLag          = errors.New("a named consumer lags behind")
	ErrConsumersUnavailable = errors.New("consumers unavailable")
	ErrFeedUnavailable      = errors.New("change feed unavailable")
	ErrTasksUnavailable     = errors.New("tasks unavailable")
	ErrDataLoss             = errors.New("data loss")
	ErrInternal             = errors.New("internal error")
)

// Errors of the client's own.
var (
	// ErrTooLarge refuses an answer larger than the client's MaxAnswer.
	ErrTooLarge = errors.New("answer too large")
	// ErrUndecodable marks a 2xx answer that is not the JSON expected.
	ErrUndecodable = errors.New("answer does not decode")
)

var sentinels = map[string]error{
	CodeInvalidRequest:       ErrInvalidRequest,
	CodeUnauthenticated:      ErrUnauthenticated,
	CodeNotFound:             ErrNotFound,
	CodeMethodNotAllowed:     ErrMethodNotAllowed,
	CodeAlreadyExists:        ErrAlreadyExists,
	CodeConflict:             ErrConflict,
	CodeCursorBehind:         ErrCursorBehind,
	CodePayloadTooLarge:      ErrPayloadTooLarge,
	CodeUnsupportedMediaType: ErrUnsupportedMediaType,
	CodeOverloaded:           ErrOverloaded,
	CodeStoreUnavailable:     ErrStoreUnavailable,
	CodeConsumerLag:          ErrConsumerLag,
	CodeConsumersUnavailable: ErrConsumersUnavailable,
	CodeFeedUnavailable:      ErrFeedUnavailable,
	CodeTasksUnavailable:     ErrTasksUnavailable,
	CodeDataLoss:             ErrDataLoss,
	CodeInternal:             ErrInternal,
}

// byStatus is the sentinel of an answer without a code (a proxy's, or a 503
// draining health answer).
var byStatus = map[int]error{
	http.StatusBadRequest:            ErrInvalidRequest,
	http.StatusUnauthorized:          ErrUnauthenticated,
	http.StatusNotFound:              ErrNotFound,
	http.StatusMethodNotAllowed:      ErrMethodNotAllowed,
	http.StatusRequestEntityTooLarge: ErrPayloadTooLarge,
	http.StatusServiceUnavailable:    ErrOverloaded,
	http.StatusInternalServerError:   ErrInternal,
}

// Error is a worker's answer other than 2xx.
type Error struct {
	// Status is the HTTP status; Code and Message the {"error":{"code","message"}}
	// body's (Code empty and Message the body's text when it has no such body).
	Status        int
	Code, Message string
	// RetryAfter is the answer's Retry-After (every 503 has one), 0 if none.
	RetryAfter time.Duration
	// BackpressureDelay is how long a refused add waited for its store before
	// the refusal (X-Tidemark-Backpressure-Delay), 0 if it did not.
	BackpressureDelay time.Duration
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, code, e.Message)
}

// Is matches the sentinel of e's code (of its status, when it has no code).
func (e *Error) Is(target error) bool {
	s, ok := sentinels[e.Code]
	if !ok {
		s = byStatus[e.Status]
	}
	return s != nil && s == target
}

// IsNotFound reports whether err is a 404: no such store, row, consumer or route.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsAlreadyExists reports whether err is a create of a store that exists.
func IsAlreadyExists(err error) bool { return errors.Is(err, ErrAlreadyExists) }

// Retryable reports whether sending the request again may succeed: a CONFLICT
// (at once) or any 503 (no sooner than its RetryAfter). A call that got no
// answer is not an *Error: whether to retry it is the caller's decision.
func Retryable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code == CodeConflict || e.Status == http.StatusServiceUnavailable
}
