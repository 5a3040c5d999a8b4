package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// badBodyLimit is the body limit of the bad-input tests: small, so that one test
// can send a body over it cheaply.
const badBodyLimit = 4096

// storeState is what a bad request must not change: the listed rows and the
// pending generations of a store.
type storeState struct {
	rows    []json.RawMessage
	pending int
}

func (e *apiEnv) state(kind, name string) storeState {
	e.t.Helper()
	return storeState{rows: e.rows(kind, name), pending: e.stats(kind, name).Stats.PendingGenerations}
}

func TestBadRequestsAreRefusedAndLeaveTheStoreUnchanged(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.MaxBodyBytes = badBodyLimit })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/r/records?flush=true", `{"records":[{"id":"r1","rollout_id":"x"}]}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows?flush=true", `{"rows":[{"id":"g1","n":1}]}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"gone","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/gone/rows?flush=true", `{"rows":[{"id":"g1","n":1}]}`, nil)
	e.ok(http.StatusNoContent, http.MethodDelete, "/api/v1/generic/gone", nil, nil)
	beforeR, beforeG := e.state("rollouts", "r"), e.state("generic", "g")
	appended := e.count(e.series.AppendedRows, "rollout") + e.count(e.series.AppendedRows, "generic")

	long := strings.Repeat("n", 129)
	huge := `{"rows":[{"id":"big","n":1,"tags":["` + strings.Repeat("x", badBodyLimit) + `"]}]}`
	const (
		rollouts = "/api/v1/rollouts"
		generic  = "/api/v1/generic"
		records  = "/api/v1/rollouts/r/records"
		rows     = "/api/v1/generic/g/rows"
	)
	for _, tc := range []struct {
		name         string
		method, path string
		body         any
		status       int
		code         string
		mentions     string // the message must contain this
	}{
		// Store names, in bodies and in paths.
		{"create ../x", "POST", rollouts, `{"name":"../x"}`, 400, CodeInvalidRequest, `"../x"`},
		{"create a:b", "POST", rollouts, `{"name":"a:b"}`, 400, CodeInvalidRequest, `':'`},
		{"create empty name", "POST", generic, `{"name":"","schema":` + apiSpec + `}`, 400, CodeInvalidRequest, "empty"},
		{"create no name", "POST", rollouts, `{}`, 400, CodeInvalidRequest, "empty"},
		{"create 129 chars", "POST", rollouts, `{"name":"` + long + `"}`, 400, CodeInvalidRequest, "129 characters"},
		{"create reserved", "POST", rollouts, `{"name":"_registry"}`, 400, CodeInvalidRequest, "reserved"},
		{"path ../x", "POST", "/api/v1/rollouts/..%2Fx/records", `{"records":[]}`, 400, CodeInvalidRequest, `"../x"`},
		{"path a:b", "GET", "/api/v1/generic/a:b/rows", nil, 400, CodeInvalidRequest, `"a:b"`},
		{"path 129 chars", "DELETE", "/api/v1/generic/" + long, nil, 400, CodeInvalidRequest, "129 characters"},
		{"internal target a:b", "POST", "/api/v1/internal/merge-wal/a:b", nil, 400, CodeInvalidRequest, `"a:b"`},
		{"internal target generic:", "POST", "/api/v1/internal/merge-wal/generic:", nil, 400, CodeInvalidRequest, "empty"},

		// Malformed bodies.
		{"malformed JSON", "POST", records, `{"records":[{"id":"n1",}]}`, 400, CodeInvalidRequest, "malformed JSON"},
		{"truncated JSON", "POST", rows, `{"rows":[{"id":"n1"`, 400, CodeInvalidRequest, "malformed JSON"},
		{"empty body", "POST", rows, ``, 400, CodeInvalidRequest, "empty"},
		{"body not an object", "POST", records, `[{"id":"n1"}]`, 400, CodeInvalidRequest, "JSON object"},
		{"body null", "POST", records, `null`, 400, CodeInvalidRequest, `"records" array`},
		{"missing records", "POST", records, `{}`, 400, CodeInvalidRequest, `"records" array`},
		{"records not an array", "POST", records, `{"records":{"id":"n1"}}`, 400, CodeInvalidRequest, "array"},
		{"rows under the rollout key", "POST", rows, `{"records":[{"id":"n1","n":1}]}`, 400, CodeInvalidRequest, `"records"`},
		{"unknown top-level key", "POST", rows, `{"rows":[{"id":"n1","n":1}],"flush":true}`, 400, CodeInvalidRequest, `"flush"`},
		{"trailing data", "POST", rows, `{"rows":[{"id":"n1","n":1}]} {}`, 400, CodeInvalidRequest, "after"},
		{"row not an object", "POST", rows, `{"rows":[{"id":"n1","n":1},7]}`, 400, CodeInvalidRequest, "row 1"},

		// Rows the schema refuses; the batch is all or nothing.
		{"rollout unknown column", "POST", records, `{"records":[{"id":"n1"},{"id":"n2","bogus":1}]}`, 400, CodeInvalidRequest, `row 1, column "bogus"`},
		{"rollout null id", "POST", records, `{"records":[{"id":null}]}`, 400, CodeInvalidRequest, `column "id"`},
		{"rollout mistyped column", "POST", records, `{"records":[{"id":"n1","sequence_order":"3"}]}`, 400, CodeInvalidRequest, `column "sequence_order"`},
		{"generic undeclared column", "POST", rows, `{"rows":[{"id":"n1","n":1,"extra":true}]}`, 400, CodeInvalidRequest, `row 0, column "extra"`},
		{"generic mistyped column", "POST", rows, `{"rows":[{"id":"n1","n":1},{"id":"n2","n":"two"}]}`, 400, CodeInvalidRequest, `row 1, column "n"`},
		{"generic int with fraction", "POST", rows, `{"rows":[{"id":"n1","n":1.5}]}`, 400, CodeInvalidRequest, `column "n"`},
		{"generic null in non-null column", "POST", rows, `{"rows":[{"id":"n1","n":null}]}`, 400, CodeInvalidRequest, `column "n"`},
		{"generic null id", "POST", rows, `{"rows":[{"id":null,"n":1}]}`, 400, CodeInvalidRequest, `column "id"`},
		{"generic missing id", "POST", rows, `{"rows":[{"n":1}]}`, 400, CodeInvalidRequest, `column "id"`},
		{"generic list item mistyped", "POST", rows, `{"rows":[{"id":"n1","n":1,"tags":["a",2]}]}`, 400, CodeInvalidRequest, `column "tags" at [1]`},

		// Text that is not UTF-8, raw or as an unpaired surrogate escape: encoding/json
		// would store U+FFFD instead, so distinct ids would become one row.
		{"rollout id raw 0xff", "POST", records, "{\"records\":[{\"id\":\"n1\"},{\"id\":\"a\xffb\"}]}", 400, CodeInvalidRequest, `row 1, column "id": invalid UTF-8 in string: byte 0xff at offset 1`},
		{"rollout id lone surrogate", "POST", records, `{"records":[{"id":"a\ud800b"}]}`, 400, CodeInvalidRequest, `row 0, column "id": invalid UTF-8 in string: \ud800`},
		{"rollout content lone low surrogate", "POST", records, `{"records":[{"id":"n1","content":"x\udc00"}]}`, 400, CodeInvalidRequest, `column "content": invalid UTF-8`},
		{"rollout user_metadata raw", "POST", records, "{\"records\":[{\"id\":\"n1\",\"user_metadata\":\"\xc3\"}]}", 400, CodeInvalidRequest, `column "user_metadata": invalid UTF-8`},
		{"rollout metadata key", "POST", records, "{\"records\":[{\"id\":\"n1\",\"metadata\":{\"k\xfe\":1}}]}", 400, CodeInvalidRequest, `column "metadata": JSON text: invalid UTF-8`},
		{"rollout metadata value", "POST", records, `{"records":[{"id":"n1","metadata":{"k":["\ud83d"]}}]}`, 400, CodeInvalidRequest, `column "metadata": JSON text: invalid UTF-8`},
		{"rollout relationship target", "POST", records, `{"records":[{"id":"n1","relationships":[{"target_id":"\udfff","relation":"r"}]}]}`, 400, CodeInvalidRequest, `column "relationships" at [0].target_id: invalid UTF-8`},
		{"generic id raw", "POST", rows, "{\"rows\":[{\"id\":\"\xed\xa0\x80\",\"n\":1}]}", 400, CodeInvalidRequest, `row 0, column "id": invalid UTF-8`},
		{"generic list item surrogate", "POST", rows, `{"rows":[{"id":"n1","n":1,"tags":["ok","\ud800\u0041"]}]}`, 400, CodeInvalidRequest, `column "tags" at [1]: invalid UTF-8`},
		{"generic key raw", "POST", rows, "{\"rows\":[{\"id\":\"n1\",\"n\":1,\"t\xffgs\":[]}]}", 400, CodeInvalidRequest, `row 0: key "t\xffgs": invalid UTF-8`},
		{"schema column name raw", "POST", generic, "{\"name\":\"g2\",\"schema\":{\"columns\":[[\"id\",{\"type\":\"string\"}],[\"n\xff\",{\"type\":\"int32\"}]]}}", 400, CodeInvalidRequest, `column name "n\xff": invalid UTF-8`},
		{"filter value raw", "GET", records + "?filters=%7B%22dataset%22%3A%22a%FFb%22%7D", nil, 400, CodeInvalidRequest, `column "dataset": invalid UTF-8`},
		{"rollout path id %FF", "GET", records + "/a%FFb", nil, 400, CodeInvalidRequest, `row id "a\xffb" in the path is not valid UTF-8`},
		{"generic path id %FF", "GET", rows + "/%C3", nil, 400, CodeInvalidRequest, "not valid UTF-8"},

		// Numbers the column cannot hold: refused, never rounded to 0 or ±Inf.
		{"generic float64 underflow", "POST", rows, `{"rows":[{"id":"n1","n":1,"score":1e-400}]}`, 400, CodeInvalidRequest, `column "score": number 1e-400 is too small for float64`},
		{"generic float64 overflow", "POST", rows, `{"rows":[{"id":"n1","n":1,"score":1e309}]}`, 400, CodeInvalidRequest, `column "score": number 1e309 is out of range`},
		{"generic int64 overflow", "POST", rows, `{"rows":[{"id":"n1","n":9223372036854775808}]}`, 400, CodeInvalidRequest, `column "n": integer 9223372036854775808 is out of range for int64`},
		{"rollout float32 underflow", "POST", records, `{"records":[{"id":"n1","reward":1e-46}]}`, 400, CodeInvalidRequest, `column "reward": number 1e-46 is too small for float32`},
		{"rollout float32 overflow", "POST", records, `{"records":[{"id":"n1","advantage":1e39}]}`, 400, CodeInvalidRequest, `column "advantage": number 1e39 is out of range for float32`},
		{"rollout logprob underflow", "POST", records, `{"records":[{"id":"n1","output_logprobs":[-1e-50]}]}`, 400, CodeInvalidRequest, `column "output_logprobs" at [0]: number -1e-50 is too small`},
		{"rollout int32 overflow", "POST", records, `{"records":[{"id":"n1","sequence_order":2147483648}]}`, 400, CodeInvalidRequest, `column "sequence_order": integer 2147483648 is out of range for int32`},
		{"rollout int8 overflow", "POST", records, `{"records":[{"id":"n1","loss_mask":[0,128]}]}`, 400, CodeInvalidRequest, `column "loss_mask" at [1]: integer 128 is out of range for int8`},

		// Query parameters.
		{"bad flush", "POST", rows + "?flush=maybe", `{"rows":[{"id":"n1","n":1}]}`, 400, CodeInvalidRequest, "flush"},
		{"negative limit", "GET", records + "?limit=-1", nil, 400, CodeInvalidRequest, "limit"},
		{"non-integer limit", "GET", records + "?limit=ten", nil, 400, CodeInvalidRequest, "limit"},
		{"limit over max", "GET", records + "?limit=10001", nil, 400, CodeInvalidRequest, "10000"},
		{"negative offset", "GET", rows + "?offset=-5", nil, 400, CodeInvalidRequest, "offset"},
		{"non-integer offset", "GET", rows + "?offset=1.5", nil, 400, CodeInvalidRequest, "offset"},
		{"unknown filter key", "GET", records + "?filters=%7B%22reward%22%3A1%7D", nil, 400, CodeInvalidRequest, "reward"},
		{"malformed filters", "GET", records + "?filters=%7Bdataset", nil, 400, CodeInvalidRequest, ""},
		{"mistyped filter", "GET", records + "?filters=%7B%22include_in_training%22%3A%22yes%22%7D", nil, 400, CodeInvalidRequest, "include_in_training"},
		{"filters on generic", "GET", rows + "?filters=%7B%7D", nil, 400, CodeInvalidRequest, "rollout"},

		// Store creation bodies.
		{"generic without schema", "POST", generic, `{"name":"g2"}`, 400, CodeInvalidRequest, "schema"},
		{"generic bad schema", "POST", generic, `{"name":"g2","schema":{"columns":[["v",{"type":"int64"}]]}}`, 400, CodeInvalidRequest, "schema"},
		{"generic unknown type", "POST", generic, `{"name":"g2","schema":{"columns":[["id",{"type":"string"}],["v",{"type":"decimal"}]]}}`, 400, CodeInvalidRequest, `"v"`},
		{"rollout with schema", "POST", rollouts, `{"name":"r2","schema":{}}`, 400, CodeInvalidRequest, "fixed schema"},
		{"create name not a string", "POST", rollouts, `{"name":5}`, 400, CodeInvalidRequest, `"name": expected a string, got number`},
		{"seal_on_add not a bool", "POST", generic, `{"name":"g2","schema":` + apiSpec + `,"seal_on_add":"yes"}`, 400, CodeInvalidRequest, `"seal_on_add": expected a boolean, got string`},
		{"create unknown field", "POST", rollouts, `{"name":"r2","nmae":"x"}`, 400, CodeInvalidRequest, `"nmae"`},
		{"duplicate create", "POST", rollouts, `{"name":"r"}`, 409, CodeAlreadyExists, `Rollout store 'r' already exists`},

		// Body size.
		{"body over the limit", "POST", rows, huge, 413, CodePayloadTooLarge, "4096"},
		{"chunked body over the limit", "POST", rows, io.MultiReader(strings.NewReader(huge)), 413, CodePayloadTooLarge, "4096"},

		// Stores that do not exist (any more).
		{"add to a deleted store", "POST", "/api/v1/generic/gone/rows", `{"rows":[{"id":"n1","n":1}]}`, 404, CodeNotFound, `Generic store 'gone' does not exist`},
		{"flush a deleted store", "POST", "/api/v1/generic/gone/flush", nil, 404, CodeNotFound, `Generic store 'gone' does not exist`},
		{"merge a deleted store", "POST", "/api/v1/generic/gone/merge-wal", nil, 404, CodeNotFound, `Generic store 'gone' does not exist`},
		{"list a deleted store", "GET", "/api/v1/generic/gone/rows", nil, 404, CodeNotFound, `Generic store 'gone' does not exist`},
		{"add to an unknown store", "POST", "/api/v1/rollouts/nope/records", `{"records":[{"id":"n1"}]}`, 404, CodeNotFound, `Rollout store 'nope' does not exist`},
		{"rollout name as generic target", "POST", "/api/v1/internal/merge-wal/generic:r", nil, 404, CodeNotFound, `"r"`},
		{"get a missing generic row", "GET", rows + "/nope", nil, 404, CodeNotFound, `Row 'nope' does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := e.fails(tc.status, tc.code, tc.method, tc.path, tc.body)
			t.Logf("%d %s", tc.status, msg)
			if !strings.Contains(msg, tc.mentions) {
				t.Errorf("message %q does not mention %s", msg, tc.mentions)
			}
			if r := e.state("rollouts", "r"); !reflect.DeepEqual(r, beforeR) {
				t.Errorf("rollout store changed: %d rows, %d pending; was %d rows, %d pending", len(r.rows), r.pending, len(beforeR.rows), beforeR.pending)
			}
			if g := e.state("generic", "g"); !reflect.DeepEqual(g, beforeG) {
				t.Errorf("generic store changed: %d rows, %d pending; was %d rows, %d pending", len(g.rows), g.pending, len(beforeG.rows), beforeG.pending)
			}
		})
	}

	// Nothing was appended unsealed either: no row was acknowledged, and sealing now
	// finds nothing.
	if got := e.count(e.series.AppendedRows, "rollout") + e.count(e.series.AppendedRows, "generic"); got != appended {
		t.Errorf("bad requests acknowledged %d rows", got-appended)
	}
	for _, target := range []struct {
		kind registry.Kind
		name string
	}{{registry.KindRollout, "r"}, {registry.KindGeneric, "g"}} {
		st, release, err := e.stores.Open(context.Background(), target.kind, target.name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.Seal(context.Background())
		release()
		if err != nil || g != nil {
			t.Errorf("%s: seal after the bad requests = %v, %v; want nothing to seal", target.name, g, err)
		}
	}
	// No store was created by a refused create.
	for _, kind := range []string{"rollouts", "generic"} {
		var list struct{ Stores []storeInfo }
		e.ok(http.StatusOK, http.MethodGet, "/api/v1/"+kind, nil, &list)
		if len(list.Stores) != 1 {
			t.Errorf("%s: %d stores after the bad creates, want 1: %+v", kind, len(list.Stores), list.Stores)
		}
	}
}

// A store deleted by another worker is found deleted by this worker's next read
// through its open handle (store.ErrDeleted), and adds through that handle are then
// refused as 404 too, instead of writing into the deleted store's directory.
func TestStoreDeletedByAnotherWorkerIsNotFoundThroughAStaleHandle(t *testing.T) {
	b := objstoretest.Mem(t)
	w1, w2 := newAPIEnv(t, b, "w1", nil), newAPIEnv(t, b, "w2", nil)
	w1.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	w1.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows?flush=true", `{"rows":[{"id":"a","n":1}]}`, nil)
	w2.ok(http.StatusNoContent, http.MethodDelete, "/api/v1/generic/g", nil, nil)

	w1.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/generic/g/rows", nil)
	msg := w1.fails(http.StatusNotFound, CodeNotFound, http.MethodPost, "/api/v1/generic/g/rows", `{"rows":[{"id":"b","n":1}]}`)
	if msg != "Generic store 'g' does not exist" {
		t.Errorf("message %q does not say store g is gone", msg)
	}
	if objs, err := b.List(context.Background(), "generic/g@"); err != nil || len(objs) != 0 {
		t.Errorf("objects under the deleted store: %v, %v", objs, err)
	}
	if got := w1.count(w1.series.AppendedRows, "generic"); got != 1 {
		t.Errorf("appended rows = %d, want only the first add's 1", got)
	}
}

// TestDistinctInvalidIDsAreNotStoredAsOneRow is issue 12's data loss: four adds of
// four distinct ids that are not UTF-8 were each answered 200 and left one row,
// "a\ufffdb". Each is refused now; an id that is valid UTF-8 however it is spelled
// (raw, or as escapes) is stored as its text and found by it.
func TestDistinctInvalidIDsAreNotStoredAsOneRow(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	for _, id := range []string{"\"a\xffb\"", "\"a\xfeb\"", `"a\ud800b"`, `"a\udfffb"`} {
		msg := e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodPost, "/api/v1/rollouts/r/records?flush=true", `{"records":[{"id":`+id+`}]}`)
		if !strings.Contains(msg, `column "id": invalid UTF-8`) {
			t.Errorf("rollout id %s: message %q", id, msg)
		}
		msg = e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodPost, "/api/v1/generic/g/rows?flush=true", `{"rows":[{"id":`+id+`,"n":1}]}`)
		if !strings.Contains(msg, `column "id": invalid UTF-8`) {
			t.Errorf("generic id %s: message %q", id, msg)
		}
	}
	if r, g := e.rows("rollouts", "r"), e.rows("generic", "g"); len(r) != 0 || len(g) != 0 {
		t.Fatalf("refused adds left rows: %s / %s", r, g)
	}

	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/r/records?flush=true", `{"records":[{"id":"\ud83d\ude00-\u00e9"},{"id":"😀-e\u0301"}]}`, nil)
	if r := e.rows("rollouts", "r"); len(r) != 2 {
		t.Fatalf("two distinct ids stored as %d rows: %s", len(r), r)
	}
	var ans struct {
		Record struct{ ID string }
	}
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/rollouts/r/records/%F0%9F%98%80-%C3%A9", nil, &ans)
	if ans.Record.ID != "😀-é" {
		t.Errorf("GET by the UTF-8 of the id found %q", ans.Record.ID)
	}
}

// sendAs posts body with the Content-Type ctype and returns the status and the
// error answer (zero for a success).
func (e *apiEnv) sendAs(path, ctype, body string) (int, ErrorDetail) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("POST %s as %q: answer Content-Type %q", path, ctype, ct)
	}
	var eb ErrorBody
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(out, &eb); err != nil {
			e.t.Fatalf("POST %s as %q: answer %q is not the error shape: %v", path, ctype, out, err)
		}
	}
	return resp.StatusCode, eb.Error
}

// TestBodiesNotLabelledJSONAre415: a body labelled as anything but JSON (a form,
// as curl -d sends; text; another charset) is refused with 415 and a JSON answer
// that names the type to send, and changes nothing; JSON, with or without a UTF-8
// charset, and no label at all are read as JSON.
func TestBodiesNotLabelledJSONAre415(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	// body(n) is the route's request with its n-th store name or row id.
	routes := []struct {
		path string
		body func(n int) string
		ok   int
	}{
		{"/api/v1/rollouts", func(n int) string { return fmt.Sprintf(`{"name":"r%d"}`, n) }, http.StatusCreated},
		{"/api/v1/generic", func(n int) string { return fmt.Sprintf(`{"name":"g%d","schema":%s}`, n, apiSpec) }, http.StatusCreated},
		{"/api/v1/rollouts/r/records?flush=true", func(n int) string { return fmt.Sprintf(`{"records":[{"id":"a%d"}]}`, n) }, http.StatusCreated},
		{"/api/v1/generic/g/rows?flush=true", func(n int) string { return fmt.Sprintf(`{"rows":[{"id":"a%d","n":1}]}`, n) }, http.StatusCreated},
	}
	for _, ctype := range []string{
		"application/x-www-form-urlencoded", "text/plain", "text/plain; charset=utf-8", "multipart/form-data; boundary=x",
		"application/xml", "application/jsonx", "application/json; charset=latin1", "application/json; charset=utf-16", "not a type;;",
	} {
		for _, rt := range routes {
			if strings.HasPrefix(ctype, "multipart/form-data") && strings.HasPrefix(rt.path, "/api/v1/rollouts/r/records") {
				continue // a multipart add, as in the reference (conformance_blob_test.go)
			}
			status, ans := e.sendAs(rt.path, ctype, rt.body(0))
			if status != http.StatusUnsupportedMediaType || ans.Code != CodeUnsupportedMediaType || !strings.Contains(ans.Message, "application/json") {
				t.Errorf("POST %s as %q: %d %+v; want 415 %s naming application/json", rt.path, ctype, status, ans, CodeUnsupportedMediaType)
			}
		}
	}
	for _, kind := range []string{"rollouts", "generic"} {
		var list struct{ Stores []storeInfo }
		e.ok(http.StatusOK, http.MethodGet, "/api/v1/"+kind, nil, &list)
		if len(list.Stores) != 1 {
			t.Errorf("%s: refused creates left %d stores", kind, len(list.Stores))
		}
	}
	if r, g := e.rows("rollouts", "r"), e.rows("generic", "g"); len(r) != 0 || len(g) != 0 {
		t.Fatalf("refused adds left rows: %s / %s", r, g)
	}

	for i, ctype := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8", "application/json;charset=utf8", ""} {
		for _, rt := range routes {
			if status, ans := e.sendAs(rt.path, ctype, rt.body(i+1)); status != rt.ok {
				t.Errorf("POST %s as %q: %d %+v, want %d", rt.path, ctype, status, ans, rt.ok)
			}
		}
	}
	if r := e.rows("rollouts", "r"); len(r) != 5 {
		t.Errorf("%d rows after 5 accepted adds", len(r))
	}
}
