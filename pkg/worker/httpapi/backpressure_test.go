package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// Thresholds of the backpressure tests: small, so a few seals make a store
// behind; with bpMaxDelay an add at bpWarn+k pending waits k quarters of it.
const (
	bpWarn     = 2
	bpRefuse   = 6
	bpMaxDelay = time.Second
)

const bpRowsPath = "/api/v1/generic/bp/rows"

// newBackpressureEnv serves a worker whose stores wait on a fake clock, with the
// generic store "bp" created.
func newBackpressureEnv(t *testing.T) (*apiEnv, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	e := newAPIEnvWith(t, objstoretest.Mem(t), "w1", func(c *store.Config) {
		c.Clock = clk
		c.WarnGenerations, c.RefuseGenerations, c.MaxAddDelay = bpWarn, bpRefuse, bpMaxDelay
	}, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"bp","schema":`+apiSpec+`}`, nil)
	return e, clk
}

// pile seals n generations of one row each into this worker's shard of a store,
// through the store handle: the way a worker whose merges fall behind gets there,
// without the adds (which the backpressure under test would slow) of the API.
func (e *apiEnv) pile(kind registry.Kind, name string, n int) {
	e.t.Helper()
	ctx := context.Background()
	st, release, err := e.stores.Open(ctx, kind, name)
	if err != nil {
		e.t.Fatal(err)
	}
	defer release()
	row := `{"id":"pile-%d","n":0}`
	if kind == registry.KindRollout {
		row = `{"id":"pile-%d","rollout_id":"pile"}`
	}
	for i := range n {
		rec, err := decodeRows(st, []json.RawMessage{json.RawMessage(fmt.Sprintf(row, i))})
		if err != nil {
			e.t.Fatal(err)
		}
		err = st.Append(ctx, rec)
		rec.Release()
		if err != nil {
			e.t.Fatal(err)
		}
		if g, err := st.Seal(ctx); err != nil || g == nil {
			e.t.Fatalf("seal %s: generation %v, err %v", name, g, err)
		}
	}
}

// memtableRows is what this worker's shard of a store holds unsealed: the rows
// adds wrote since the last seal.
func (e *apiEnv) memtableRows(kind registry.Kind, name string) int64 {
	e.t.Helper()
	st, release, err := e.stores.Open(context.Background(), kind, name)
	if err != nil {
		e.t.Fatal(err)
	}
	defer release()
	stats, _ := st.WriterStats()
	return stats.MemtableRows
}

// addAnswered is the outcome of an add sent by sendAdd.
type addAnswered struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// sendAdd posts body to url+path on a goroutine of its own under ctx and
// returns where its answer arrives.
func sendAdd(ctx context.Context, url, path, body string) <-chan addAnswered {
	out := make(chan addAnswered, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
		if err != nil {
			out <- addAnswered{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- addAnswered{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- addAnswered{status: resp.StatusCode, header: resp.Header, body: b, err: err}
	}()
	return out
}

// answerOf waits (with a deadline) for the answer of sendAdd.
func answerOf(t *testing.T, ch <-chan addAnswered) addAnswered {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to the add within 10 s")
		return addAnswered{}
	}
}

// waitForBackpressureWait returns once an add waits on clk.
func waitForBackpressureWait(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	testwait.Until(t, 10*time.Second, "an add waiting for its backpressure delay", clk.HasWaiters)
}

// backpressureDelays reads tidemark_add_backpressure_delay_seconds{kind} from
// the server's registry: how many adds waited, and their waits in seconds.
func (e *apiEnv) backpressureDelays(kind registry.Kind) (count uint64, sum float64) {
	e.t.Helper()
	families, err := e.srv.cfg.Metrics.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "tidemark_add_backpressure_delay_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == string(kind) {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	e.t.Fatalf("no tidemark_add_backpressure_delay_seconds{kind=%q}", kind)
	return 0, 0
}

// Between the thresholds an add waits MaxAddDelay in proportion to how far past
// warn its store is, is then written, and says how long it waited.
func TestAddBetweenWarnAndRefuseWaitsInProportionToPendingGenerations(t *testing.T) {
	e, clk := newBackpressureEnv(t)
	for i, c := range []struct {
		pile int // generations sealed before the add
		want time.Duration
	}{
		{pile: 3, want: 250 * time.Millisecond}, // 3 pending: a quarter of the way from 2 to 6
		{pile: 2, want: 750 * time.Millisecond}, // 5 pending (the first add sealed with the pile)
	} {
		e.pile(registry.KindGeneric, "bp", c.pile)
		ch := sendAdd(context.Background(), e.url, bpRowsPath, fmt.Sprintf(`{"rows":[{"id":"add-%d","n":%d}]}`, i, i))
		waitForBackpressureWait(t, clk)
		clk.Step(c.want - time.Millisecond)
		if !clk.HasWaiters() {
			t.Fatalf("add %d: done waiting 1 ms before its delay of %s", i, c.want)
		}
		clk.Step(time.Millisecond)
		a := answerOf(t, ch)
		if a.status != http.StatusCreated {
			t.Fatalf("add %d: status %d %s, want 201", i, a.status, a.body)
		}
		if got, want := a.header.Get(httpjson.BackpressureHeader), fmt.Sprint(c.want.Milliseconds()); got != want {
			t.Errorf("add %d: %s %q, want %q", i, httpjson.BackpressureHeader, got, want)
		}
		if n := e.memtableRows(registry.KindGeneric, "bp"); n != 1 {
			t.Errorf("add %d: %d rows unsealed, want the one added", i, n)
		}
	}
	if n, sum := e.backpressureDelays(registry.KindGeneric); n != 2 || sum != 1.0 {
		t.Errorf("tidemark_add_backpressure_delay_seconds{kind=generic}: %d adds, %g s; want 2 adds, 1 s", n, sum)
	}
	if n, _ := e.backpressureDelays(registry.KindRollout); n != 0 {
		t.Errorf("tidemark_add_backpressure_delay_seconds{kind=rollout}: %d adds, want 0", n)
	}
}

// A worker sees other workers' merges only when its snapshot is refreshed. One
// that last saw a store at the refuse threshold, and has only written since, must
// not refuse adds on that count after merges brought it down: the backpressure
// refreshes a snapshot that says the store is behind before it decides.
func TestAddIsAdmittedOnceAnotherWorkersMergeCaughtUp(t *testing.T) {
	bucket := objstoretest.Mem(t)
	limits := func(c *store.Config) {
		c.Clock = clocktesting.NewFakeClock(time.Now())
		c.WarnGenerations, c.RefuseGenerations, c.MaxAddDelay = bpWarn, bpRefuse, bpMaxDelay
	}
	w1 := newAPIEnvWith(t, bucket, "w1", limits, nil)
	w2 := newAPIEnvWith(t, bucket, "w2", limits, nil)
	w1.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"bp","schema":`+apiSpec+`}`, nil)
	w2.pile(registry.KindGeneric, "bp", bpRefuse)
	if got := w1.stats("generic", "bp").Stats.PendingGenerations; got != bpRefuse {
		t.Fatalf("w1 sees %d pending generations, want %d", got, bpRefuse)
	}
	w2.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/bp/merge-wal", nil, nil)
	a := answerOf(t, sendAdd(context.Background(), w1.url, bpRowsPath, `{"rows":[{"id":"a","n":1}]}`))
	if a.status != http.StatusCreated {
		t.Fatalf("w1's add after w2's merge: status %d %s, want 201", a.status, a.body)
	}
	if h, ok := a.header[httpjson.BackpressureHeader]; ok {
		t.Errorf("%s %q: the add waited on a count the merge brought down", httpjson.BackpressureHeader, h)
	}
}

// Below warn an add does not wait and its answer has no backpressure header.
func TestAddBelowWarnDoesNotWait(t *testing.T) {
	e, _ := newBackpressureEnv(t)
	e.pile(registry.KindGeneric, "bp", bpWarn-1)
	// The fake clock never moves: an add that waited would not be answered.
	a := answerOf(t, sendAdd(context.Background(), e.url, bpRowsPath, `{"rows":[{"id":"a","n":1}]}`))
	if a.status != http.StatusCreated {
		t.Fatalf("status %d %s, want 201", a.status, a.body)
	}
	if h, ok := a.header[httpjson.BackpressureHeader]; ok {
		t.Errorf("%s %q on an add that did not wait", httpjson.BackpressureHeader, h)
	}
	if n, _ := e.backpressureDelays(registry.KindGeneric); n != 0 {
		t.Errorf("tidemark_add_backpressure_delay_seconds counts %d adds, want 0", n)
	}
}

// At the refuse threshold every add path (generic rows, rollout records as JSON
// and as multipart) is refused with 503 OVERLOADED and Retry-After, naming the
// store, its pending count and the limit, and writes nothing.
func TestAddAtRefuseIsRefusedWith503AndWritesNothing(t *testing.T) {
	e, _ := newBackpressureEnv(t)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"bpr"}`, nil)
	e.pile(registry.KindGeneric, "bp", bpRefuse)
	e.pile(registry.KindRollout, "bpr", bpRefuse+1)
	mp, ctype := multipartBody(t, metadata(`{"id":"m","rollout_id":"r"}`), blobPart{"0", []byte("blob")})
	for _, c := range []struct {
		name        string
		kind        registry.Kind
		store       string
		path, ctype string
		body        string
		pending     int
	}{
		{"generic rows", registry.KindGeneric, "generic:bp", bpRowsPath, "application/json", `{"rows":[{"id":"a","n":1}]}`, bpRefuse},
		{"rollout records", registry.KindRollout, "bpr", "/api/v1/rollouts/bpr/records", "application/json", `{"records":[{"id":"r","rollout_id":"r"}]}`, bpRefuse + 1},
		{"rollout multipart", registry.KindRollout, "bpr", "/api/v1/rollouts/bpr/records", ctype, string(mp), bpRefuse + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, e.url+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", c.ctype)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusServiceUnavailable || eb.Error.Code != CodeOverloaded {
				t.Fatalf("status %d %+v, want 503 %s", resp.StatusCode, eb.Error, CodeOverloaded)
			}
			if ra := resp.Header.Get("Retry-After"); ra == "" {
				t.Error("no Retry-After on the refusal")
			}
			if h, ok := resp.Header[httpjson.BackpressureHeader]; ok {
				t.Errorf("%s %q on a refused add", httpjson.BackpressureHeader, h)
			}
			for _, want := range []string{c.store, fmt.Sprintf("%d pending", c.pending), fmt.Sprintf("at %d", bpRefuse)} {
				if !strings.Contains(eb.Error.Message, want) {
					t.Errorf("message %q does not say %q", eb.Error.Message, want)
				}
			}
		})
	}
	if n := e.memtableRows(registry.KindGeneric, "bp"); n != 0 {
		t.Errorf("generic store: %d rows written by refused adds", n)
	}
	if n := e.memtableRows(registry.KindRollout, "bpr"); n != 0 {
		t.Errorf("rollout store: %d rows written by refused adds", n)
	}
	if got := e.count(e.series.BackpressureRefusals, "generic"); got != 1 {
		t.Errorf("tidemark_add_backpressure_refusals_total{kind=generic} = %d, want 1", got)
	}
	if got := e.count(e.series.BackpressureRefusals, "rollout"); got != 2 {
		t.Errorf("tidemark_add_backpressure_refusals_total{kind=rollout} = %d, want 2", got)
	}
}

// A client that gives up while its add waits has nothing written: the wait
// follows the request's context, not the detached one writes run under.
func TestAddCancelledDuringItsDelayWritesNothing(t *testing.T) {
	e, clk := newBackpressureEnv(t)
	e.pile(registry.KindGeneric, "bp", 4)
	ctx, cancel := context.WithCancel(context.Background())
	ch := sendAdd(ctx, e.url, bpRowsPath, `{"rows":[{"id":"a","n":1}]}`)
	waitForBackpressureWait(t, clk)
	cancel()
	if a := <-ch; a.err == nil {
		t.Fatalf("cancelled add answered %d %s", a.status, a.body)
	}
	// The handler is done once the request is counted (an answer nobody reads).
	testwait.Until(t, 10*time.Second, "the cancelled add's handler to return", func() bool {
		return e.count(e.series.Requests, http.MethodPost, "/api/v1/generic/{name}/rows", "503") == 1
	})
	clk.Step(time.Hour) // a wait left behind would end now and write
	if n := e.memtableRows(registry.KindGeneric, "bp"); n != 0 {
		t.Errorf("%d rows written by a cancelled add", n)
	}
	if n, _ := e.backpressureDelays(registry.KindGeneric); n != 0 {
		t.Errorf("tidemark_add_backpressure_delay_seconds counts %d adds, want 0", n)
	}
}

// A shutdown ends an add's wait with a 503: the add was not written, and the
// server stops without waiting out the delay.
func TestShutdownEndsAnAddsBackpressureWaitWithoutWriting(t *testing.T) {
	e, clk := newBackpressureEnv(t)
	e.pile(registry.KindGeneric, "bp", 4)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()
	ch := sendAdd(context.Background(), "http://"+ln.Addr().String(), bpRowsPath, `{"rows":[{"id":"a","n":1}]}`)
	waitForBackpressureWait(t, clk)
	stop()
	a := answerOf(t, ch)
	var eb ErrorBody
	if err := json.Unmarshal(a.body, &eb); err != nil {
		t.Fatalf("answer %q: %v", a.body, err)
	}
	if a.status != http.StatusServiceUnavailable || eb.Error.Code != CodeOverloaded || !strings.Contains(eb.Error.Message, "shutting down") {
		t.Fatalf("status %d %+v, want 503 %s saying the worker is shutting down", a.status, eb.Error, CodeOverloaded)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of its context ending")
	}
	if n := e.memtableRows(registry.KindGeneric, "bp"); n != 0 {
		t.Errorf("%d rows written by an add cut off by the shutdown", n)
	}
}
