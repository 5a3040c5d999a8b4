package httpapi

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

const testToken = "test-token-0123456789abcdef"

func testGuard(t *testing.T) *auth.Guard {
	t.Helper()
	toks, err := auth.NewTokens("test", testToken)
	if err != nil {
		t.Fatal(err)
	}
	return auth.NewGuard(auth.GuardConfig{Tokens: toks})
}

// send is e.do with an optional bearer token; it returns the status and body.
func (e *apiEnv) send(method, path, token string, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	auth.SetHeader(req.Header, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// The guarded failure: anyone who could reach a worker's HTTP port could make it
// merge. Without the token the control routes answer 401 and the store is
// untouched (its pending generations are still pending); with it they merge.
// Health and metrics stay open, and so do data routes (flush among them, as in
// the reference API) unless configured.
func TestControlRoutesWithoutTokenAre401AndMergeNothing(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.Auth = testGuard(t) })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"sec"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/sec/records?flush=true", `{"records":[{"id":"a","rollout_id":"r"}]}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/sec/records?flush=true", `{"records":[{"id":"b","rollout_id":"r"}]}`, nil)
	before := e.stats("rollouts", "sec").Stats
	if before.PendingGenerations != 2 {
		t.Fatalf("pending generations %d, want 2 before the merge attempts", before.PendingGenerations)
	}
	if code, body := e.send(http.MethodPost, "/api/v1/generic/sec/flush", "", ""); code != http.StatusNotFound {
		t.Errorf("flush without a token: %d %s, want the data route's own answer (404: no generic store sec)", code, body)
	}
	for _, path := range []string{"/api/v1/internal/merge-wal/sec", "/api/v1/generic/sec/merge-wal"} {
		for _, token := range []string{"", "wrong-token-0123456789abcdef"} {
			code, body := e.send(http.MethodPost, path, token, "")
			if code != http.StatusUnauthorized || !strings.Contains(body, auth.CodeUnauthenticated) {
				t.Fatalf("POST %s with token %q: %d %s, want 401 %s", path, token, code, body, auth.CodeUnauthenticated)
			}
		}
	}
	after := e.stats("rollouts", "sec")
	if after.Stats.PendingGenerations != 2 || *after.Store.Version != 1 {
		t.Fatalf("after refused merges: %d pending generations, version %d; want 2 and version 1 (nothing merged)",
			after.Stats.PendingGenerations, *after.Store.Version)
	}
	if n := e.count(e.series.Requests, "POST", "/api/v1/internal/merge-wal/{name}", "401"); n != 2 {
		t.Errorf("requests counted as 401: %d, want 2", n)
	}

	code, body := e.send(http.MethodPost, "/api/v1/internal/merge-wal/sec", testToken, "")
	if code != http.StatusOK {
		t.Fatalf("merge with the token: %d %s", code, body)
	}
	if got := e.stats("rollouts", "sec").Stats.PendingGenerations; got != 0 {
		t.Fatalf("pending generations %d after an authorized merge, want 0", got)
	}
	for _, path := range []string{"/api/v1/health", "/metrics"} {
		if code, body := e.send(http.MethodGet, path, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s, want 200", path, code, body)
		}
	}
}

func TestDataRoutesNeedTheTokenWhenConfigured(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.Auth = testGuard(t); c.AuthDataRoutes = true })
	for _, r := range []struct{ method, path, body string }{
		{http.MethodPost, "/api/v1/rollouts", `{"name":"sec"}`},
		{http.MethodGet, "/api/v1/rollouts", ""},
		{http.MethodPost, "/api/v1/rollouts/sec/records", `{"records":[{"id":"a","rollout_id":"r"}]}`},
	} {
		if code, body := e.send(r.method, r.path, "", r.body); code != http.StatusUnauthorized {
			t.Fatalf("%s %s without a token: %d %s, want 401", r.method, r.path, code, body)
		}
	}
	if code, body := e.send(http.MethodGet, "/api/v1/rollouts/sec", testToken, ""); code != http.StatusNotFound {
		t.Fatalf("the refused create created the store: GET answers %d %s", code, body)
	}
	if code, body := e.send(http.MethodPost, "/api/v1/rollouts", testToken, `{"name":"sec"}`); code != http.StatusCreated {
		t.Fatalf("create with the token: %d %s", code, body)
	}
	if code, body := e.send(http.MethodGet, "/api/v1/health", "", ""); code != http.StatusOK {
		t.Fatalf("health without a token: %d %s", code, body)
	}
}
