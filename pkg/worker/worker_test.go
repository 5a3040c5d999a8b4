package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestWorkerSealsWhatItAcknowledgedOnTheWayOut runs a whole Worker, adds
// rows without ?flush=true, and stops it: the rows must be readable through another
// worker afterwards. Production failure it guards: a worker that stopped without
// sealing left acknowledged rows visible to no one until it came back.
func TestWorkerSealsWhatItAcknowledgedOnTheWayOut(t *testing.T) {
	bucket := objstoretest.Mem(t)
	base, stop := runWorker(t, Config{InstanceID: "w1", Store: store.Config{Bucket: bucket}})
	post := func(path, body string) {
		t.Helper()
		var code int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			code = postJSON(t, base+path, body)
			if code/100 == 2 || time.Now().After(deadline) {
				break
			}
		}
		if code/100 != 2 {
			t.Fatalf("POST %s: %d", path, code)
		}
	}
	post("/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`)
	post("/api/v1/generic/g/rows", `{"rows":[{"id":"a","n":1},{"id":"b","n":2}]}`)
	stop()

	other, stopOther := runWorker(t, Config{InstanceID: "w2", Store: store.Config{Bucket: bucket}})
	defer stopOther()
	var list struct {
		Rows []map[string]any `json:"rows"`
	}
	getJSON(t, other+"/api/v1/generic/g/rows", &list)
	if len(list.Rows) != 2 {
		t.Fatalf("another worker reads %d rows after the process stopped, want the 2 it acknowledged", len(list.Rows))
	}
}

// runWorker builds the worker of cfg and runs it, with loopback listeners, quiet
// logs, no snapshot reuse and hour-long sweeps where cfg leaves them unset; stop
// ends Run and fails the test unless Run returns cleanly within 30 s.
func runWorker(t *testing.T, cfg Config) (base string, stop func()) {
	t.Helper()
	if cfg.HTTPListener == nil {
		cfg.HTTPListener, cfg.GRPCListener = listen(t), listen(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Store.SnapshotTTL == 0 {
		cfg.Store.SnapshotTTL = -1
	}
	cfg.Store.WALOptions = append(cfg.Store.WALOptions, wal.WithLogger(cfg.Logger))
	if cfg.Sweep.FlushInterval == 0 {
		cfg.Sweep.FlushInterval = time.Hour
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		t.Helper()
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return "http://" + cfg.HTTPListener.Addr().String(), stop
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// getJSON decodes the 200 answer to GET u into v, failing the test otherwise.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// apiSpec is a generic store's schema of the tests.
const apiSpec = `{"columns":[["id",{"type":"string"}],["score",{"type":"float64","nullable":true}],["n",{"type":"int64","nullable":false}],["tags",{"type":"list","item":{"type":"string"},"nullable":true}]]}`

func postJSON(t *testing.T, u, body string) int {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWorkerIsListedInEtcdOnlyWhileItRuns wires a worker to a real etcd: while Run
// runs it is listed with the addresses its listeners have and its compact route
// enqueues to the etcd queue; once Run returns it is listed no more. What it
// guards: New building the registration and the queue from one client and
// prefix, and Run revoking the lease on the way out (a dead worker the master
// keeps calling until its lease expires).
func TestWorkerIsListedInEtcdOnlyWhileItRuns(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/wk"
	ln, gln := listen(t), listen(t)
	base, stop := runWorker(t, Config{InstanceID: "w1", HTTPListener: ln, GRPCListener: gln,
		Etcd: client, Prefix: prefix, LeaseTTL: 5 * time.Second, Store: store.Config{Bucket: objstoretest.Mem(t)}})

	disc := &membership.Discovery{Client: client, Prefix: prefix}
	listed := func() []membership.Worker {
		ws, err := disc.Workers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	testwait.Until(t, 10*time.Second, "the worker to be listed", func() bool { return len(listed()) == 1 })
	if got := listed()[0]; got.InstanceID != "w1" || got.GRPCAddr != gln.Addr().String() || got.HTTPAddr != ln.Addr().String() {
		t.Fatalf("listed as %+v; want w1 at grpc %s, http %s", got, gln.Addr(), ln.Addr())
	}
	if code := postJSON(t, base+"/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`); code/100 != 2 {
		t.Fatalf("create store: %d", code)
	}
	if code := postJSON(t, base+"/api/v1/generic/g/compact", ``); code != http.StatusAccepted {
		t.Fatalf("compact: %d, want 202 (enqueued to the etcd queue)", code)
	}
	queued, _, err := tasks.New(client, prefix).List(context.Background(), tasks.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 1 || queued[0].Kind != tasks.KindCompact {
		t.Fatalf("tasks in etcd after a compact request: %+v; want one compact task", queued)
	}

	stop()
	if ws := listed(); len(ws) != 0 {
		t.Fatalf("still listed after Run returned: %+v", ws)
	}
}

// Every part of the worker registers its series on the worker's registry, which
// /metrics serves: the HTTP API's, the merge service's, the sweeps' and the
// feed's. Failure it guards: a part's series created and counted but never
// registered, so they silently vanish from every dashboard.
func TestWorkerServesEveryPartsSeries(t *testing.T) {
	base, stop := runWorker(t, Config{InstanceID: "w1", Store: store.Config{Bucket: objstoretest.Mem(t)}})
	defer stop()
	var body []byte
	testwait.For(t, 10*time.Second, "the worker to serve /metrics after a request", func() (bool, string) {
		postJSON(t, base+"/api/v1/rollouts", `{"name":"m"}`)
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return bytes.Contains(body, []byte(`http_requests_total{`)), string(body)
	})
	for _, name := range []string{
		"http_requests_total",                  // httpapi
		"rollout_add_request_duration_seconds", // httpapi
		"tidemark_feed_pages_total",            // feed
		"rollout_wal_merge_errors_total",       // mergesvc
		"rollout_flush_duration_seconds",       // mergesvc
		"rollout_wal_cleanup_total",            // sweep
		"tidemark_wal_drained_files_total",     // sweep
	} {
		if !bytes.Contains(body, []byte("\n"+name)) {
			t.Errorf("/metrics has no %s", name)
		}
	}
}
