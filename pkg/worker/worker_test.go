package worker

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/wal"
)

// TestProcessSealsWhatItAcknowledgedOnTheWayOut runs a whole worker process, adds
// rows without ?flush=true, and stops it: the rows must be readable through another
// worker afterwards. Production failure it guards: a worker that stopped without
// sealing left acknowledged rows visible to no one until it came back.
func TestProcessSealsWhatItAcknowledgedOnTheWayOut(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	bucket := objstoretest.Mem(t)
	ss := store.NewStores(store.Config{Bucket: bucket, Shard: "w1", Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	merger := merge.New(merge.Config{Logger: quiet})
	series := NewMetrics(refmetrics.NewProcessRegistry())
	svc, err := NewWorkerService(WorkerServiceConfig{InstanceID: "w1", Stores: ss, Merger: merger, Metrics: series, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{InstanceID: "w1", Logger: quiet, Series: series, Stores: ss, Merger: merger, Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := NewGRPCServer(GRPCConfig{Service: svc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, gln := listen(t), listen(t)
	p := &Process{HTTP: srv, HTTPListener: ln, GRPC: gs, GRPCListener: gln, Service: svc,
		Sweeper: NewSweeper(SweeperConfig{Stores: ss, Merger: merger, Metrics: series, FlushInterval: time.Hour, CleanupInterval: time.Hour, Logger: quiet}),
		Stores:  ss, ShutdownTimeout: 5 * time.Second, Logger: quiet}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	base := "http://" + ln.Addr().String()
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
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}

	other := newAPIEnv(t, bucket, "w2", nil)
	var list struct {
		Rows []map[string]any `json:"rows"`
	}
	other.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/g/rows", nil, &list)
	if len(list.Rows) != 2 {
		t.Fatalf("another worker reads %d rows after the process stopped, want the 2 it acknowledged", len(list.Rows))
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func postJSON(t *testing.T, u, body string) int {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
