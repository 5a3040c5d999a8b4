package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Every class has one answer; the existing ones are kept, and the failures a
// concurrent create or delete of a store leaves behind are 409s, not 500s.
func TestErrorAnswerOfEveryClass(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", schema.ErrInvalid), http.StatusBadRequest, "INVALID_REQUEST"},
		{fmt.Errorf("x: %w", registry.ErrNotFound), http.StatusNotFound, "NOT_FOUND"},
		{fmt.Errorf("x: %w", store.ErrDeleted), http.StatusNotFound, "NOT_FOUND"},
		{fmt.Errorf("store x: table x: version 1 vanished: %w", table.ErrNotFound), http.StatusNotFound, "NOT_FOUND"},
		{fmt.Errorf("x: %w", registry.ErrExists), http.StatusConflict, "ALREADY_EXISTS"},
		{fmt.Errorf("store x: x/_wal/w1: %w", wal.ErrClosed), http.StatusConflict, "CONFLICT"},
		{fmt.Errorf("x: %w", wal.ErrFenced), http.StatusConflict, "CONFLICT"},
		{fmt.Errorf("get x/_wal/w2/_manifests/1.json: %w", objstore.ErrNotFound), http.StatusConflict, "CONFLICT"},
		{fmt.Errorf("x: %w", store.ErrOverloaded), http.StatusServiceUnavailable, "OVERLOADED"},
		{fmt.Errorf("x: %w", objstore.ErrThrottled), http.StatusServiceUnavailable, "OVERLOADED"},
		{fmt.Errorf("x: %w", table.ErrTooManyWriters), http.StatusServiceUnavailable, "OVERLOADED"},
		{fmt.Errorf("x: %w", objstore.ErrUnavailable), http.StatusServiceUnavailable, "STORE_UNAVAILABLE"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "OVERLOADED"},
		{fmt.Errorf("x: %w", context.Canceled), http.StatusServiceUnavailable, "OVERLOADED"},
		{fmt.Errorf("manifest x/_versions/3.json: %w: bad json", table.ErrCorrupt), http.StatusInternalServerError, "DATA_LOSS"},
		{errors.New("disk on fire"), http.StatusInternalServerError, "INTERNAL"},
		{&http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE"},
		{badRequest("bad"), http.StatusBadRequest, "INVALID_REQUEST"},
		// A handler's 500 over a race is the race's answer, with the handler's words.
		{internalError(fmt.Errorf("seal: %w", wal.ErrEpochShared), "rows added; the seal failed"), http.StatusConflict, "CONFLICT"},
		{internalError(fmt.Errorf("x: %w", schema.ErrInvalid), "unreadable registered schema"), http.StatusInternalServerError, "INTERNAL"},
		{internalError(fmt.Errorf("x: %w", store.ErrDeleted), "rows added; the seal failed"), http.StatusNotFound, "NOT_FOUND"},
		{internalError(fmt.Errorf("x: %w", objstore.ErrUnavailable), "rows added; the seal failed"), http.StatusServiceUnavailable, "STORE_UNAVAILABLE"},
	} {
		status, code, msg := errorAnswer(c.err)
		if status != c.status || code != c.code || msg == "" {
			t.Errorf("errorAnswer(%v) = %d %s %q, want %d %s", c.err, status, code, msg, c.status, c.code)
		}
		if code == "INTERNAL" && msg != "internal error" && !strings.Contains(c.err.Error(), msg) {
			t.Errorf("errorAnswer(%v): a 500 says %q", c.err, msg)
		}
	}
}

// vanishingEnv is two workers on one bucket: w2 writes the store, w1 reads it through
// a fault wrapper that can make any object vanish under its reads, as a delete by
// another worker does.
type vanishingEnv struct {
	bucket *objstore.Bucket
	faults *objstore.Faults
	w1, w2 *apiEnv
}

func newVanishingEnv(t *testing.T) *vanishingEnv {
	t.Helper()
	bucket := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	e := &vanishingEnv{bucket: bucket, faults: f,
		w1: newAPIEnv(t, objstore.WithFaults(bucket, f), "w1", nil),
		w2: newAPIEnv(t, bucket, "w2", nil)}
	e.w2.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"s","schema":`+apiSpec+`}`, nil)
	e.w2.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/s/rows?flush=true", `{"rows":[{"id":"a","n":1}]}`, nil)
	return e
}

// A read that trips over an object a delete removed under it (the store listed,
// then gone) answers 404 when the delete finished, and 409 (send again) when the
// store is registered again; before, each was a 500 INTERNAL ("table not found",
// "version 1 vanished", "object not found … _wal/w2/_manifests/…").
func TestAReadRacingADeleteAnswers404Or409NeverInternal(t *testing.T) {
	rows := []string{"/api/v1/generic/s/rows", "/api/v1/generic/s/rows/a"}
	all := append([]string{"/api/v1/generic/s"}, rows...)
	for _, c := range []struct {
		name, object string // where the read trips
		paths        []string
		// The answer while the store is deleted, and while it is registered
		// (created again, or its delete still removing objects).
		deleted, registered string
	}{
		{"shard manifest", "/_wal/w2/_manifests/", all, "404 NOT_FOUND", "409 CONFLICT"},
		{"generation", "/_wal/w2/gen/", rows, "404 NOT_FOUND", "409 CONFLICT"},
		// A table's versions go only with its store: gone either way.
		{"base manifest", "/_versions/", all, "404 NOT_FOUND", "404 NOT_FOUND"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newVanishingEnv(t)
			e.faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyPrefix: "generic/s@", KeyContains: c.object, Err: objstore.ErrNotFound})
			for _, path := range c.paths {
				st, body := e.w1.do(http.MethodGet, path, nil)
				if got := answer(t, st, body); got != c.registered {
					t.Errorf("registered: GET %s: %s (%s), want %s", path, got, body, c.registered)
				}
			}
			if err := e.bucket.Delete(context.Background(), "_registry/generic/s.json"); err != nil {
				t.Fatal(err)
			}
			for _, path := range c.paths {
				st, body := e.w1.do(http.MethodGet, path, nil)
				if got := answer(t, st, body); got != c.deleted {
					t.Errorf("deleted: GET %s: %s (%s), want %s", path, got, body, c.deleted)
				}
			}
		})
	}
}

// answer is "<status> <code>" of an error answer.
func answer(t *testing.T, status int, body []byte) string {
	t.Helper()
	var eb ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("answer %d %q is not the error shape: %v", status, body, err)
	}
	return fmt.Sprintf("%d %s", status, eb.Error.Code)
}

// Two creates of one name on two workers: the loser's leftover cleanup can remove
// the winner's first table version under the winner's own create, which then finds
// no table. That is a conflict of two requests (409), not a 500.
func TestACreateWhoseTableVanishesUnderItIsAConflict(t *testing.T) {
	bucket := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	w1 := newAPIEnv(t, objstore.WithFaults(bucket, f), "w1", nil)
	// Another create took version 1 first and a third request's cleanup removed it.
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyPrefix: "generic/s@", KeyContains: "/_versions/", Times: 1, Err: objstore.ErrExists})
	st, body := w1.do(http.MethodPost, "/api/v1/generic", `{"name":"s","schema":`+apiSpec+`}`)
	if got := answer(t, st, body); got != "409 CONFLICT" {
		t.Fatalf("create: %s (%s), want 409 CONFLICT", got, body)
	}
	// Sending it again creates the store.
	w1.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"s","schema":`+apiSpec+`}`, nil)
}

// A corrupt stored object is data loss, not an internal error: the answer says so
// and names the object, so the operator the client calls knows where to look.
func TestACorruptObjectAnswersDataLossNamingIt(t *testing.T) {
	for _, c := range []struct{ name, prefix string }{
		{"base manifest", "/_versions/0"},
		{"generation", "/_wal/w2/gen/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newVanishingEnv(t)
			key := lastKey(t, e.bucket, c.prefix)
			if err := e.bucket.Put(context.Background(), key, []byte("garbage")); err != nil {
				t.Fatal(err)
			}
			st, body := e.w1.do(http.MethodGet, "/api/v1/generic/s/rows", nil)
			if got := answer(t, st, body); got != "500 DATA_LOSS" || !strings.Contains(string(body), key) {
				t.Fatalf("GET rows over a corrupt %s: %s %s, want 500 DATA_LOSS naming %s", c.name, got, body, key)
			}
		})
	}
}

func lastKey(t *testing.T, b *objstore.Bucket, contains string) string {
	t.Helper()
	objs, err := b.List(context.Background(), "generic/s@")
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	for _, o := range objs {
		if strings.Contains(o.Key, contains) {
			last = o.Key
		}
	}
	if last == "" {
		t.Fatalf("no object of store s has %q in its key (of %d)", contains, len(objs))
	}
	return last
}

// Clients retry a 503 after the hint it carries.
func TestAnUnavailableAnswerCarriesRetryAfter(t *testing.T) {
	e := newVanishingEnv(t)
	e.faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyPrefix: "_registry/", Err: errors.New("connection reset")})
	req, err := http.NewRequest(http.MethodGet, e.w1.url+"/api/v1/generic/s/rows", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("GET with the registry unreadable: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// The in-process version of the end-to-end churn test (e2e/churn_test.go): creates,
// deletes, adds, gets and lists of one name from several goroutines through two
// workers. Every answer must be one a client can act on; a 500 was what one in
// twenty of these got before.
func TestChurnOfOneStoreNameAcrossTwoWorkersNeverAnswers500(t *testing.T) {
	if testing.Short() {
		t.Skip("churn for 2 s: skipped with -short")
	}
	bucket := objstoretest.Mem(t)
	envs := []*apiEnv{newAPIEnv(t, bucket, "w1", nil), newAPIEnv(t, bucket, "w2", nil)}
	deadline := time.Now().Add(2 * time.Second)
	var (
		mu         sync.Mutex
		unexpected []string
		seen       = map[int]int{}
	)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; time.Now().Before(deadline); i++ {
				e := envs[r.IntN(len(envs))]
				method, path, body := churnRequest(r, g, i)
				st, out := e.do(method, path, body)
				mu.Lock()
				seen[st]++
				if st >= http.StatusInternalServerError && st != http.StatusServiceUnavailable {
					unexpected = append(unexpected, fmt.Sprintf("%s %s: %d %s", method, path, st, out))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("%d answers a client cannot act on (of %v), e.g.:\n%s", len(unexpected), seen, strings.Join(unexpected[:min(5, len(unexpected))], "\n"))
	}
	t.Logf("answers by status: %v", seen)
}

// churnRequest picks one request on the store "churn".
func churnRequest(r *rand.Rand, g, i int) (method, path string, body any) {
	switch r.IntN(6) {
	case 0:
		return http.MethodPost, "/api/v1/generic", `{"name":"churn","schema":` + apiSpec + `}`
	case 1:
		return http.MethodDelete, "/api/v1/generic/churn", nil
	case 2:
		return http.MethodPost, "/api/v1/generic/churn/rows?flush=true", fmt.Sprintf(`{"rows":[{"id":"r%d-%d","n":1}]}`, g, i)
	case 3:
		return http.MethodGet, "/api/v1/generic/churn/rows/r1-1", nil
	case 4:
		return http.MethodGet, "/api/v1/generic/churn/rows", nil
	}
	return http.MethodGet, "/api/v1/generic/churn", nil
}
