package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/worker/store"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// seqAt is a _seq its writer could have numbered at t (wal's hybrid clock:
// milliseconds above a 16-bit logical counter).
func seqAt(t time.Time, logical uint64) uint64 { return uint64(t.UnixMilli())<<16 | logical }

// send posts body to u and returns the status and the answer.
func send(t *testing.T, u, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// A store with max_consumer_lag refuses adds with 503 CONSUMER_LAG, naming the
// consumer, its lag and the limit, while a named consumer's committed cursor is
// further behind the store's horizon than the limit, and admits them again once
// the consumer commits a later cursor. A store without the option takes adds
// whatever its consumers do. The whole worker runs on a real etcd: its horizon
// view follows what its own writers publish, and the consumers are the ones the
// commit route writes. Production failure it guards: a trainer that fell
// hours behind while writers kept adding, until retention had to choose
// between its rows and the disk.
func TestAddsAreRefusedWhileAConsumerLagsBeyondMaxConsumerLag(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/lag"
	base, _ := runWorker(t, Config{InstanceID: "w1", Etcd: client, Prefix: prefix,
		HorizonInterval: 20 * time.Millisecond, Store: store.Config{Bucket: objstoretest.Mem(t)}})
	cursors := consumers.New(client, prefix)
	ctx := context.Background()

	testwait.Until(t, 10*time.Second, "the worker to serve", func() bool {
		code, _ := send(t, base+"/api/v1/generic", `{"name":"held","schema":`+apiSpec+`,"max_consumer_lag":"1m"}`)
		return code == http.StatusCreated
	})
	if code, body := send(t, base+"/api/v1/generic", `{"name":"free","schema":`+apiSpec+`}`); code != http.StatusCreated {
		t.Fatalf("create free: %d %s", code, body)
	}
	if code, body := send(t, base+"/api/v1/rollouts", `{"name":"bad","max_consumer_lag":"soon"}`); code != http.StatusBadRequest || !strings.Contains(body, `\"soon\"`) {
		t.Fatalf("create with max_consumer_lag \"soon\": %d %s; want 400 naming the value", code, body)
	}
	resp, err := http.Get(base + "/api/v1/generic/held")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		MaxConsumerLag string `json:"max_consumer_lag"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.MaxConsumerLag != "1m0s" {
		t.Fatalf("GET held: max_consumer_lag %q, %v; want \"1m0s\"", info.MaxConsumerLag, err)
	}

	add := func(name string) (int, string) {
		return send(t, base+"/api/v1/generic/"+name+"/rows?flush=true", `{"rows":[{"id":"a","n":1}]}`)
	}
	for _, name := range []string{"held", "free"} {
		if code, body := add(name); code/100 != 2 {
			t.Fatalf("first add to %s: %d %s", name, code, body)
		}
	}
	// The consumer committed an hour ago's position in both stores.
	behind := rowkey.Position{Seq: seqAt(time.Now().Add(-time.Hour), 0), ID: "a"}
	for _, target := range []string{"generic:held", "generic:free"} {
		if _, err := cursors.Commit(ctx, target, "trainer", behind); err != nil {
			t.Fatal(err)
		}
	}

	var refusal string
	testwait.For(t, 10*time.Second, "adds to held to be refused", func() (bool, string) {
		code, body := add("held")
		refusal = body
		return code == http.StatusServiceUnavailable, body
	})
	var answer ErrorBody
	if err := json.Unmarshal([]byte(refusal), &answer); err != nil {
		t.Fatal(err)
	}
	if msg := answer.Error.Message; answer.Error.Code != CodeConsumerLag || !strings.Contains(msg, `"trainer"`) ||
		!strings.Contains(msg, "1m0s") || !strings.Contains(msg, "lags 59m") && !strings.Contains(msg, "lags 1h") {
		t.Fatalf("refusal %+v; want %s naming the consumer, its lag (about 1h) and the limit (1m0s)", answer.Error, CodeConsumerLag)
	}
	if code, body := add("free"); code/100 != 2 {
		t.Fatalf("add to a store without max_consumer_lag: %d %s; want it admitted", code, body)
	}
	metrics, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	if !strings.Contains(string(text), `tidemark_add_consumer_lag_refusals_total{kind="generic"}`) {
		t.Errorf("/metrics has no generic consumer-lag refusals after one")
	}

	// The consumer catches up: adds are admitted again within a verdict's age.
	if _, err := cursors.Commit(ctx, "generic:held", "trainer", rowkey.Position{Seq: seqAt(time.Now(), 0)}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "adds to held to be admitted after the consumer caught up", func() (bool, string) {
		code, body := add("held")
		return code/100 == 2, body
	})
}

// countedLister counts the etcd reads of the verdicts (each List is one).
type countedLister struct {
	*consumers.Cursors
	n atomic.Int64
}

func (c *countedLister) List(ctx context.Context, target string, limit int) ([]consumers.Record, bool, error) {
	c.n.Add(1)
	return c.Cursors.List(ctx, target, limit)
}

// An add reads a cached verdict, not etcd: however many adds a store takes, its
// consumers are read once per lagVerdictTTL, in the background after the first.
// While etcd is away adds are admitted, and the refusal comes back with it.
// Production failure it guards: one etcd round trip on every add's path, which
// an etcd slowdown would turn into every store's add latency, or an etcd outage
// into a write outage.
func TestConsumerLagVerdictIsCachedAndAdmitsWhileEtcdIsAway(t *testing.T) {
	srv := etcdtest.StartServer(t)
	lister := &countedLister{Cursors: consumers.New(srv.Client(t), "/lagv")}
	clk := testingclock.NewFakePassiveClock(time.Now())
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	const target = "r"
	if _, err := lister.Commit(context.Background(), target, "trainer", rowkey.Position{Seq: seqAt(t0, 0)}); err != nil {
		t.Fatal(err)
	}
	b := newConsumerBackpressure(lister, storeHorizons{target: seqAt(t0.Add(time.Hour), 0)}, clk, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	refused := func() bool {
		err := b.admit(ctx, target, time.Minute)
		var ae *apiError
		if err != nil && (!errors.As(err, &ae) || ae.code != CodeConsumerLag) {
			t.Fatalf("admit: %v; want nil or %s", err, CodeConsumerLag)
		}
		return err != nil
	}

	for range 100 {
		if !refused() {
			t.Fatal("an add admitted while the consumer lags 1h behind a limit of 1m")
		}
	}
	if n := lister.n.Load(); n != 1 {
		t.Fatalf("100 adds within one verdict's age read the consumers %d times; want once", n)
	}
	if err := b.admit(ctx, target, 2*time.Hour); err != nil {
		t.Fatalf("a limit above the lag: %v; want the add admitted", err)
	}
	if err := b.admit(ctx, "other", 0); err != nil || lister.n.Load() != 1 {
		t.Fatalf("a store without max_consumer_lag: %v after %d reads; want admitted without a read", err, lister.n.Load())
	}

	srv.Stop()
	testwait.Until(t, 20*time.Second, "adds to be admitted with etcd away", func() bool {
		clk.SetTime(clk.Now().Add(lagVerdictTTL))
		return !refused()
	})
	srv.Restart(t)
	testwait.Until(t, 20*time.Second, "adds to be refused again with etcd back", func() bool {
		clk.SetTime(clk.Now().Add(lagVerdictTTL))
		return refused()
	})
}
