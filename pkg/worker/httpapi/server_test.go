package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
)

// startServer serves cfg on a loopback port and returns its base URL. Cleanup stops
// the server and fails the test if the shutdown was not clean.
func startServer(t *testing.T, cfg ServerConfig) string {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve after cancel: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return 10s after its context was cancelled")
		}
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, method, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestHealthReportsOKAndInstanceID(t *testing.T) {
	base := startServer(t, ServerConfig{InstanceID: "worker-7"})
	resp, body := get(t, http.MethodGet, base+"/api/v1/health")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var got healthResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if got != (healthResponse{Status: "ok", InstanceID: "worker-7"}) {
		t.Errorf("health = %+v", got)
	}
}

func TestMetricsServesTheGivenRegistryNotTheGlobalOne(t *testing.T) {
	reg := refmetrics.NewProcessRegistry()
	probe := prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_test_probe_total", Help: "test"})
	reg.MustRegister(probe)
	probe.Add(3)

	base := startServer(t, ServerConfig{InstanceID: "w", Metrics: reg})
	resp, body := get(t, http.MethodGet, base+"/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %s", resp.StatusCode, body)
	}
	for _, want := range []string{"tidemark_test_probe_total 3", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// A second server in the same process has its own counters.
	other := startServer(t, ServerConfig{InstanceID: "w2"})
	if _, body := get(t, http.MethodGet, other+"/metrics"); strings.Contains(string(body), "tidemark_test_probe_total") {
		t.Error("a server with its own registry shows another server's metric")
	}
}

func TestUnknownRouteAndWrongMethodAnswerJSONErrors(t *testing.T) {
	base := startServer(t, ServerConfig{InstanceID: "w"})
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/api/v1/nope", http.StatusNotFound, CodeNotFound},
		{http.MethodGet, "/", http.StatusNotFound, CodeNotFound},
		{http.MethodPost, "/api/v1/health", http.StatusMethodNotAllowed, CodeMethodNotAllowed},
	} {
		resp, body := get(t, tc.method, base+tc.path)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, ct)
		}
		var got ErrorBody
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("%s %s: body %q is not the JSON error shape: %v", tc.method, tc.path, body, err)
			continue
		}
		if got.Error.Code != tc.code || got.Error.Message == "" {
			t.Errorf("%s %s: error %+v, want code %s and a message", tc.method, tc.path, got.Error, tc.code)
		}
	}
}

func TestServeReturnsErrorWhenInFlightRequestOutlivesShutdownTimeout(t *testing.T) {
	srv, err := NewServer(ServerConfig{InstanceID: "w", ShutdownTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Hold one request open across the shutdown.
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	routes := srv.handler
	srv.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		routes.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/slow")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "still running") {
			t.Fatalf("Serve = %v, want an error saying requests were still running", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its shutdown timeout")
	}
}

func TestNewServerRejectsBadInstanceID(t *testing.T) {
	for _, id := range []string{"", "a/b", "../x", "-x", strings.Repeat("a", 129)} {
		if _, err := NewServer(ServerConfig{InstanceID: id}); err == nil {
			t.Errorf("instance id %q accepted", id)
		}
	}
}
