// Package httpjson is the JSON answer shape the worker's and the master's HTTP APIs
// share: success bodies, the {"error":{"code","message"}} error body, and the JSON
// rewriting of http.ServeMux's plain-text 404 and 405 answers.
package httpjson
