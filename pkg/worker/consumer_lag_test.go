package worker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
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
	for _, target := range []registry.Target{registry.MustParseTarget("generic:held"), registry.MustParseTarget("generic:free")} {
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
	var answer httpapi.ErrorBody
	if err := json.Unmarshal([]byte(refusal), &answer); err != nil {
		t.Fatal(err)
	}
	if msg := answer.Error.Message; answer.Error.Code != httpapi.CodeConsumerLag || !strings.Contains(msg, `"trainer"`) ||
		!strings.Contains(msg, "1m0s") || !strings.Contains(msg, "lags 59m") && !strings.Contains(msg, "lags 1h") {
		t.Fatalf("refusal %+v; want %s naming the consumer, its lag (about 1h) and the limit (1m0s)", answer.Error, httpapi.CodeConsumerLag)
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
	if _, err := cursors.Commit(ctx, registry.MustParseTarget("generic:held"), "trainer", rowkey.Position{Seq: seqAt(time.Now(), 0)}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "adds to held to be admitted after the consumer caught up", func() (bool, string) {
		code, body := add("held")
		return code/100 == 2, body
	})
}
