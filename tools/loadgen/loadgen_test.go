package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
)

// TestRowsDecodeWithTheStoreSchemas proves the generated rows are valid input
// of the real codecs: a generator whose rows a worker rejects (400) is useless.
func TestRowsDecodeWithTheStoreSchemas(t *testing.T) {
	now := time.Now()
	var rollouts, generic []json.RawMessage
	for n := range int64(50) {
		rollouts = append(rollouts, RolloutRecord("run", n, now))
		generic = append(generic, GenericRow("run", n, now))
	}
	rec, err := schema.DecodeRollouts(rollouts, now)
	if err != nil {
		t.Fatalf("rollout records: %v", err)
	}
	rec.Release()
	spec, err := schema.ParseSpec([]byte(GenericSchema))
	if err != nil {
		t.Fatalf("GenericSchema: %v", err)
	}
	rec, err = spec.Codec().Decode(generic)
	if err != nil {
		t.Fatalf("generic rows: %v", err)
	}
	rec.Release()
	if !bytes.Equal(RolloutRecord("run", 7, now), RolloutRecord("run", 7, now)) {
		t.Error("the same row position gives different records")
	}
}

// fakeWorker records the add requests it gets; it answers like a worker.
type fakeWorker struct {
	mu      sync.Mutex
	stores  map[string]int            // POST /rollouts, /generic: creates per name
	rows    map[string]map[string]int // path -> id -> times added
	fail    bool                      // answer adds with 503
	flushes int
}

func newFakeWorker(t *testing.T) (*fakeWorker, *httptest.Server) {
	f := &fakeWorker{stores: map[string]int{}, rows: map[string]map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeWorker) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/api/v1/rollouts" || r.URL.Path == "/api/v1/generic":
		var req struct{ Name string }
		_ = json.Unmarshal(body, &req)
		f.stores[req.Name]++
		if f.stores[req.Name] > 1 {
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"name": req.Name})
	case f.fail:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"UNAVAILABLE","message":"too many pending generations"}}`))
	default:
		var req map[string][]struct{ ID string }
		_ = json.Unmarshal(body, &req)
		if r.URL.Query().Get("flush") == "true" {
			f.flushes++
		}
		if f.rows[r.URL.Path] == nil {
			f.rows[r.URL.Path] = map[string]int{}
		}
		n := 0
		for _, rows := range req {
			for _, row := range rows {
				f.rows[r.URL.Path][row.ID]++
				n++
			}
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]int{"count": n})
	}
}

func TestRunSpreadsBothKindsOverEveryWorkerAndStopsAtMaxRows(t *testing.T) {
	workers := make([]*fakeWorker, 3)
	var urls []string
	for i := range workers {
		f, srv := newFakeWorker(t)
		workers[i] = f
		urls = append(urls, srv.URL)
	}
	var mu sync.Mutex
	acked := map[string]int{}
	st, err := Run(context.Background(), Config{
		Workers: urls, MaxRows: 125, Batch: 10, Concurrency: 3, RunID: "t",
		RolloutStore: "r", GenericStore: "g", Flush: true,
		OnBatch: func(b Batch) {
			mu.Lock()
			defer mu.Unlock()
			if b.Err != nil {
				t.Errorf("batch to %s: %v", b.Worker, b.Err)
			}
			for _, id := range b.IDs {
				acked[id]++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 125 || st.Requests != 13 || st.Failed != 0 || st.RolloutRows+st.GenericRows != 125 {
		t.Errorf("stats %+v, want 125 rows in 13 requests", st)
	}
	if len(acked) != 125 {
		t.Errorf("%d distinct ids acknowledged, want 125", len(acked))
	}
	for i, f := range workers {
		if len(f.rows["/api/v1/rollouts/r/records"]) == 0 || len(f.rows["/api/v1/generic/g/rows"]) == 0 {
			t.Errorf("worker %d got %v: want rows of both kinds", i, mapKeys(f.rows))
		}
		for path, ids := range f.rows {
			for id, n := range ids {
				if n != 1 || acked[id] != 1 {
					t.Errorf("%s: id %s added %d times, acknowledged %d times", path, id, n, acked[id])
				}
			}
		}
		if f.flushes == 0 {
			t.Errorf("worker %d: no ?flush=true add", i)
		}
	}
	if workers[0].stores["r"] != 1 || workers[0].stores["g"] != 1 {
		t.Errorf("store creates %v, want each store created once through the first worker", workers[0].stores)
	}
}

func TestRunCountsFailedRequestsAndReportsTheirIDs(t *testing.T) {
	f, srv := newFakeWorker(t)
	f.fail = true
	var failed []string
	var mu sync.Mutex
	var progress bytes.Buffer
	st, err := Run(context.Background(), Config{
		Workers: []string{strings.TrimPrefix(srv.URL, "http://")}, MaxRows: 30, Batch: 10, Concurrency: 1,
		RolloutStore: "r", Progress: &progress,
		OnBatch: func(b Batch) {
			mu.Lock()
			defer mu.Unlock()
			if b.Err == nil || !strings.Contains(b.Err.Error(), "too many pending generations") {
				t.Errorf("batch error %v: want the worker's message", b.Err)
			}
			failed = append(failed, b.IDs...)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed != 3 || st.Rows != 0 || len(failed) != 30 {
		t.Errorf("stats %+v with %d failed ids, want 3 failed requests of 30 rows and none acknowledged", st, len(failed))
	}
	if !strings.Contains(progress.String(), "load done:") || !strings.Contains(progress.String(), "last error") {
		t.Errorf("progress output %q: want a summary with the last error", progress.String())
	}
}

func TestRunHoldsTheRate(t *testing.T) {
	_, srv := newFakeWorker(t)
	start := time.Now()
	st, err := Run(context.Background(), Config{Workers: []string{srv.URL}, MaxRows: 40, Batch: 10, Rate: 100, RolloutStore: "r"})
	if err != nil {
		t.Fatal(err)
	}
	// 4 batches at 10 rows per 100 ms: the last one leaves 300 ms after the first.
	if took := time.Since(start); st.Rows != 40 || took < 300*time.Millisecond {
		t.Errorf("40 rows at 100 rows/s took %s (%+v): want at least 300ms", took, st)
	}
}

func TestConfigRefusesWhatCannotRun(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no workers":  {RolloutStore: "r"},
		"no store":    {Workers: []string{"127.0.0.1:1"}},
		"bad address": {Workers: []string{"ftp://x"}, RolloutStore: "r"},
		"negative":    {Workers: []string{"127.0.0.1:1"}, RolloutStore: "r", Rate: -1},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
