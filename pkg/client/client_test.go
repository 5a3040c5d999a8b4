package client_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

const (
	spec  = `{"columns":[["id",{"type":"string"}],["score",{"type":"float64","nullable":true}],["n",{"type":"int64","nullable":false}]]}`
	token = "client-test-token"
)

// openHorizons is a feed horizon past every row: the feed answers every
// sealed row. (Horizons are published by the WAL writers through etcd, which
// these tests do not run; the feed's own tests prove the horizon.)
type openHorizons struct{}

func (openHorizons) Horizon(context.Context, registry.Target) (uint64, bool, error) {
	return 1 << 62, true, nil
}
func (openHorizons) Changed() <-chan struct{} { return nil }

// newWorker serves a real worker (stores on a mem bucket, consumers in a real
// etcd, control routes behind token) and returns its URL.
func newWorker(t *testing.T) string {
	t.Helper()
	etcd, _ := etcdtest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	stores := store.NewStores(store.Config{Bucket: objstoretest.Mem(t), Shard: "w1", Logger: quiet, SnapshotTTL: -1}, 0)
	t.Cleanup(func() { _ = stores.Close(context.Background()) })
	toks, err := auth.NewTokens("test", token)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.NewServer(httpapi.ServerConfig{InstanceID: "w1", Logger: quiet, Stores: stores,
		Merger: merge.New(merge.Config{Logger: quiet}), Consumers: consumers.New(etcd, "/tidemark"),
		Horizons: openHorizons{}, Auth: auth.NewGuard(auth.GuardConfig{Tokens: toks}), Tasks: tasks.New(etcd, "/tidemark")})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ids(t *testing.T, rows []json.RawMessage) string {
	t.Helper()
	var out []string
	for _, raw := range rows {
		var r struct{ ID string }
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("row %s: %v", raw, err)
		}
		out = append(out, r.ID)
	}
	return strings.Join(out, ",")
}

// Every route the client covers, against a real worker: stores, rows, lists
// by page and filter, gets, flush, merge, blobs, the feed and consumers.
func TestEveryCallAnswersAsTheWorkerDoes(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, newWorker(t), client.WithToken(token))

	if h, err := c.Health(ctx); err != nil || h.Status != "ok" || h.InstanceID != "w1" {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	if s, err := c.CreateStore(ctx, client.Rollouts, client.StoreSpec{Name: "r"}); err != nil || s.Name != "r" || s.Target != "r" {
		t.Fatalf("CreateStore rollouts = %+v, %v", s, err)
	}
	if s, err := c.CreateStore(ctx, client.Generic, client.StoreSpec{Name: "g", Schema: json.RawMessage(spec)}); err != nil || s.Target != "generic:g" {
		t.Fatalf("CreateStore generic = %+v, %v", s, err)
	}
	if list, err := c.ListStores(ctx, client.Generic); err != nil || len(list) != 1 || list[0].Name != "g" {
		t.Fatalf("ListStores = %+v, %v", list, err)
	}

	// Rows: an add with flush, then lists, pages, filters, gets.
	rows := []map[string]any{{"id": "a", "score": 0.5, "n": 1}, {"id": "b", "score": 0.9, "n": 2}, {"id": "c", "n": 3}}
	add, err := c.AddRows(ctx, client.Generic, "g", rows, client.AddOptions{Flush: true})
	if err != nil || add.Count != 3 || add.Seq == 0 {
		t.Fatalf("AddRows generic = %+v, %v", add, err)
	}
	blob := []byte("\x00payload\xff")
	radd, err := c.AddRows(ctx, client.Rollouts, "r", []map[string]any{
		{"id": "x", "rollout_id": "r1", "dataset": "gsm8k", "binary_payload": base64.StdEncoding.EncodeToString(blob)},
		{"id": "y", "rollout_id": "r2", "dataset": "math"},
	}, client.AddOptions{Flush: true, After: add.Seq})
	if err != nil || radd.Count != 2 || strings.Join(radd.IDs, ",") != "x,y" || radd.Seq <= add.Seq {
		t.Fatalf("AddRows rollouts after %d = %+v, %v", add.Seq, radd, err)
	}
	if p, err := c.ListRows(ctx, client.Generic, "g", client.ListOptions{}); err != nil || ids(t, p.Rows) != "a,b,c" || p.NextCursor != "" {
		t.Fatalf("ListRows = %+v, %v", p, err)
	}
	p, err := c.ListRows(ctx, client.Generic, "g", client.ListOptions{Limit: 2})
	if err != nil || ids(t, p.Rows) != "a,b" || p.NextCursor == "" {
		t.Fatalf("first page = %+v, %v", p, err)
	}
	if p, err = c.ListRows(ctx, client.Generic, "g", client.ListOptions{Limit: 2, Cursor: p.NextCursor}); err != nil || ids(t, p.Rows) != "c" || p.NextCursor != "" {
		t.Fatalf("second page = %+v, %v", p, err)
	}
	if p, err = c.ListRows(ctx, client.Generic, "g", client.ListOptions{Filter: "score >= 0.6"}); err != nil || ids(t, p.Rows) != "b" {
		t.Fatalf("filter = %+v, %v", p, err)
	}
	if p, err = c.ListRows(ctx, client.Rollouts, "r", client.ListOptions{Filters: map[string]any{"dataset": "math"}}); err != nil || ids(t, p.Rows) != "y" {
		t.Fatalf("rollout filters = %+v, %v", p, err)
	}
	if row, err := c.GetRow(ctx, client.Generic, "g", "b", client.ReadOptions{Columns: []string{"n"}}); err != nil || string(row) != `{"id":"b","n":2}` {
		t.Fatalf("GetRow generic = %s, %v", row, err)
	}
	if _, err := c.GetRow(ctx, client.Generic, "g", "zz", client.ReadOptions{}); !client.IsNotFound(err) {
		t.Fatalf("GetRow of an absent generic row: %v, want not found", err)
	}
	if row, err := c.GetRow(ctx, client.Rollouts, "r", "x", client.ReadOptions{}); err != nil || !strings.Contains(string(row), `"rollout_id":"r1"`) {
		t.Fatalf("GetRow rollout = %s, %v", row, err)
	}
	if row, err := c.GetRow(ctx, client.Rollouts, "r", "zz", client.ReadOptions{}); err != nil || row != nil {
		t.Fatalf("GetRow of an absent record = %s, %v; want nil, as the rollout API answers null", row, err)
	}
	if got, err := c.GetRows(ctx, "g", []string{"c", "zz", "a"}, client.ReadOptions{Columns: []string{"id"}}); err != nil || ids(t, got) != "c,a" {
		t.Fatalf("GetRows = %s, %v", got, err)
	}
	body, n, err := c.OpenBlob(ctx, "r", "x")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	if cerr := body.Close(); err != nil || cerr != nil || string(got) != string(blob) || n != int64(len(blob)) {
		t.Fatalf("OpenBlob = %q (%d), %v %v", got, n, err, cerr)
	}
	if _, _, err := c.OpenBlob(ctx, "r", "y"); !client.IsNotFound(err) {
		t.Fatalf("OpenBlob of a record without one: %v, want not found", err)
	}

	// Flush and merge: the rows move into the base table's first version.
	if _, err := c.AddRows(ctx, client.Generic, "g", []map[string]any{{"id": "d", "n": 4}}, client.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx, "g"); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if m, err := c.MergeWAL(ctx, "g"); err != nil || m.Version == 0 || m.Rows != 4 {
		t.Fatalf("MergeWAL = %+v, %v", m, err)
	}
	if m, err := c.MergeTarget(ctx, "r"); err != nil || m.Version == 0 {
		t.Fatalf("MergeTarget = %+v, %v", m, err)
	}
	if s, err := c.GetStore(ctx, client.Generic, "g"); err != nil || s.Version == nil || *s.Version == 0 || s.RowCount != 4 {
		t.Fatalf("GetStore = %+v, %v", s, err)
	}

	// The feed, and a consumer's cursor.
	page, err := c.Changes(ctx, client.Generic, "g", client.ChangesOptions{Limit: 3})
	if err != nil || len(page.Changes) != 3 || page.NextCursor == "" {
		t.Fatalf("Changes = %+v, %v", page, err)
	}
	rec, err := c.CommitConsumer(ctx, "trainer", client.Generic, "g", page.NextCursor)
	if err != nil || rec.Cursor != page.NextCursor || rec.Consumer != "trainer" {
		t.Fatalf("CommitConsumer = %+v, %v", rec, err)
	}
	if rec, err := c.GetConsumer(ctx, "trainer", client.Generic, "g"); err != nil || rec.Cursor != page.NextCursor {
		t.Fatalf("GetConsumer = %+v, %v", rec, err)
	}
	rest, err := c.Changes(ctx, client.Generic, "g", client.ChangesOptions{Consumer: "trainer", Wait: time.Second})
	if err != nil || len(rest.Changes) != 1 || !strings.Contains(string(rest.Changes[0].Row), `"id":"d"`) {
		t.Fatalf("Changes from the consumer's cursor = %+v, %v", rest, err)
	}
	if _, err := c.CommitConsumer(ctx, "trainer", client.Generic, "g", page.Changes[0].Cursor); !errors.Is(err, client.ErrCursorBehind) {
		t.Fatalf("a commit behind: %v, want ErrCursorBehind", err)
	}
	if _, err := c.GetConsumer(ctx, "nobody", client.Generic, "g"); !client.IsNotFound(err) {
		t.Fatalf("GetConsumer of a consumer that never committed: %v, want not found", err)
	}

	if err := c.DeleteStore(ctx, client.Generic, "g"); err != nil {
		t.Fatalf("DeleteStore: %v", err)
	}
	if _, err := c.GetStore(ctx, client.Generic, "g"); !client.IsNotFound(err) {
		t.Fatalf("GetStore after its delete: %v, want not found", err)
	}
}

// An error answer is an *Error with the worker's status, code and message,
// matched by errors.Is against the sentinel of its code.
func TestErrorsCarryTheWorkersStatusCodeAndMessage(t *testing.T) {
	ctx := context.Background()
	url := newWorker(t)
	c := newClient(t, url)
	if _, err := c.CreateStore(ctx, client.Generic, client.StoreSpec{Name: "g", Schema: json.RawMessage(spec)}); err != nil {
		t.Fatal(err)
	}
	var e *client.Error

	_, err := c.GetStore(ctx, client.Rollouts, "nope")
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Code != client.CodeNotFound ||
		e.Message != "Rollout store 'nope' does not exist" || !errors.Is(err, client.ErrNotFound) || !client.IsNotFound(err) {
		t.Errorf("a store that does not exist: %#v (%v), want a 404 NOT_FOUND in the reference's words", e, err)
	}
	_, err = c.AddRows(ctx, client.Generic, "g", []map[string]any{{"id": "a", "n": "one"}}, client.AddOptions{})
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || !errors.Is(err, client.ErrInvalidRequest) || !strings.Contains(e.Message, `"n"`) {
		t.Errorf("a bad row: %v, want a 400 INVALID_REQUEST naming the column", err)
	}
	_, err = c.CreateStore(ctx, client.Generic, client.StoreSpec{Name: "g", Schema: json.RawMessage(spec)})
	if !errors.As(err, &e) || e.Status != http.StatusConflict || !client.IsAlreadyExists(err) || errors.Is(err, client.ErrConflict) || client.Retryable(err) {
		t.Errorf("a store that exists: %v, want a 409 ALREADY_EXISTS, not a CONFLICT to retry", err)
	}
	if _, err = c.MergeWAL(ctx, "g"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("a control route without the token: %v, want ErrUnauthenticated", err)
	}
	if _, err := c.ListRows(ctx, "tables", "g", client.ListOptions{}); err == nil {
		t.Error("a kind that is neither rollouts nor generic: no error")
	}
}

// The client's codes are the worker's: a code renamed on one side fails here.
func TestTheCodesAreTheWorkers(t *testing.T) {
	for mine, theirs := range map[string]string{
		client.CodeInvalidRequest: httpjson.CodeInvalidRequest, client.CodeNotFound: httpjson.CodeNotFound,
		client.CodeMethodNotAllowed: httpjson.CodeMethodNotAllowed, client.CodeInternal: httpjson.CodeInternal,
		client.CodeAlreadyExists: httpapi.CodeAlreadyExists, client.CodeConflict: httpapi.CodeConflict,
		client.CodeCursorBehind: httpapi.CodeCursorBehind, client.CodePayloadTooLarge: httpapi.CodePayloadTooLarge,
		client.CodeUnsupportedMediaType: httpapi.CodeUnsupportedMediaType, client.CodeOverloaded: httpapi.CodeOverloaded,
		client.CodeStoreUnavailable: httpapi.CodeStoreUnavailable, client.CodeConsumerLag: httpapi.CodeConsumerLag,
		client.CodeConsumersUnavailable: httpapi.CodeConsumersUnavailable, client.CodeFeedUnavailable: httpapi.CodeFeedUnavailable,
		client.CodeTasksUnavailable: httpapi.CodeTasksUnavailable, client.CodeDataLoss: httpapi.CodeDataLoss,
	} {
		if mine != theirs {
			t.Errorf("client code %q, the worker's %q", mine, theirs)
		}
	}
}

// What a call holds is bounded: a larger answer is refused, not cut short.
func TestAnAnswerOverMaxAnswerIsRefused(t *testing.T) {
	ctx := context.Background()
	url := newWorker(t)
	c := newClient(t, url)
	if _, err := c.CreateStore(ctx, client.Generic, client.StoreSpec{Name: "g", Schema: json.RawMessage(spec)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddRows(ctx, client.Generic, "g", []map[string]any{{"id": strings.Repeat("a", 200), "n": 1}}, client.AddOptions{Flush: true}); err != nil {
		t.Fatal(err)
	}
	small := newClient(t, url, client.WithMaxAnswer(100))
	if _, err := small.ListRows(ctx, client.Generic, "g", client.ListOptions{}); !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("a list over MaxAnswer: %v, want ErrTooLarge", err)
	}
}

// Every call is bounded by the client's timeout, whatever the caller's context:
// a worker that accepts the connection and never answers does not hold it.
func TestACallToAWorkerThatNeverAnswersEndsAtTheTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	c := newClient(t, ln.Addr().String(), client.WithTimeout(200*time.Millisecond))
	start := time.Now()
	_, err = c.Health(context.Background())
	var e *client.Error
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &e) {
		t.Fatalf("Health of a worker that never answers: %v, want the deadline, not an answer", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v", took)
	}
}
