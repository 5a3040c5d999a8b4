package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestDrainingRefusesDataRoutesButServesHealthAndMetrics(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.srv.draining.Store(true)

	for _, req := range []struct{ method, path, body string }{
		{"GET", "/api/v1/rollouts", ""},
		{"GET", "/api/v1/rollouts/r", ""},
		{"POST", "/api/v1/rollouts/r/records", `{"records":[{"id":"a"}]}`},
		{"GET", "/api/v1/rollouts/r/records", ""},
		{"POST", "/api/v1/internal/merge-wal/r", ""},
		{"POST", "/api/v1/generic", `{"name":"g","schema":` + apiSpec + `}`},
		{"GET", "/api/v1/nope", ""},
	} {
		msg := e.fails(http.StatusServiceUnavailable, CodeOverloaded, req.method, req.path, req.body)
		if msg != "worker is shutting down" {
			t.Errorf("%s %s: message %q", req.method, req.path, msg)
		}
	}
	if got := e.count(e.series.AppendedRows, "rollout"); got != 0 {
		t.Errorf("a refused add appended %d rows", got)
	}

	status, body := e.do(http.MethodGet, "/api/v1/health", nil)
	var h healthResponse
	if err := json.Unmarshal(body, &h); err != nil || status != http.StatusServiceUnavailable || h.Status != "draining" {
		t.Errorf("health while draining: %d %s", status, body)
	}
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics while draining: %d", resp.StatusCode)
	}

	// Nothing was created or changed while draining.
	e.srv.draining.Store(false)
	if rows := e.rows("rollouts", "r"); len(rows) != 0 {
		t.Errorf("rows after draining: %s", rows)
	}
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/generic/g", nil)
}

// Shutdown must let an accepted write finish: Serve sets draining (new requests get
// 503) and then waits for the add in flight, whose rows are durable when it answers.
func TestServeDrainsAndFinishesAnAcceptedAdd(t *testing.T) {
	faults := &objstore.Faults{}
	e := newAPIEnv(t, objstore.WithFaults(objstoretest.Mem(t), faults), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/r/records", `{"records":[{"id":"warm"}]}`, nil)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()

	faults.SetLatency(300*time.Millisecond, 0)
	type answer struct {
		status int
		err    error
	}
	added := make(chan answer, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/api/v1/rollouts/r/records", "application/json",
			strings.NewReader(`{"records":[{"id":"in-flight"}]}`))
		if err != nil {
			added <- answer{err: err}
			return
		}
		resp.Body.Close()
		added <- answer{status: resp.StatusCode}
	}()
	waitFor(t, "the add to reach the object store", func() bool { return faults.InFlight() > 0 })
	cancel()
	waitFor(t, "draining", e.srv.draining.Load)

	// A new request is refused while the accepted one runs.
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/rollouts", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("new request while draining: %d %s", rec.Code, rec.Body)
	}

	if a := <-added; a.err != nil || a.status != http.StatusCreated {
		t.Fatalf("accepted add during shutdown: %d, %v", a.status, a.err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	faults.SetLatency(0, 0)
	if got := e.count(e.series.AppendedRows, "rollout"); got != 2 {
		t.Errorf("appended rows = %d, want 2", got)
	}
}

func TestRequestMetricsAreLabelledByRoutePattern(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/rollouts/r/records", nil, nil)
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/rollouts/r/records/some-id", nil, nil)
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/rollouts/missing/records", nil)
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/no/such/route", nil)
	e.fails(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "BREW", "/api/v1/health", nil)

	for _, c := range []struct {
		route, method, code string
		want                int
	}{
		{"/api/v1/rollouts", "POST", "201", 1},
		{"/api/v1/rollouts/{name}/records", "GET", "200", 1},
		{"/api/v1/rollouts/{name}/records", "GET", "404", 1},
		{"/api/v1/rollouts/{name}/records/{id}", "GET", "200", 1},
		{refmetrics.UnknownPath, "GET", "404", 1},
		{refmetrics.UnknownPath, "other", "405", 1},
	} {
		if got := e.count(e.series.Requests, c.method, c.route, c.code); got != c.want {
			t.Errorf("http_requests_total{method=%s,path=%q,status=%s} = %d, want %d", c.method, c.route, c.code, got, c.want)
		}
	}
	// No raw path became a label value.
	if n := testutil.CollectAndCount(e.series.Requests); n != 6 {
		t.Errorf("%d request series, want 6", n)
	}
	if n := testutil.CollectAndCount(e.series.RequestDuration); n != 6 {
		t.Errorf("%d duration series, want 6 (the counter's labels)", n)
	}
}
