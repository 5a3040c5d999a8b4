package httpapi

// Conformance of the data routes with the reference system (lance-context), whose
// clients (the Rust RemoteRolloutStore / RemoteGenericStore, the Python SDK) must
// work against a Tidemark worker unchanged. Written from the reference source at
// github.com/lance-format/lance-context:
//
//   - crates/lance-context-server/src/routes/rollouts.rs and routes/generic.rs at
//     commit 02969b33db66f06b13201a0d2164eb98fe6a3231 (statuses, bodies, the flush
//     parameter, the empty-append 400, the 404 wordings of rows and blobs);
//   - crates/lance-context-server/src/state.rs (get_or_open_rollout_store: the
//     "Rollout store 'x' does not exist" wording) and routes/mod.rs (the router);
//   - crates/lance-context-api/src/lib.rs at commit
//     989a248ebd2da4d0376c44830c456184d331f05e (RolloutStoreInfo, GenericStoreInfo,
//     AddRolloutsResponse, AddRowsResponse, RolloutRecordDto, GetRolloutResponse,
//     CreateRolloutStoreRequest with storage_options);
//   - crates/lance-context-api/src/schema_spec.rs at commit
//     bad22ae2690dcc6d7fd32147e407e7f9a431bdf2 (nullable defaults to true, id
//     declared anywhere, blob and metric options);
//   - crates/lance-context-server/src/error.rs at commit
//     15e81d9373de671b2a2481284eb642af08928943 ({"error":{"code","message"}}).
//
// Where Tidemark answers more than the reference, the extra fields sit beside the
// reference's; these tests check the reference's fields, their JSON types and the
// keys the reference leaves out. The e2e suite's TestConformance drives a real
// worker process through the same checks for a few routes.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/jsonshape"
)

// refError checks a reference error answer: status, code and the exact message
// (empty: any).
func refError(t *testing.T, e *apiEnv, method, path string, body any, status int, code, message string) {
	t.Helper()
	got := e.fails(status, code, method, path, body)
	if message != "" && got != message {
		t.Errorf("%s %s: message %q, want the reference's %q", method, path, got, message)
	}
}

// rolloutRecordDto is what the reference client requires of a record: these keys
// are not Option in RolloutRecordDto, so a null or a missing one fails its decode.
var rolloutRecordDto = map[string]string{
	"id": "string", "rollout_id": "string", "problem_id": "string", "sequence_order": "number",
	"role": "string", "created_at": "string", "content_type": "string",
}

func TestConformanceRolloutRoutes(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)

	// POST /rollouts: 201 RolloutStoreInfo; storage_options: null is what the
	// reference client sends.
	status, body := e.do(http.MethodPost, "/api/v1/rollouts", `{"name":"conf","storage_options":null}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	created := jsonshape.Check(t, "create", body, map[string]string{"name": "string", "uri": "string", "version": "number"})
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"conf-empty-options","storage_options":{}}`, nil)
	refError(t, e, http.MethodPost, "/api/v1/rollouts", `{"name":"conf2","storage_options":{"aws_region":"x"}}`, 400, CodeInvalidRequest, "")
	refError(t, e, http.MethodPost, "/api/v1/rollouts", `{"name":"conf"}`, 409, CodeAlreadyExists, "Rollout store 'conf' already exists")

	// GET /rollouts: {stores: [{name, uri}]}, without version.
	_, body = e.do(http.MethodGet, "/api/v1/rollouts", nil)
	var list struct{ Stores []json.RawMessage }
	if err := json.Unmarshal(body, &list); err != nil || len(list.Stores) != 2 {
		t.Fatalf("list: %s %v", body, err)
	}
	for _, s := range list.Stores {
		jsonshape.Check(t, "list entry", s, map[string]string{"name": "string", "uri": "string"}, "version")
	}

	// GET /rollouts/{name}: RolloutStoreInfo, flat.
	_, body = e.do(http.MethodGet, "/api/v1/rollouts/conf", nil)
	got := jsonshape.Check(t, "get store", body, map[string]string{"name": "string", "uri": "string", "version": "number"}, "store", "stats")
	if string(got["uri"]) != string(created["uri"]) || string(got["version"]) != string(created["version"]) {
		t.Errorf("get store %s disagrees with create %v", body, created)
	}
	refError(t, e, http.MethodGet, "/api/v1/rollouts/absent", nil, 404, CodeNotFound, "Rollout store 'absent' does not exist")

	// POST .../records: an empty array is a 400; ?flush, flush=1 and flush=TRUE
	// seal (visible at once), flush=false and no flush do not.
	refError(t, e, http.MethodPost, "/api/v1/rollouts/conf/records", `{"records":[]}`, 400, CodeInvalidRequest, "records array must not be empty")
	refError(t, e, http.MethodPost, "/api/v1/rollouts/absent/records", `{"records":[{"id":"a","rollout_id":"r"}]}`, 404, CodeNotFound, "Rollout store 'absent' does not exist")
	visible := 0
	for i, q := range []string{"", "?flush=false", "?flush=0", "?flush", "?flush=1", "?flush=TRUE", "?other=x&flush=true"} {
		status, body := e.do(http.MethodPost, "/api/v1/rollouts/conf/records"+q,
			fmt.Sprintf(`{"records":[{"id":"q%d-a","rollout_id":"r%d"},{"id":"q%d-b","rollout_id":"r%d","metadata":{"k":[1,"x"]}}]}`, i, i, i, i))
		if status != http.StatusCreated {
			t.Fatalf("add%s: %d %s", q, status, body)
		}
		ans := jsonshape.Check(t, "add"+q, body, map[string]string{"version": "number", "ids": "array", "count": "number"})
		if want := fmt.Sprintf(`["q%d-a","q%d-b"]`, i, i); string(ans["ids"]) != want || string(ans["count"]) != "2" {
			t.Errorf("add%s: ids %s count %s, want %s and 2", q, ans["ids"], ans["count"], want)
		}
		sealed := strings.Contains(q, "flush") && !strings.Contains(q, "false") && !strings.Contains(q, "=0")
		if sealed {
			// A seal takes every unsealed row of this worker, earlier adds' too.
			visible = 2 * (i + 1)
		}
		if n := len(e.rows("rollouts", "conf")); n != visible {
			t.Errorf("after add%s: %d rows visible, want %d", q, n, visible)
		}
	}
	refError(t, e, http.MethodPost, "/api/v1/rollouts/conf/records?flush=yes", `{"records":[{"id":"a","rollout_id":"r"}]}`, 400, CodeInvalidRequest, "")

	// GET .../records: {records: [RolloutRecordDto]}, every row without a limit;
	// metadata is the JSON value that was sent.
	_, body = e.do(http.MethodGet, "/api/v1/rollouts/conf/records", nil)
	var recs struct{ Records []json.RawMessage }
	if err := json.Unmarshal(body, &recs); err != nil || len(recs.Records) != visible {
		t.Fatalf("list records: %d of %d, %v", len(recs.Records), visible, err)
	}
	for _, r := range recs.Records {
		rec := jsonshape.Check(t, "listed record", r, rolloutRecordDto)
		if m := rec["metadata"]; jsonshape.Type(m) != "null" && string(m) != `{"k":[1,"x"]}` {
			t.Errorf("metadata %s, want the object sent", m)
		}
	}

	// GET .../records/{id}: {record: RolloutRecordDto} or {record: null}.
	_, body = e.do(http.MethodGet, "/api/v1/rollouts/conf/records/q3-b", nil)
	rec := jsonshape.Check(t, "get record", body, map[string]string{"record": "object"})
	inner := jsonshape.Check(t, "get record", rec["record"], rolloutRecordDto)
	if string(inner["metadata"]) != `{"k":[1,"x"]}` {
		t.Errorf("metadata %s, want the object sent", inner["metadata"])
	}
	if _, body = e.do(http.MethodGet, "/api/v1/rollouts/conf/records/nope", nil); string(body) != "{\"record\":null}\n" {
		t.Errorf("get of a missing record: %s", body)
	}

	// DELETE: 204 without a body, then the reference's 404.
	e.ok(http.StatusNoContent, http.MethodDelete, "/api/v1/rollouts/conf", nil, nil)
	refError(t, e, http.MethodDelete, "/api/v1/rollouts/conf", nil, 404, CodeNotFound, "Rollout store 'conf' does not exist")
	refError(t, e, http.MethodGet, "/api/v1/rollouts/conf/records", nil, 404, CodeNotFound, "Rollout store 'conf' does not exist")
}

func TestConformanceGenericRoutes(t *testing.T) {
	// The credential guards the control routes only: flush is a data route.
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.Auth = testGuard(t) })

	// The reference client's serialization of a SchemaSpec: id anywhere and
	// explicitly non-null, other columns nullable unless they say otherwise,
	// "large", "blob" and "metric" at their defaults.
	spec := `{"columns":[["score",{"type":"float64"}],["id",{"type":"string","large":false,"nullable":false}],` +
		`["n",{"type":"int64","nullable":false}],["raw",{"type":"binary","blob":false,"nullable":true}],` +
		`["v",{"type":"vector","dim":2,"metric":null,"nullable":true}],["tags",{"type":"list","item":{"type":"string"},"nullable":true}]]}`
	status, body := e.do(http.MethodPost, "/api/v1/generic", `{"name":"gc","schema":`+spec+`,"storage_options":null,"seal_on_add":false}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	created := jsonshape.Check(t, "create", body, map[string]string{"name": "string", "uri": "string", "version": "number", "schema": "object"})
	// The schema comes back with every nullable spelled out: a reference client
	// reads a missing one as true.
	var echoed struct{ Columns [][2]json.RawMessage }
	if err := json.Unmarshal(created["schema"], &echoed); err != nil || len(echoed.Columns) != 6 {
		t.Fatalf("schema %s: %v", created["schema"], err)
	}
	wantNullable := map[string]bool{`"score"`: true, `"id"`: false, `"n"`: false, `"raw"`: true, `"v"`: true, `"tags"`: true}
	for _, c := range echoed.Columns {
		var typ struct{ Nullable *bool }
		if err := json.Unmarshal(c[1], &typ); err != nil || typ.Nullable == nil || *typ.Nullable != wantNullable[string(c[0])] {
			t.Errorf("column %s: %s, want nullable %v spelled out", c[0], c[1], wantNullable[string(c[0])])
		}
	}
	if string(echoed.Columns[0][0]) != `"score"` {
		t.Errorf("columns reordered: %s", created["schema"])
	}
	refError(t, e, http.MethodPost, "/api/v1/generic", `{"name":"gc2","schema":{"columns":[["id",{"type":"string","nullable":true}]]}}`, 400, CodeInvalidRequest, "")
	refError(t, e, http.MethodPost, "/api/v1/generic", `{"name":"gc2","schema":{"columns":[["x",{"type":"string"}]]}}`, 400, CodeInvalidRequest, "")
	refError(t, e, http.MethodPost, "/api/v1/generic", `{"name":"gc","schema":`+spec+`}`, 409, CodeAlreadyExists, "Generic store 'gc' already exists")

	_, body = e.do(http.MethodGet, "/api/v1/generic", nil)
	var list struct{ Stores []json.RawMessage }
	if err := json.Unmarshal(body, &list); err != nil || len(list.Stores) != 1 {
		t.Fatalf("list: %s %v", body, err)
	}
	jsonshape.Check(t, "list entry", list.Stores[0], map[string]string{"name": "string", "uri": "string"}, "version")
	_, body = e.do(http.MethodGet, "/api/v1/generic/gc", nil)
	jsonshape.Check(t, "get store", body, map[string]string{"name": "string", "uri": "string", "version": "number", "schema": "object"}, "store", "stats")
	refError(t, e, http.MethodGet, "/api/v1/generic/absent", nil, 404, CodeNotFound, "Generic store 'absent' does not exist")

	// POST rows: 201 {version, count}; an empty array is a no-op, as there; a
	// column left out is null when nullable.
	status, body = e.do(http.MethodPost, "/api/v1/generic/gc/rows", `{"rows":[]}`)
	if ans := jsonshape.Check(t, "empty add", body, map[string]string{"version": "number", "count": "number"}); status != http.StatusCreated || string(ans["count"]) != "0" {
		t.Errorf("empty add: %d %s", status, body)
	}
	status, body = e.do(http.MethodPost, "/api/v1/generic/gc/rows", `{"rows":[{"id":"a","n":1,"score":0.5,"tags":["x"]},{"n":2,"id":"b"}]}`)
	if ans := jsonshape.Check(t, "add", body, map[string]string{"version": "number", "count": "number"}); status != http.StatusCreated || string(ans["count"]) != "2" {
		t.Errorf("add: %d %s", status, body)
	}
	refError(t, e, http.MethodPost, "/api/v1/generic/gc/rows", `{"rows":[{"id":"c"}]}`, 400, CodeInvalidRequest, "")

	// flush: 204 without a body, with no token (a data route).
	if code, answer := e.send(http.MethodPost, "/api/v1/generic/gc/flush", "", ""); code != http.StatusNoContent || answer != "" {
		t.Errorf("flush: %d %q, want 204 and no body", code, answer)
	}

	// GET rows: {rows: [...]}, every row without a limit.
	if rows := e.rows("generic", "gc"); len(rows) != 2 {
		t.Errorf("list rows: %d, want 2", len(rows))
	}
	// GET rows/{id}: the bare row; ?columns= projects (id always in); a missing id
	// is the reference's 404.
	_, body = e.do(http.MethodGet, "/api/v1/generic/gc/rows/a", nil)
	row := jsonshape.Check(t, "get row", body, map[string]string{"id": "string", "n": "number", "score": "number", "tags": "array", "raw": "null"}, "row")
	if string(row["id"]) != `"a"` {
		t.Errorf("get row: %s", body)
	}
	_, body = e.do(http.MethodGet, "/api/v1/generic/gc/rows/a?columns=score,%20tags", nil)
	if proj := jsonshape.Check(t, "projected row", body, map[string]string{"id": "string", "score": "number", "tags": "array"}, "n", "raw", "v"); len(proj) != 3 {
		t.Errorf("projected row: %s", body)
	}
	refError(t, e, http.MethodGet, "/api/v1/generic/gc/rows/a?columns=nope", nil, 400, CodeInvalidRequest, "")
	refError(t, e, http.MethodGet, "/api/v1/generic/gc/rows/zz", nil, 404, CodeNotFound, "Row 'zz' does not exist")

	e.ok(http.StatusNoContent, http.MethodDelete, "/api/v1/generic/gc", nil, nil)
	refError(t, e, http.MethodDelete, "/api/v1/generic/gc", nil, 404, CodeNotFound, "Generic store 'gc' does not exist")
	refError(t, e, http.MethodPost, "/api/v1/generic/gc/flush", nil, 404, CodeNotFound, "Generic store 'gc' does not exist")
}

// A list without a limit is every row, however many, streamed in chunks: more
// rows than a page may hold, more bytes than one chunk, each row once.
func TestConformanceListWithoutLimitStreamsEveryRow(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"big"}`, nil)
	const n = maxListLimit + 500
	content := strings.Repeat("x", 64)
	for start := 0; start < n; start += 2500 {
		var recs []string
		for i := start; i < min(start+2500, n); i++ {
			recs = append(recs, fmt.Sprintf(`{"id":"r%05d","rollout_id":"ro","content":%q}`, i, content))
		}
		e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/big/records?flush", `{"records":[`+strings.Join(recs, ",")+`]}`, nil)
		if start == 5000 { // some rows in the base table, the rest pending
			e.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/big", nil, nil)
		}
	}
	// An overwrite pending over a merged row is listed once, at its new value.
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/big/records?flush", `{"records":[{"id":"r00001","rollout_id":"ro","content":"new"}]}`, nil)
	status, body := e.do(http.MethodGet, "/api/v1/rollouts/big/records", nil)
	if status != http.StatusOK || len(body) < 2*listChunkBytes {
		t.Fatalf("list: %d, %d bytes", status, len(body))
	}
	var ans struct {
		Records []struct{ ID, Content string }
		Count   int
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range ans.Records {
		seen[r.ID]++
		if want := map[bool]string{true: "new", false: content}[r.ID == "r00001"]; r.Content != want {
			t.Errorf("%s: content %q", r.ID, r.Content)
		}
	}
	if len(ans.Records) != n || ans.Count != n || len(seen) != n {
		t.Errorf("listed %d records (count %d, %d distinct), want %d", len(ans.Records), ans.Count, len(seen), n)
	}
	// With an offset: the stream after that many rows.
	var page struct{ Count int }
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/rollouts/big/records?offset=10000", nil, &page)
	if page.Count != n-10000 {
		t.Errorf("offset 10000: %d rows, want %d", page.Count, n-10000)
	}
}

// A streamed list whose read fails once rows went out cannot change its status
// any more: the connection is cut, so the client sees a broken answer, never a
// shorter list that parses, and the request is still counted.
func TestListWithoutLimitIsCutOffNotTruncatedWhenTheReadFails(t *testing.T) {
	bucket := objstoretest.Mem(t)
	faults := objstore.NewFaults(nil)
	writer := newAPIEnv(t, bucket, "w2", nil)
	reader := newAPIEnv(t, objstore.WithFaults(bucket, faults), "w1", nil)
	writer.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"cut"}`, nil)
	// Two merges: two fragments, each more than a chunk of answer.
	content := strings.Repeat("y", 200)
	for f := range 2 {
		var recs []string
		for i := range 1000 {
			recs = append(recs, fmt.Sprintf(`{"id":"f%d-%04d","rollout_id":"ro","content":%q}`, f, i, content))
		}
		writer.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/cut/records?flush", `{"records":[`+strings.Join(recs, ",")+`]}`, nil)
		writer.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/cut", nil, nil)
	}
	// The first fragment read (its data file, key index and bloom filter) lets the
	// read go on, and every other fragment's objects fail.
	var once sync.Once
	var before atomic.Pointer[objstore.RuleHandle]
	before.Store(faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet, objstore.OpGetRange}, KeyPrefix: "rollout/cut@", KeyContains: "/data/",
		Before: func(ctx context.Context, _ objstore.Op, key string) {
			once.Do(func() {
				objs, err := bucket.List(ctx, key[:strings.Index(key, "/data/")+len("/data/")])
				if err != nil {
					t.Error(err)
				}
				first := key[:strings.LastIndex(key, ".")+1] // .../data/<uuid>.
				for _, o := range objs {
					if !strings.HasPrefix(o.Key, first) {
						faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet, objstore.OpGetRange}, KeyPrefix: o.Key, Err: objstore.ErrUnavailable})
					}
				}
				before.Load().Remove() // the first matching rule is the one that applies
			})
		}}))
	resp, err := http.Get(reader.url + "/api/v1/rollouts/cut/records")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || readErr == nil || json.Valid(body) || len(body) < listChunkBytes {
		t.Fatalf("status %d, %d bytes, read error %v, valid JSON %v: want a 200 cut off after its first chunk", resp.StatusCode, len(body), readErr, json.Valid(body))
	}
	waitFor(t, "the cut-off request to be counted", func() bool {
		return reader.count(reader.series.Requests, "GET", "/api/v1/rollouts/{name}/records", "200") == 1
	})
}
