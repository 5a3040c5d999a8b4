package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/worker/feed"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// newConsumersEnv is a worker whose consumers live in a real etcd.
func newConsumersEnv(t *testing.T) (*apiEnv, *consumers.Cursors) {
	t.Helper()
	client, _ := etcdtest.Start(t)
	cursors := consumers.New(client, "/tidemark")
	return newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.Consumers = cursors }), cursors
}

// A consumer commits its cursor and reads it back; the cursor only moves
// forward, an equal commit is a harmless repeat, and one behind it is a 409
// naming the committed cursor. Each store has its own cursor per consumer, and a
// store's deletion takes its consumers with it.
func TestConsumerRoutesCommitForwardAndReadBack(t *testing.T) {
	e, cursors := newConsumersEnv(t)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"r","schema":{"columns":[["id",{"type":"string"}]]}}`, nil)
	const path = "/api/v1/consumers/trainer/rollouts/r"
	at := func(seq uint64, id string) string { return rowkey.Position{Seq: seq, ID: id}.Cursor() }

	if msg := e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, path, nil); !strings.Contains(msg, "trainer") {
		t.Fatalf("never committed: %q, want the consumer named", msg)
	}
	var first, again, ahead, got consumerAnswer
	e.ok(http.StatusOK, http.MethodPost, path+"/commit", map[string]string{"cursor": at(10, "a")}, &first)
	if first.Consumer != "trainer" || first.Store != "r" || first.Cursor != at(10, "a") || first.CommittedAt.IsZero() {
		t.Fatalf("commit answer %+v", first)
	}
	e.ok(http.StatusOK, http.MethodPost, path+"/commit", map[string]string{"cursor": at(10, "a")}, &again)
	if again != first {
		t.Fatalf("an equal commit answered %+v, want the record unchanged %+v", again, first)
	}
	msg := e.fails(http.StatusConflict, CodeCursorBehind, http.MethodPost, path+"/commit", map[string]string{"cursor": at(9, "z")})
	if !strings.Contains(msg, at(10, "a")) || !strings.Contains(msg, at(9, "z")) {
		t.Fatalf("behind: %q, want both cursors named", msg)
	}
	e.ok(http.StatusOK, http.MethodPost, path+"/commit", map[string]string{"cursor": at(11, "a")}, &ahead)
	e.ok(http.StatusOK, http.MethodGet, path, nil, &got)
	if got != ahead || got.Cursor != at(11, "a") {
		t.Fatalf("GET = %+v, want %+v", got, ahead)
	}
	// The generic store of the same name is another store.
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/consumers/trainer/generic/r", nil)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/consumers/trainer/generic/r/commit", map[string]string{"cursor": at(1, "x")}, nil)

	// What the changes route starts from with ?consumer= and no cursor.
	ctx := context.Background()
	if c, found, err := e.srv.committedCursor(ctx, registry.MustParseTarget("r"), "trainer"); err != nil || !found || c != (rowkey.Position{Seq: 11, ID: "a"}) {
		t.Fatalf("committedCursor = %+v, %v, %v", c, found, err)
	}
	if _, found, err := e.srv.committedCursor(ctx, registry.MustParseTarget("r"), "nobody"); err != nil || found {
		t.Fatalf("committedCursor of a consumer that never committed = %v, %v; want not found, no error", found, err)
	}
	if _, _, err := e.srv.committedCursor(ctx, registry.MustParseTarget("r"), "a/b"); err == nil {
		t.Fatal("committedCursor accepted a bad consumer name")
	} else if status, _, _ := errorAnswer(err); status != http.StatusBadRequest {
		t.Fatalf("committedCursor of a bad name answers %d, want 400", status)
	}

	// Deleting the rollout store takes its consumers, not the generic store's.
	e.ok(http.StatusNoContent, http.MethodDelete, "/api/v1/rollouts/r", nil, nil)
	if _, err := cursors.Get(ctx, registry.MustParseTarget("r"), "trainer"); !errors.Is(err, consumers.ErrNotFound) {
		t.Fatalf("after the store's delete: %v, want its consumer gone", err)
	}
	if _, err := cursors.Get(ctx, registry.MustParseTarget("generic:r"), "trainer"); err != nil {
		t.Fatalf("the generic store's consumer went with the rollout store: %v", err)
	}
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, path, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, path, nil)
}

func TestConsumerRoutesRefuseBadRequests(t *testing.T) {
	e, _ := newConsumersEnv(t)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	good := map[string]string{"cursor": rowkey.Position{Seq: 1, ID: "a"}.Cursor()}
	for _, tc := range []struct {
		path string
		body any
		want string // in the message
	}{
		{"/api/v1/consumers/trainer/rollouts/r/commit", map[string]string{"cursor": "nope"}, "cursor"},
		{"/api/v1/consumers/trainer/rollouts/r/commit", `{}`, "cursor"},
		{"/api/v1/consumers/trainer/rollouts/r/commit", `{"cursor":"c1.AAAAAAAAAAE","extra":1}`, "extra"},
		{"/api/v1/consumers/-x/rollouts/r/commit", good, "-x"},
		{"/api/v1/consumers/trainer/tables/r/commit", good, "tables"},
		{"/api/v1/consumers/trainer/rollouts/_registry/commit", good, "_registry"},
	} {
		if msg := e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodPost, tc.path, tc.body); !strings.Contains(msg, tc.want) {
			t.Errorf("POST %s %v: %q, want it to name %q", tc.path, tc.body, msg, tc.want)
		}
	}
	if msg := e.fails(http.StatusNotFound, CodeNotFound, http.MethodPost, "/api/v1/consumers/trainer/generic/r/commit", good); !strings.Contains(msg, "'r' does not exist") {
		t.Fatalf("unknown store: %q", msg)
	}
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/consumers/trainer/rollouts/nope", nil)
}

func TestConsumerRoutesWithoutEtcdSayWhy(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	body := map[string]string{"cursor": rowkey.Position{Seq: 1, ID: "a"}.Cursor()}
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		path := "/api/v1/consumers/trainer/rollouts/r"
		if m == http.MethodPost {
			path += "/commit"
		}
		if msg := e.fails(http.StatusServiceUnavailable, CodeConsumersUnavailable, m, path, body); !strings.Contains(msg, "ETCD_ENDPOINTS") {
			t.Errorf("%s without etcd: %q, want ETCD_ENDPOINTS named", m, msg)
		}
	}
	if _, _, err := e.srv.committedCursor(context.Background(), registry.MustParseTarget("r"), "trainer"); err == nil {
		t.Fatal("committedCursor without etcd: no error")
	} else if status, code, _ := errorAnswer(err); status != http.StatusServiceUnavailable || code != CodeConsumersUnavailable {
		t.Fatalf("committedCursor without etcd answers %d %s", status, code)
	}
	// A store still deletes.
	e.ok(http.StatusNoContent, http.MethodDelete, "/api/v1/rollouts/r", nil, nil)
}

// storeHorizons is the horizon of each store, as a test sets it (the lag
// collector reads only Horizon; Changed is never closed).
type storeHorizons map[registry.Target]uint64

func (f storeHorizons) Horizon(_ context.Context, target registry.Target) (uint64, bool, error) {
	h, ok := f[target]
	return h, ok, nil
}

func (f storeHorizons) Changed() <-chan struct{} { return nil }

// seqAt is a _seq its writer could have numbered at t (wal's hybrid clock:
// milliseconds above a 16-bit logical counter).
func seqAt(t time.Time, logical uint64) uint64 { return uint64(t.UnixMilli())<<16 | logical }

// The lag of a consumer is the wall time between its committed cursor's _seq
// and the store's horizon; a store without a horizon yet, or a worker without
// horizons, reports none.
func TestConsumerLagIsTheWallTimeFromTheCommittedCursorToTheHorizon(t *testing.T) {
	e, cursors := newConsumersEnv(t)
	ctx := context.Background()
	for _, name := range []string{"r", "idle"} {
		e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"`+name+`"}`, nil)
		_, release, err := e.stores.Open(ctx, registry.KindRollout, name) // held open: the metric covers open stores
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for consumer, at := range map[string]time.Time{"slow": t0, "fast": t0.Add(85 * time.Second)} {
		if _, err := cursors.Commit(ctx, registry.MustParseTarget("r"), consumer, rowkey.Position{Seq: seqAt(at, 7), ID: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cursors.Commit(ctx, registry.MustParseTarget("idle"), "slow", rowkey.Position{Seq: seqAt(t0, 0), ID: "x"}); err != nil {
		t.Fatal(err)
	}
	horizons := storeHorizons{registry.MustParseTarget("r"): seqAt(t0.Add(90*time.Second), 3)} // idle has none yet

	reg := prometheus.NewRegistry()
	reg.MustRegister(feed.NewLagCollector(e.stores, cursors, horizons, e.srv.cfg.Logger))
	want := `
# HELP tidemark_feed_consumer_lag_seconds How far each named consumer's committed cursor is behind its store's feed horizon, in the wall time of their _seqs (stores this worker holds open).
# TYPE tidemark_feed_consumer_lag_seconds gauge
tidemark_feed_consumer_lag_seconds{consumer="fast",kind="rollout",store="r"} 5
tidemark_feed_consumer_lag_seconds{consumer="slow",kind="rollout",store="r"} 90
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tidemark_feed_consumer_lag_seconds"); err != nil {
		t.Fatal(err)
	}

	none := prometheus.NewRegistry()
	none.MustRegister(feed.NewLagCollector(e.stores, cursors, nil, e.srv.cfg.Logger))
	if n, err := testutil.GatherAndCount(none, "tidemark_feed_consumer_lag_seconds"); err != nil || n != 0 {
		t.Fatalf("without horizons: %d series, %v; want none", n, err)
	}
}
