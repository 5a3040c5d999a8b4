// Package httpjson is the HTTP wire format the worker's and the master's APIs and
// their clients share: success bodies, the {"error":{"code","message"}} error body,
// the JSON rewriting of http.ServeMux's plain-text 404 and 405 answers, the
// headers of the worker's causal tokens, and the media type and headers of its
// Arrow IPC answers.
package httpjson
