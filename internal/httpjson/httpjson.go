package httpjson

import (
	"encoding/json"
	"net/http"
)

// Error codes both APIs use; each API adds its own.
const (
	CodeInvalidRequest   = "INVALID_REQUEST"    // 400: the client's mistake; the message says which
	CodeNotFound         = "NOT_FOUND"          // 404: no such route or resource
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED" // 405
	CodeInternal         = "INTERNAL"           // 500: details are logged, not returned
)

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error inside ErrorBody.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteJSON answers status with v encoded as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status line is gone already; an encode error means the client went away.
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers status with the JSON error shape.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	WriteJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: message}})
}

// RouteErrors turns the plain-text 404 and 405 answers of http.ServeMux into the
// JSON error shape; routed requests pass through untouched.
func RouteErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No pattern: h is the mux's own not-found or method-not-allowed handler. Let
		// it decide which (it also sets Allow), then replace its text body.
		h.ServeHTTP(&routeErrorWriter{ResponseWriter: w, r: r}, r)
	})
}

// routeErrorWriter rewrites the mux's http.Error answer as JSON.
type routeErrorWriter struct {
	http.ResponseWriter
	r           *http.Request
	wroteHeader bool
}

func (w *routeErrorWriter) WriteHeader(status int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	w.Header().Del("X-Content-Type-Options")
	switch status {
	case http.StatusMethodNotAllowed:
		WriteError(w.ResponseWriter, status, CodeMethodNotAllowed,
			"method "+w.r.Method+" not allowed on "+w.r.URL.Path+" (allowed: "+w.Header().Get("Allow")+")")
	default:
		WriteError(w.ResponseWriter, http.StatusNotFound, CodeNotFound, "no route for "+w.r.Method+" "+w.r.URL.Path)
	}
}

// Write discards the mux's plain-text body; WriteHeader has written the JSON one.
func (w *routeErrorWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return len(p), nil
}
