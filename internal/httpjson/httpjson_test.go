package httpjson

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRouteErrorsAnswersJSON(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	h := RouteErrors(mux)
	for _, tc := range []struct {
		method, path string
		status       int
		body, allow  string
	}{
		{"GET", "/ok", http.StatusOK, `{"status":"ok"}` + "\n", ""},
		{"GET", "/nope", http.StatusNotFound,
			`{"error":{"code":"NOT_FOUND","message":"no route for GET /nope"}}` + "\n", ""},
		{"POST", "/ok", http.StatusMethodNotAllowed,
			`{"error":{"code":"METHOD_NOT_ALLOWED","message":"method POST not allowed on /ok (allowed: GET, HEAD)"}}` + "\n", "GET, HEAD"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status || rec.Body.String() != tc.body {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.status, tc.body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, ct)
		}
		if got := rec.Header().Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
		if rec.Header().Get("X-Content-Type-Options") != "" {
			t.Errorf("%s %s: X-Content-Type-Options left from the mux's text answer", tc.method, tc.path)
		}
	}
}
