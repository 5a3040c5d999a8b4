package httpapi

import "github.com/tidemark-io/tidemark/internal/httpjson"

// Error codes of the {"error":{"code","message"}} answers.
const (
	CodeInvalidRequest   = httpjson.CodeInvalidRequest   // 400: the client's mistake; the message says which
	CodeNotFound         = httpjson.CodeNotFound         // 404: no such route, store or row
	CodeMethodNotAllowed = httpjson.CodeMethodNotAllowed // 405
	CodeAlreadyExists    = "ALREADY_EXISTS"              // 409: a store of that kind and name exists
	CodePayloadTooLarge  = "PAYLOAD_TOO_LARGE"           // 413: body over ServerConfig.MaxBodyBytes
	CodeInternal         = httpjson.CodeInternal         // 500: details are logged, not returned
	CodeOverloaded       = "OVERLOADED"                  // 503: too many pending generations, or draining
	CodeStoreUnavailable = "STORE_UNAVAILABLE"           // 503: object storage failed the request; retry
	CodeTasksUnavailable = "TASKS_UNAVAILABLE"           // 503: no task queue (etcd) to enqueue a compact task in
)

// ErrorBody is the JSON body of every error answer.
type ErrorBody = httpjson.ErrorBody

// ErrorDetail is the error inside ErrorBody.
type ErrorDetail = httpjson.ErrorDetail
