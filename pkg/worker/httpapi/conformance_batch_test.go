package httpapi

// Conformance of the batch row get with the reference system (lance-context),
// whose newer clients (RemoteGenericStore::get_many, ContextClient::get_rows)
// must work against a Tidemark worker unchanged. Written from the reference
// source at github.com/lance-format/lance-context, commit
// 84f5be071644f268caed7de78ff97ac8b42a980a:
//
//   - crates/lance-context-server/src/routes/mod.rs (the route: POST
//     /api/v1/generic/{name}/get-rows, generic stores only);
//   - crates/lance-context-server/src/routes/generic.rs (get_rows: the 400
//     "batch get accepts at most 1024 IDs" before the store is opened, the
//     answer ListRowsResponse {"rows": [...]}, and its test
//     batch_get_round_trips_through_http_and_rust_client: missing ids left
//     out, duplicates once in first-asked order, blobs left out unless named,
//     "columns": ["id"] answering ids alone, an empty batch answering no rows,
//     404 for an absent store);
//   - crates/lance-context-api/src/lib.rs (GetRowsRequest {ids, columns},
//     MAX_BATCH_GET_IDS = 1024 counting duplicates);
//   - crates/lance-context-core/src/generic_store.rs (get_many: an explicit
//     projection always includes id, Some([]) answers {"id"} alone, an unknown
//     column is an error, one consistent read of the base and the WAL).
//
// And generic binary values given as arrays of bytes, from
// crates/lance-context-core/src/generic_codec.rs at commit
// 4f34bd9e1ea6bf3149fb6de731d5bedac812ac7a (as_bytes: a base64 string or an
// array of byte values, each an integer 0-255, in a column or a list element;
// base64 on the way out) and crates/lance-context-server/src/routes/generic.rs
// at commit 0e66d79e22ef1561dcc399df9f602fb285a8c4f3
// (create_list_add_and_read_round_trip adds "blob": [1, 2, 3], reads "AQID").
//
// And the large-blob warning, from crates/lance-context-server/src/routes/rollouts.rs
// and src/config.rs at commit 02969b33db66f06b13201a0d2164eb98fe6a3231
// (observe_blob_sizes, should_log_large_blob: every inline binary_payload of an
// add, JSON or multipart, of at least ROLLOUT_LARGE_BLOB_LOG_BYTES, default
// 16777216, 0 disabling, is logged once at WARN "large inline blob written" with
// experiment, record_id and blob_bytes; no counter, only the rollout_blob_bytes
// histogram).
//
// The e2e suite's TestConformanceOfAWorkerProcessWithTheReferenceAPI drives a
// real worker process through the batch get.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/jsonshape"
	"github.com/tidemark-io/tidemark/testutil/testlog"
)

// batchSpec is a generic schema with a blob column and one that is not.
const batchSpec = `{"columns":[["id",{"type":"string","nullable":false}],["user",{"type":"string"}],` +
	`["img",{"type":"binary","blob":true}],["thumb",{"type":"binary","blob":false}]]}`

// getRows posts a batch get and returns the answer's rows, checking that the
// answer holds "rows" and nothing else (the reference's ListRowsResponse).
func (e *apiEnv) getRows(path string, body any) []json.RawMessage {
	e.t.Helper()
	var ans map[string]json.RawMessage
	e.ok(http.StatusOK, http.MethodPost, path, body, &ans)
	if len(ans) != 1 || ans["rows"] == nil {
		e.t.Fatalf("POST %s: answer keys %v, want only \"rows\"", path, keysOf(ans))
	}
	var rows []json.RawMessage
	if err := json.Unmarshal(ans["rows"], &rows); err != nil || rows == nil {
		e.t.Fatalf("POST %s: rows %s is not an array: %v", path, ans["rows"], err)
	}
	return rows
}

func keysOf(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// rowIDs returns the "id" of each row.
func rowIDs(t *testing.T, rows []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, r := range rows {
		var row struct{ ID string }
		if err := json.Unmarshal(r, &row); err != nil {
			t.Fatalf("row %s: %v", r, err)
		}
		out = append(out, row.ID)
	}
	return out
}

// The reference client's round trip (batch_get_round_trips_through_http_and_rust_client):
// order, duplicates, missing ids, projections, blobs and the error answers.
func TestConformanceBatchGet(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"batch","schema":`+batchSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/batch/rows?flush=true",
		`{"rows":[{"id":"a/雪'","user":"u1","img":"AQID","thumb":"BA=="},{"id":"b","user":"u2"}]}`, nil)
	const path = "/api/v1/generic/batch/get-rows"

	// The rows are read from a pending generation, then from the base table
	// (where a blob not asked for is not even read).
	for _, phase := range []string{"pending", "merged"} {
		if phase == "merged" {
			e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/batch/merge-wal", nil, nil)
		}
		rows := e.getRows(path, `{"ids":["b","missing","a/雪'","b"]}`)
		if got := strings.Join(rowIDs(t, rows), ","); got != "b,a/雪'" {
			t.Fatalf("%s: ids in answer %q, want b,a/雪' (missing left out, duplicates once, first-asked order)", phase, got)
		}
		jsonshape.Check(t, "row b", rows[0], map[string]string{"id": "string", "user": "string"}, "img")
		jsonshape.Check(t, "row a", rows[1], map[string]string{"id": "string", "user": "string", "thumb": "string"}, "img")

		// An explicit projection answers the named columns and id, blobs included
		// when named; ["id"] and [] are existence checks.
		for _, cols := range []string{`["id"]`, `[]`} {
			rows = e.getRows(path, `{"ids":["b","missing","a/雪'","b"],"columns":`+cols+`}`)
			if got, want := fmt.Sprint(toStrings(rows)), `[{"id":"b"} {"id":"a/雪'"}]`; got != want {
				t.Errorf("%s: columns %s: rows %s, want %s", phase, cols, got, want)
			}
		}
		rows = e.getRows(path, `{"ids":["a/雪'"],"columns":["img"]}`)
		if got := jsonshape.Check(t, "img", rows[0], map[string]string{"id": "string", "img": "string"}, "user", "thumb"); string(got["img"]) != `"AQID"` {
			t.Errorf("%s: named blob: %s, want img \"AQID\"", phase, rows[0])
		}
		// "columns": null is no projection, as the reference's Option reads it.
		rows = e.getRows(path, `{"ids":["a/雪'"],"columns":null}`)
		jsonshape.Check(t, "null columns", rows[0], map[string]string{"id": "string", "user": "string", "thumb": "string"}, "img")
	}

	if rows := e.getRows(path, `{"ids":[]}`); len(rows) != 0 {
		t.Errorf("empty batch: %d rows", len(rows))
	}

	// The cap counts duplicates and is checked before the store is opened.
	full := `{"ids":[` + strings.Repeat(`"b",`, MaxBatchGetIDs-1) + `"b"]}`
	if rows := e.getRows(path, full); len(rows) != 1 {
		t.Errorf("%d duplicate ids: %d rows, want 1", MaxBatchGetIDs, len(rows))
	}
	over := `{"ids":[` + strings.Repeat(`"b",`, MaxBatchGetIDs) + `"b"]}`
	for _, p := range []string{path, "/api/v1/generic/absent/get-rows"} {
		refError(t, e, http.MethodPost, p, over, 400, CodeInvalidRequest, "batch get accepts at most 1024 IDs")
	}
	refError(t, e, http.MethodPost, "/api/v1/generic/absent/get-rows", `{"ids":[]}`, 404, CodeNotFound,
		"Generic store 'absent' does not exist")

	// Bad input is a 400 naming the problem, never a 500.
	for body, want := range map[string]string{
		`{"ids":["b"],"columns":["nope"]}`: `columns: no column "nope" in this store's schema`,
		`{"ids":["b"],"columns":["_seq"]}`: `columns: no column "_seq" in this store's schema`,
		`{"columns":["id"]}`:               `request body must be a JSON object with an "ids" array`,
		`{"ids":["b",7]}`:                  `ids[1] must be a string, got 7`,
		`{"ids":["b"],"filter":"x"}`:       "",
		`{"ids":"b"}`:                      "",
		"{\"ids\":[\"\xff\"]}":             `ids[0] is not valid UTF-8`,
	} {
		refError(t, e, http.MethodPost, path, body, 400, CodeInvalidRequest, want)
	}
	// Unknown columns fail even when no id is found.
	refError(t, e, http.MethodPost, path, `{"ids":["missing"],"columns":["nope"]}`, 400, CodeInvalidRequest, "")
}

func toStrings(rows []json.RawMessage) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = string(r)
	}
	return out
}

// A batch reads each id's newest row across the base table and pending
// generations (the reference's batch_get_matches_visible_rows_across_generations_and_merge),
// and, with ?version=, the rows as of that table version.
func TestBatchGetReadsNewestRowsAndVersions(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows?flush=true",
		`{"rows":[{"id":"r1","n":1},{"id":"r2","n":1},{"id":"r3","n":1}]}`, nil)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/g/merge-wal", nil, nil)
	var info struct{ Version uint64 }
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/g", nil, &info)
	// r2 is replaced and r4 added in a pending generation; r3 stays in the base.
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows?flush=true",
		`{"rows":[{"id":"r2","n":2},{"id":"r4","n":2}]}`, nil)

	ns := func(rows []json.RawMessage) string {
		var out []string
		for _, r := range rows {
			var row struct {
				ID string
				N  int
			}
			if err := json.Unmarshal(r, &row); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s=%d", row.ID, row.N))
		}
		return strings.Join(out, ",")
	}
	ids := `{"ids":["r4","r3","r2","r1","r9"]}`
	if got := ns(e.getRows("/api/v1/generic/g/get-rows", ids)); got != "r4=2,r3=1,r2=2,r1=1" {
		t.Errorf("now: %s, want r4=2,r3=1,r2=2,r1=1", got)
	}
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/g/merge-wal", nil, nil)
	if got := ns(e.getRows("/api/v1/generic/g/get-rows", ids)); got != "r4=2,r3=1,r2=2,r1=1" {
		t.Errorf("after the merge: %s, want r4=2,r3=1,r2=2,r1=1", got)
	}
	at := fmt.Sprintf("/api/v1/generic/g/get-rows?version=%d", info.Version)
	if got := ns(e.getRows(at, ids)); got != "r3=1,r2=1,r1=1" {
		t.Errorf("at version %d: %s, want r3=1,r2=1,r1=1", info.Version, got)
	}
	refError(t, e, http.MethodPost, "/api/v1/generic/g/get-rows?version=999", ids, 404, CodeNotFound, "")
}

// An answer larger than a chunk is streamed whole: every row, valid JSON.
func TestBatchGetStreamsLargeAnswers(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+batchSpec+`}`, nil)
	var rows, ids []string
	big := strings.Repeat("x", 1024)
	for i := range MaxBatchGetIDs {
		id := fmt.Sprintf("r%04d", i)
		rows = append(rows, fmt.Sprintf(`{"id":%q,"user":%q}`, id, big))
		ids = append(ids, fmt.Sprintf("%q", id))
	}
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows", `{"rows":[`+strings.Join(rows, ",")+`]}`, nil)
	e.seal(registry.KindGeneric, "g")
	got := e.getRows("/api/v1/generic/g/get-rows", `{"ids":[`+strings.Join(ids, ",")+`]}`)
	if len(got) != MaxBatchGetIDs || len(got)*len(big) < 2*listChunkBytes {
		t.Fatalf("%d rows, want %d spanning several chunks", len(got), MaxBatchGetIDs)
	}
	if want := fmt.Sprintf("r%04d", MaxBatchGetIDs-1); rowIDs(t, got)[MaxBatchGetIDs-1] != want {
		t.Errorf("last row %s, want %s", got[MaxBatchGetIDs-1], want)
	}
}

// A generic binary value given as an array of bytes is stored as the bytes
// (the reference's create_list_add_and_read_round_trip adds "blob": [1, 2, 3]
// and reads "AQID" back); an element that is not a byte is a 400 naming the
// row, the column and the index.
func TestConformanceGenericByteArrays(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+batchSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows?flush=true",
		`{"rows":[{"id":"r1","user":"u1","img":[1,2,3],"thumb":[4]},{"id":"r2","img":"AQID"}]}`, nil)
	for _, id := range []string{"r1", "r2"} {
		_, out := e.do(http.MethodGet, "/api/v1/generic/g/rows/"+id+"?columns=img", nil)
		if got := jsonshape.Check(t, "get "+id, out, map[string]string{"id": "string", "img": "string"}); string(got["img"]) != `"AQID"` {
			t.Errorf("%s: %s, want img \"AQID\"", id, out)
		}
	}
	rows := e.getRows("/api/v1/generic/g/get-rows", `{"ids":["r1"],"columns":["thumb"]}`)
	if got, want := string(rows[0]), `{"id":"r1","thumb":"BA=="}`; got != want {
		t.Errorf("thumb: %s, want %s", got, want)
	}
	refError(t, e, http.MethodPost, "/api/v1/generic/g/rows", `{"rows":[{"id":"r3"},{"id":"r4","img":[1,256]}]}`,
		400, CodeInvalidRequest, `row 1, column "img" at [1]: expected a byte (an integer 0-255), got number 256`)
}

// Every rollout blob of at least the threshold (inclusive), given inline as
// base64 or as a multipart part, is logged once at warn level with its store,
// record id and size; smaller ones are not, and a negative threshold (the
// flag's 0) logs none.
func TestConformanceLargeBlobWarning(t *testing.T) {
	const limit = 1024
	payload := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	for _, tc := range []struct {
		name      string
		threshold int64
		want      []string // "record_id=blob_bytes" of the warnings
	}{
		{"at the threshold", limit, []string{"big=1024", "bigger=5000", "part=2048"}},
		{"disabled", -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testlog.Buffer
			e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) {
				c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				c.LargeBlobLogBytes = tc.threshold
			})
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/r/records", fmt.Sprintf(`{"records":[`+
				`{"id":"small","rollout_id":"t","binary_payload":%q},{"id":"big","rollout_id":"t","binary_payload":%q},`+
				`{"id":"none","rollout_id":"t"},{"id":"bigger","rollout_id":"t","binary_payload":%q}]}`,
				payload(limit-1), payload(limit), payload(5000)), nil)
			body, ctype := multipartBody(t, metadata(`{"id":"part","rollout_id":"t"}`), blobPart{"0", make([]byte, 2*limit)})
			if status, out := e.post("/api/v1/rollouts/r/records", ctype, body, false); status != http.StatusCreated {
				t.Fatalf("multipart add: %d %s", status, out)
			}
			var got []string
			for _, rec := range logs.Records(t, "large inline blob written") {
				if rec[slog.LevelKey] != "WARN" || rec["store"] != "r" {
					t.Errorf("warning %v: want level WARN and store r", rec)
				}
				got = append(got, fmt.Sprintf("%v=%v", rec["record_id"], rec["blob_bytes"]))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("warnings %v, want %v", got, tc.want)
			}
		})
	}
}

// The threshold defaults to the reference's 16 MiB.
func TestLargeBlobThresholdDefault(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	if got := e.srv.cfg.LargeBlobLogBytes; got != 16777216 {
		t.Errorf("default threshold %d, want 16777216", got)
	}
}
