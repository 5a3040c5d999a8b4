package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// fixedHorizons is a horizon provider the test moves by hand: the feed's input,
// not what these tests prove.
type fixedHorizons struct {
	mu      sync.Mutex
	h       uint64
	known   bool
	changed chan struct{}
	waits   int // calls of Changed: a long poll takes the channel before each page
}

func newFixedHorizons() *fixedHorizons { return &fixedHorizons{changed: make(chan struct{})} }

func (f *fixedHorizons) Horizon(context.Context, registry.Target) (uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h, f.known, nil
}

func (f *fixedHorizons) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits++
	return f.changed
}

// calls returns how many times Changed was called.
func (f *fixedHorizons) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waits
}

// set moves the horizon to h and wakes the long polls.
func (f *fixedHorizons) set(h uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.h, f.known = h, true
	close(f.changed)
	f.changed = make(chan struct{})
}

// newFeedEnv serves a worker whose feed reads horizons from hz, with generic
// store "g" of apiSpec.
func newFeedEnv(t *testing.T, hz *fixedHorizons) *apiEnv {
	t.Helper()
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) {
		if hz != nil {
			c.Horizons = hz
		}
		c.FeedMaxWait = 10 * time.Second
	})
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	return e
}

// addSealed adds rows with these ids (n = their position) and seals them; it
// returns the add's causal token, the highest _seq it gave.
func (e *apiEnv) addSealed(ids ...string) uint64 {
	e.t.Helper()
	var rows []string
	for i, id := range ids {
		rows = append(rows, fmt.Sprintf(`{"id":%q,"n":%d,"score":1.5}`, id, i))
	}
	var ans addAnswer
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows?flush=true", `{"rows":[`+strings.Join(rows, ",")+`]}`, &ans)
	return ans.Seq
}

// feedPage is a decoded 200 answer of the feed.
type feedPage struct {
	Changes []struct {
		Cursor string                     `json:"cursor"`
		Row    map[string]json.RawMessage `json:"row"`
	} `json:"changes"`
	NextCursor string `json:"next_cursor"`
}

func (p feedPage) ids() []string {
	var out []string
	for _, c := range p.Changes {
		var id string
		_ = json.Unmarshal(c.Row["id"], &id)
		out = append(out, id)
	}
	return out
}

func (e *apiEnv) changes(query string) feedPage {
	e.t.Helper()
	var p feedPage
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/g/changes"+query, nil, &p)
	return p
}

func TestChangesRouteRefusesBadParametersNamingThem(t *testing.T) {
	e := newFeedEnv(t, newFixedHorizons())
	for _, c := range []struct{ query, names string }{
		{"?cursor=bogus", "cursor"},
		{"?cursor=c1.!!", "cursor"},
		{"?limit=0", "limit"},
		{"?limit=10001", "limit"},
		{"?limit=ten", "limit"},
		{"?wait=-1s", "wait"},
		{"?wait=soon", "wait"},
		{"?columns=nope", "nope"},
		{"?filters=%7B%7D", "rollout"},
		{"?filter=nope%20%3D%201", "nope"},
	} {
		msg := e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, "/api/v1/generic/g/changes"+c.query, nil)
		if !strings.Contains(msg, c.names) {
			t.Errorf("%s: message %q does not name %q", c.query, msg, c.names)
		}
	}
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/generic/missing/changes", nil)
}

// Without etcd nothing says which rows are safe to deliver: the feed says so
// instead of guessing.
func TestChangesRouteWithoutHorizonsAnswers503(t *testing.T) {
	e := newFeedEnv(t, nil)
	msg := e.fails(http.StatusServiceUnavailable, CodeFeedUnavailable, http.MethodGet, "/api/v1/generic/g/changes", nil)
	if !strings.Contains(msg, "ETCD_ENDPOINTS") {
		t.Fatalf("503 message %q does not name ETCD_ENDPOINTS", msg)
	}
}

// A client follows the feed by next_cursor: every row once, oldest first, up to
// the horizon; cursor=now starts at the horizon; columns= answers the columns
// named.
func TestChangesRouteFollowsTheStoreUpToTheHorizon(t *testing.T) {
	hz := newFixedHorizons()
	e := newFeedEnv(t, hz)
	if p := e.changes(""); len(p.Changes) != 0 || p.NextCursor != (rowkey.Position{}).Cursor() {
		t.Fatalf("before any horizon: %+v, want no rows and the zero cursor", p)
	}
	first := e.addSealed("b", "a")
	second := e.addSealed("c")
	hz.set(first)
	var got []string
	cursor := ""
	for {
		p := e.changes("?limit=1&cursor=" + cursor)
		got = append(got, p.ids()...)
		for _, c := range p.Changes {
			if c.Cursor != p.NextCursor {
				t.Fatalf("a page of one row: its cursor %s, next %s", c.Cursor, p.NextCursor)
			}
		}
		cursor = p.NextCursor
		if len(p.Changes) == 0 {
			break
		}
	}
	if strings.Join(got, ",") != "b,a" {
		t.Fatalf("under the first add's horizon: %v, want b,a (the order they were written in), not c", got)
	}
	if cursor != rowkey.After(first).Cursor() {
		t.Fatalf("next cursor %s, want After(horizon)", cursor)
	}
	if p := e.changes("?cursor=now"); len(p.Changes) != 0 || p.NextCursor != rowkey.After(first).Cursor() {
		t.Fatalf("cursor=now: %+v, want no rows and the horizon's cursor", p)
	}
	hz.set(second)
	p := e.changes("?columns=n&cursor=" + cursor)
	if strings.Join(p.ids(), ",") != "c" || len(p.Changes[0].Row) != 2 || p.Changes[0].Row["n"] == nil {
		t.Fatalf("after the horizon moved, with columns=n: %+v, want c with id and n alone", p)
	}
	if p := e.changes("?columns=&cursor=" + cursor); len(p.Changes) != 1 || len(p.Changes[0].Row) != 4 {
		t.Fatalf("with columns= naming none: %+v, want c with every column", p)
	}
	if pages := e.count(e.series.Feed.Pages, string(registry.KindGeneric)); pages < 5 {
		t.Fatalf("tidemark_feed_pages_total = %d, want every page answered", pages)
	}
	if rows := e.count(e.series.Feed.Rows, string(registry.KindGeneric)); rows != 4 {
		t.Fatalf("tidemark_feed_rows_total = %d, want 4 (c answered twice)", rows)
	}
}

// A long poll answers as soon as rows pass the horizon, answers an empty page
// with the same cursor when its wait ends, and ends early on shutdown.
func TestChangesRouteLongPolls(t *testing.T) {
	hz := newFixedHorizons()
	e := newFeedEnv(t, hz)
	hz.set(e.addSealed("a"))
	cursor := e.changes("").NextCursor

	p := e.changes("?wait=50ms&cursor=" + cursor)
	if len(p.Changes) != 0 || p.NextCursor != cursor {
		t.Fatalf("a wait that ended: %+v, want no rows and the same cursor", p)
	}

	done := make(chan feedPage, 1)
	before := hz.calls()
	go func() {
		var p feedPage
		status, out := e.do(http.MethodGet, "/api/v1/generic/g/changes?wait=10s&cursor="+cursor, nil)
		if status == http.StatusOK {
			_ = json.Unmarshal(out, &p)
		}
		done <- p
	}()
	waitForPoll(t, hz, before)
	hz.set(e.addSealed("b"))
	if p := <-done; strings.Join(p.ids(), ",") != "b" {
		t.Fatalf("long poll answered %+v, want b once the horizon passed it", p)
	}

	before = hz.calls()
	go func() {
		var p feedPage
		_, out := e.do(http.MethodGet, "/api/v1/generic/g/changes?wait=10s&cursor=now", nil)
		_ = json.Unmarshal(out, &p)
		done <- p
	}()
	waitForPoll(t, hz, before)
	e.srv.stop() // what Serve does when its context ends
	if p := <-done; len(p.Changes) != 0 || p.NextCursor == "" {
		t.Fatalf("long poll at shutdown answered %+v, want an empty page with a cursor", p)
	}
}

// waitForPoll waits until a long poll began its first page: it took the
// channel of Changed, so a horizon moved from now on wakes it.
func waitForPoll(t *testing.T, hz *fixedHorizons, before int) {
	t.Helper()
	waitFor(t, "a long poll in flight", func() bool { return hz.calls() > before })
}
