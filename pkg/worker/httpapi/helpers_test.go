package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// apiSpec is the generic schema most API tests use.
const apiSpec = `{"columns":[["id",{"type":"string"}],["score",{"type":"float64","nullable":true}],["n",{"type":"int64","nullable":false}],["tags",{"type":"list","item":{"type":"string"},"nullable":true}]]}`

// apiEnv is one worker's HTTP API over real stores and a real merger, served by
// httptest so requests go through net/http (body limits, contexts, connections).
type apiEnv struct {
	t      *testing.T
	srv    *Server
	url    string
	bucket *objstore.Bucket
	stores *store.Stores
	series *Metrics
	// merges are the series seals and merges are counted in (the merge
	// service's, shared with the gRPC service and the sweeps in a worker).
	merges *mergesvc.Metrics
}

// newAPIEnv serves a worker with instance id shard on bucket. edit, if given,
// adjusts the config before NewServer.
func newAPIEnv(t *testing.T, bucket *objstore.Bucket, shard string, edit func(*ServerConfig)) *apiEnv {
	t.Helper()
	return newAPIEnvWith(t, bucket, shard, nil, edit)
}

// newAPIEnvWith is newAPIEnv whose store config (every read refreshes, by default)
// editStores adjusts first.
func newAPIEnvWith(t *testing.T, bucket *objstore.Bucket, shard string, editStores func(*store.Config), edit func(*ServerConfig)) *apiEnv {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	sc := store.Config{Bucket: bucket, Shard: shard, Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}
	if editStores != nil {
		editStores(&sc)
	}
	ss := store.NewStores(sc, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	reg := prometheus.NewRegistry()
	cfg := ServerConfig{InstanceID: shard, Logger: quiet, Metrics: reg, Stores: ss,
		Merger: merge.New(merge.Config{Logger: quiet}), Series: NewMetrics(reg)}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &apiEnv{t: t, srv: srv, url: hs.URL, bucket: bucket, stores: ss, series: srv.cfg.Series, merges: srv.cfg.Merges.Metrics()}
}

// do sends body (a string, or nil) and returns the status and the answer.
func (e *apiEnv) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusNoContent && ct != "application/json" {
		e.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if resp.StatusCode == http.StatusNoContent && len(out) != 0 {
		e.t.Errorf("%s %s: 204 with a body %q", method, path, out)
	}
	return resp.StatusCode, out
}

// ok sends a request that must answer want, and decodes the answer into v (if
// not nil).
func (e *apiEnv) ok(want int, method, path string, body, v any) {
	e.t.Helper()
	status, out := e.do(method, path, body)
	if status != want {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, out)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			e.t.Fatalf("%s %s: answer %s: %v", method, path, out, err)
		}
	}
}

// fails sends a request that must fail with status and code, and returns the
// message.
func (e *apiEnv) fails(status int, code, method, path string, body any) string {
	e.t.Helper()
	got, out := e.do(method, path, body)
	var eb ErrorBody
	if err := json.Unmarshal(out, &eb); err != nil {
		e.t.Fatalf("%s %s: answer %q is not the error shape: %v", method, path, out, err)
	}
	if got != status || eb.Error.Code != code || eb.Error.Message == "" {
		e.t.Fatalf("%s %s: status %d %+v, want %d %s with a message", method, path, got, eb.Error, status, code)
	}
	return eb.Error.Message
}

// seal seals this worker's memtable of a store, so reads see what was added.
func (e *apiEnv) seal(kind registry.Kind, name string) {
	e.t.Helper()
	st, release, err := e.stores.Open(context.Background(), kind, name)
	if err != nil {
		e.t.Fatal(err)
	}
	defer release()
	if _, err := st.Seal(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// rows lists every row of a store (kind "rollouts" or "generic") as raw JSON.
func (e *apiEnv) rows(kind, name string) []json.RawMessage {
	e.t.Helper()
	key := "rows"
	if kind == "rollouts" {
		key = "records"
	}
	var ans map[string]json.RawMessage
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/"+kind+"/"+name+"/"+key, nil, &ans)
	var rows []json.RawMessage
	if err := json.Unmarshal(ans[key], &rows); err != nil {
		e.t.Fatal(err)
	}
	var count int
	if err := json.Unmarshal(ans["count"], &count); err != nil || count != len(rows) {
		e.t.Fatalf("list %s/%s: count %s for %d rows", kind, name, ans["count"], len(rows))
	}
	return rows
}

// storeGot is GET /<kind>/{name}'s one flat object, read as its two halves.
type storeGot struct {
	Store storeInfo
	Stats storeStats
}

// stats is GET /<kind>/{name}.
func (e *apiEnv) stats(kind, name string) storeGot {
	e.t.Helper()
	_, out := e.do(http.MethodGet, "/api/v1/"+kind+"/"+name, nil)
	var got storeGot
	var keys map[string]json.RawMessage
	if json.Unmarshal(out, &got.Store) != nil || json.Unmarshal(out, &got.Stats) != nil || json.Unmarshal(out, &keys) != nil {
		e.t.Fatalf("GET %s/%s: %s", kind, name, out)
	}
	for _, k := range []string{"name", "uri", "version", "row_count", "pending_generations"} {
		if _, ok := keys[k]; !ok {
			e.t.Fatalf("GET %s/%s: no %q in %s", kind, name, k, out)
		}
	}
	return got
}

func (e *apiEnv) count(c *prometheus.CounterVec, labels ...string) int {
	return int(testutil.ToFloat64(c.WithLabelValues(labels...)))
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, cond)
}
