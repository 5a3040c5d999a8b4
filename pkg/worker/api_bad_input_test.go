package worker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/registry"
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
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *Config) { c.MaxBodyBytes = badBodyLimit })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/rollouts/r/records?flush=true", `{"records":[{"id":"r1","rollout_id":"x"}]}`, nil)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/g/rows?flush=true", `{"rows":[{"id":"g1","n":1}]}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"gone","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/gone/rows?flush=true", `{"rows":[{"id":"g1","n":1}]}`, nil)
	e.ok(http.StatusOK, http.MethodDelete, "/api/v1/generic/gone", nil, nil)
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
		{"duplicate create", "POST", rollouts, `{"name":"r"}`, 409, CodeAlreadyExists, `"r"`},

		// Body size.
		{"body over the limit", "POST", rows, huge, 413, CodePayloadTooLarge, "4096"},
		{"chunked body over the limit", "POST", rows, io.MultiReader(strings.NewReader(huge)), 413, CodePayloadTooLarge, "4096"},

		// Stores that do not exist (any more).
		{"add to a deleted store", "POST", "/api/v1/generic/gone/rows", `{"rows":[{"id":"n1","n":1}]}`, 404, CodeNotFound, `"gone"`},
		{"flush a deleted store", "POST", "/api/v1/generic/gone/flush", nil, 404, CodeNotFound, `"gone"`},
		{"merge a deleted store", "POST", "/api/v1/generic/gone/merge-wal", nil, 404, CodeNotFound, `"gone"`},
		{"list a deleted store", "GET", "/api/v1/generic/gone/rows", nil, 404, CodeNotFound, `"gone"`},
		{"add to an unknown store", "POST", "/api/v1/rollouts/nope/records", `{"records":[{"id":"n1"}]}`, 404, CodeNotFound, `"nope"`},
		{"rollout name as generic target", "POST", "/api/v1/internal/merge-wal/generic:r", nil, 404, CodeNotFound, `"r"`},
		{"get a missing generic row", "GET", rows + "/nope", nil, 404, CodeNotFound, `"nope"`},
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
	w1.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/g/rows?flush=true", `{"rows":[{"id":"a","n":1}]}`, nil)
	w2.ok(http.StatusOK, http.MethodDelete, "/api/v1/generic/g", nil, nil)

	w1.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/generic/g/rows", nil)
	msg := w1.fails(http.StatusNotFound, CodeNotFound, http.MethodPost, "/api/v1/generic/g/rows", `{"rows":[{"id":"b","n":1}]}`)
	if !strings.Contains(msg, `"g"`) || !(strings.Contains(msg, "deleted") || strings.Contains(msg, "not found")) {
		t.Errorf("message %q does not say store \"g\" is gone", msg)
	}
	if objs, err := b.List(context.Background(), "generic/g/"); err != nil || len(objs) != 0 {
		t.Errorf("objects under the deleted store: %v, %v", objs, err)
	}
	if got := w1.count(w1.series.AppendedRows, "generic"); got != 1 {
		t.Errorf("appended rows = %d, want only the first add's 1", got)
	}
}
