package tail_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/client/tail"
	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// feed serves GET /api/v1/{kind}/{name}/changes in the contract's JSON shape
// over rows a test appends (positions (10i, id)), with the contract's paging,
// long poll and ?consumer= (read from the consumers' etcd). It stands in for the
// changes route, which is built separately; the consumer routes it is tested
// with are the worker's own.
type feed struct {
	cursors *consumers.Cursors
	mu      sync.Mutex
	rows    []rowkey.Position
	added   chan struct{} // closed and replaced at every append
}

func newFeed(cursors *consumers.Cursors) *feed {
	return &feed{cursors: cursors, added: make(chan struct{})}
}

func (f *feed) add(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		i := len(f.rows) + 1
		f.rows = append(f.rows, rowkey.Position{Seq: uint64(10 * i), ID: fmt.Sprintf("r%03d", i)})
	}
	close(f.added)
	f.added = make(chan struct{})
}

func (f *feed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.PathValue("name") != "r" { // the one store newEnv creates
		http.Error(w, `{"error":{"code":"NOT_FOUND","message":"Rollout store 'x' does not exist"}}`, http.StatusNotFound)
		return
	}
	target := registry.NewTarget(registry.KindRollout, r.PathValue("name"))
	if r.PathValue("kind") == "generic" {
		target.Kind = registry.KindGeneric
	}
	after, err := rowkey.ParseCursor(q.Get("cursor"))
	if err != nil {
		http.Error(w, `{"error":{"code":"INVALID_REQUEST","message":"bad cursor"}}`, http.StatusBadRequest)
		return
	}
	if c := q.Get("consumer"); c != "" && q.Get("cursor") == "" {
		if rec, err := f.cursors.Get(r.Context(), target, c); err == nil {
			after = rec.Cursor
		}
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	wait, _ := time.ParseDuration(q.Get("wait"))
	deadline := time.After(wait)
	for {
		f.mu.Lock()
		var ans struct {
			Changes    []map[string]any `json:"changes"`
			NextCursor string           `json:"next_cursor"`
		}
		ans.Changes = []map[string]any{}
		for _, p := range f.rows {
			if after.Less(p) && len(ans.Changes) < limit {
				ans.Changes = append(ans.Changes, map[string]any{"cursor": p.Cursor(), "row": map[string]any{"id": p.ID, "n": p.Seq}})
				after = p
			}
		}
		h := uint64(10 * len(f.rows)) // the horizon: every row appended is sealed
		added := f.added
		f.mu.Unlock()
		if len(ans.Changes) == limit {
			ans.NextCursor = after.Cursor()
		} else if next := rowkey.After(h); after.Less(next) {
			ans.NextCursor = next.Cursor()
		} else {
			ans.NextCursor = after.Cursor()
		}
		if len(ans.Changes) > 0 || wait == 0 {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(ans)
			return
		}
		select {
		case <-added:
		case <-deadline:
			wait = 0
		case <-r.Context().Done():
			return
		}
	}
}

// env is a real worker HTTP server (stores on a mem bucket, consumers in a real
// etcd) with the stand-in changes route in front of it.
type env struct {
	worker  *client.Client
	feed    *feed
	cursors *consumers.Cursors
}

func newEnv(t *testing.T) *env {
	t.Helper()
	etcd, _ := etcdtest.Start(t)
	cursors := consumers.New(etcd, "/tidemark")
	quiet := slog.New(slog.DiscardHandler)
	stores := store.NewStores(store.Config{Bucket: objstoretest.Mem(t), Shard: "w1", Logger: quiet}, 0)
	t.Cleanup(func() { _ = stores.Close(context.Background()) })
	srv, err := httpapi.NewServer(httpapi.ServerConfig{InstanceID: "w1", Logger: quiet, Stores: stores,
		Merger: merge.New(merge.Config{Logger: quiet}), Consumers: cursors})
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed(cursors)
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/{kind}/{name}/changes", f)
	mux.Handle("/", srv.Handler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	wc, err := client.New(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.CreateStore(context.Background(), client.Rollouts, client.StoreSpec{Name: "r"}); err != nil {
		t.Fatalf("create store: %v", err)
	}
	return &env{worker: wc, feed: f, cursors: cursors}
}

// ids reads the ids of tail's JSON lines.
func ids(t *testing.T, out string) []string {
	t.Helper()
	var got []string
	for line := range strings.Lines(out) {
		var row struct{ ID string }
		if err := json.Unmarshal([]byte(line), &row); err != nil || strings.Count(line, "\n") != 1 {
			t.Fatalf("line %q: not one JSON object a line (%v)", line, err)
		}
		got = append(got, row.ID)
	}
	return got
}

func want(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("r%03d", i))
	}
	return out
}

func TestTailPrintsEveryRowOnceAndEndsAtTheEndOfTheFeed(t *testing.T) {
	e := newEnv(t)
	e.feed.add(7)
	var out bytes.Buffer
	st, err := tail.Run(context.Background(), tail.Config{Worker: e.worker, Kind: client.Rollouts, Name: "r", Limit: 3, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, out.String()); fmt.Sprint(got) != fmt.Sprint(want(1, 7)) || st.Pages != 3 || st.Commits != 0 {
		t.Fatalf("rows %v in %d pages, %d commits; want r001..r007 in 3 pages, no commits", got, st.Pages, st.Commits)
	}
	if _, err := tail.Run(context.Background(), tail.Config{Worker: e.worker, Kind: client.Rollouts, Name: "nope/x", Out: &out}); !errors.Is(err, tail.ErrRequest) {
		t.Fatalf("a store the worker does not serve: %v, want ErrRequest", err)
	}
}

// outCancel cancels a context once it has received n lines: a SIGINT in the
// middle of a page.
type outCancel struct {
	bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (o *outCancel) Write(p []byte) (int, error) {
	n, err := o.Buffer.Write(p)
	if strings.Count(o.String(), "\n") >= o.n {
		o.cancel()
	}
	return n, err
}

// A consumer stopped in the middle of a page resumes after the last page it
// wrote and committed: no row is lost, and nothing before its committed
// cursor is printed again.
func TestTailAsAConsumerResumesFromItsCommittedCursor(t *testing.T) {
	e := newEnv(t)
	e.feed.add(10)
	ctx, cancel := context.WithCancel(context.Background())
	first := &outCancel{n: 5, cancel: cancel}
	st, err := tail.Run(ctx, tail.Config{Worker: e.worker, Kind: client.Rollouts, Name: "r", Consumer: "trainer", Limit: 3, Out: first})
	if err != nil {
		t.Fatalf("a tail stopped by its context: %v, want a clean end", err)
	}
	// The page in flight when it was stopped is written whole and committed.
	if got := ids(t, first.String()); fmt.Sprint(got) != fmt.Sprint(want(1, 6)) || st.Commits != 2 {
		t.Fatalf("first run: rows %v, %d commits; want r001..r006 (two whole pages), 2 commits", got, st.Commits)
	}
	rec, err := e.cursors.Get(context.Background(), registry.MustParseTarget("r"), "trainer")
	if err != nil || rec.Cursor != (rowkey.Position{Seq: 60, ID: "r006"}) {
		t.Fatalf("committed %+v, %v; want the sixth row's position", rec.Cursor, err)
	}

	var second bytes.Buffer
	st, err = tail.Run(context.Background(), tail.Config{Worker: e.worker, Kind: client.Rollouts, Name: "r", Consumer: "trainer", Limit: 3, Out: &second})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, second.String()); fmt.Sprint(got) != fmt.Sprint(want(7, 10)) {
		t.Fatalf("second run: rows %v, want r007..r010", got)
	}
	rec, err = e.cursors.Get(context.Background(), registry.MustParseTarget("r"), "trainer")
	if err != nil || rec.Cursor != rowkey.After(100) || st.Cursor != rowkey.After(100).Cursor() {
		t.Fatalf("committed %+v, %v; want After(horizon 100)", rec.Cursor, err)
	}
}

// A tail told to start over (--cursor) as a consumer whose other instance got
// further prints what it reads but never moves the committed cursor back.
func TestTailNeverMovesAConsumersCursorBack(t *testing.T) {
	e := newEnv(t)
	e.feed.add(6)
	ahead := rowkey.Position{Seq: 50, ID: "r005"}
	if _, err := e.cursors.Commit(context.Background(), registry.MustParseTarget("r"), "trainer", ahead); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := tail.Run(context.Background(), tail.Config{Worker: e.worker, Kind: client.Rollouts, Name: "r", Consumer: "trainer",
		Cursor: rowkey.Position{}.Cursor(), Limit: 2, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	// Pages of 2: the first two end behind (50, r005) and are refused; the third
	// ends at (60, r006) and the empty fourth at After(60), both ahead.
	if got := ids(t, out.String()); len(got) != 6 || st.Commits != 2 {
		t.Fatalf("rows %v, %d commits; want all 6 rows and only the commits past (50, r005)", got, st.Commits)
	}
	if rec, err := e.cursors.Get(context.Background(), registry.MustParseTarget("r"), "trainer"); err != nil || rec.Cursor != rowkey.After(60) {
		t.Fatalf("committed %+v, %v; want After(60): forward only", rec.Cursor, err)
	}
}

// Following, a tail prints rows as they arrive and ends cleanly when stopped.
func TestTailFollowsUntilStopped(t *testing.T) {
	e := newEnv(t)
	e.feed.add(2)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	done := make(chan error, 1)
	go func() {
		_, err := tail.Run(ctx, tail.Config{Worker: e.worker, Kind: client.Rollouts, Name: "r", Consumer: "trainer", Follow: true,
			Wait: time.Minute, Limit: 10, Out: w})
		done <- err
	}()
	lines := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	testwait.For(t, 10*time.Second, "the first rows", func() (bool, string) { return strings.Count(lines(), "\n") == 2, lines() })
	e.feed.add(3)
	testwait.For(t, 10*time.Second, "rows added while following", func() (bool, string) { return strings.Count(lines(), "\n") == 5, lines() })
	cancel() // SIGINT during a long poll
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stopped while following: %v, want a clean end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not end after its context did")
	}
	if got := ids(t, lines()); fmt.Sprint(got) != fmt.Sprint(want(1, 5)) {
		t.Fatalf("rows %v", got)
	}
	if rec, err := e.cursors.Get(context.Background(), registry.MustParseTarget("r"), "trainer"); err != nil || rec.Cursor != rowkey.After(50) {
		t.Fatalf("committed %+v, %v; want After(50)", rec.Cursor, err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
