package worker

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/etcdtest"
	"github.com/tidemark-io/tidemark/internal/testwait"
	"github.com/tidemark-io/tidemark/pkg/membership"
	"github.com/tidemark-io/tidemark/pkg/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/wal"
)

// TestWorkerSealsWhatItAcknowledgedOnTheWayOut runs a whole Worker, adds
// rows without ?flush=true, and stops it: the rows must be readable through another
// worker afterwards. Production failure it guards: a worker that stopped without
// sealing left acknowledged rows visible to no one until it came back.
func TestWorkerSealsWhatItAcknowledgedOnTheWayOut(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	bucket := objstoretest.Mem(t)
	ln, gln := listen(t), listen(t)
	w, err := New(Config{InstanceID: "w1", HTTPListener: ln, GRPCListener: gln, Logger: quiet,
		Store: store.Config{Bucket: bucket, SnapshotTTL: -1, WALOptions: []wal.Option{wal.WithLogger(quiet)}},
		Sweep: SweeperConfig{FlushInterval: time.Hour, CleanupInterval: time.Hour}, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

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

// TestWorkerIsListedInEtcdOnlyWhileItRuns wires a worker to a real etcd: while Run
// runs it is listed with the addresses its listeners have and its compact route
// enqueues to the etcd queue; once Run returns it is listed no more. What it
// guards: New building the registration and the queue from one client and
// prefix, and Run revoking the lease on the way out (a dead worker the master
// keeps calling until its lease expires).
func TestWorkerIsListedInEtcdOnlyWhileItRuns(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	client, _ := etcdtest.Start(t)
	const prefix = "/wk"
	ln, gln := listen(t), listen(t)
	w, err := New(Config{InstanceID: "w1", HTTPListener: ln, GRPCListener: gln, Logger: quiet,
		Etcd: client, Prefix: prefix, LeaseTTL: 5 * time.Second,
		Store: store.Config{Bucket: objstoretest.Mem(t), SnapshotTTL: -1, WALOptions: []wal.Option{wal.WithLogger(quiet)}},
		Sweep: SweeperConfig{FlushInterval: time.Hour, CleanupInterval: time.Hour}, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

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
	base := "http://" + ln.Addr().String()
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
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if ws := listed(); len(ws) != 0 {
		t.Fatalf("still listed after Run returned: %+v", ws)
	}
}
