package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestConformanceOfAWorkerProcessWithTheReferenceAPI drives a real worker process
// the way the reference system's (lance-context) clients do, and decodes every
// answer into the reference's DTOs: fields the reference requires must be there,
// with their types. Written from github.com/lance-format/lance-context,
// crates/lance-context-server/src/routes/rollouts.rs and routes/generic.rs at
// commit 02969b33db66f06b13201a0d2164eb98fe6a3231, and
// crates/lance-context-api/src/lib.rs at commit
// 989a248ebd2da4d0376c44830c456184d331f05e (RolloutStoreInfo, AddRolloutsResponse,
// RolloutRecordDto, GenericStoreInfo, AddRowsResponse). pkg/worker's
// TestConformance* check every route at the handler level.
func TestConformanceOfAWorkerProcessWithTheReferenceAPI(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, nil)
	w := c.startWorker("w1")
	ref := refClient{t: t, base: w.url() + "/api/v1"}

	// Rollout stores: RemoteRolloutStore's calls.
	var info struct {
		Name    *string `json:"name"`
		URI     *string `json:"uri"`
		Version *uint64 `json:"version"`
	}
	ref.call(http.MethodPost, "/rollouts", `{"name":"ref","storage_options":null}`, http.StatusCreated, &info)
	if info.Name == nil || *info.Name != "ref" || info.URI == nil || *info.URI == "" || info.Version == nil {
		t.Fatalf("create answered %+v", info)
	}
	var added struct {
		Version *uint64  `json:"version"`
		IDs     []string `json:"ids"`
		Count   *int     `json:"count"`
	}
	ref.call(http.MethodPost, "/rollouts/ref/records?flush", `{"records":[`+
		`{"id":"a","rollout_id":"r1","sequence_order":0,"role":"user","content_type":"text/plain","content":"2+2?","metadata":{"step":1}},`+
		`{"id":"b","rollout_id":"r1","sequence_order":1,"role":"assistant","content_type":"text/plain","content":"4","reward":1.0}]}`,
		http.StatusCreated, &added)
	if added.Version == nil || !slices.Equal(added.IDs, []string{"a", "b"}) || added.Count == nil || *added.Count != 2 {
		t.Fatalf("add answered %+v", added)
	}
	var list struct {
		Records []rolloutRecordDto `json:"records"`
	}
	ref.call(http.MethodGet, "/rollouts/ref/records", "", http.StatusOK, &list)
	if len(list.Records) != 2 {
		t.Fatalf("listed %d records", len(list.Records))
	}
	for _, r := range list.Records {
		r.check(t)
	}
	var got struct {
		Record *rolloutRecordDto `json:"record"`
	}
	ref.call(http.MethodGet, "/rollouts/ref/records/a", "", http.StatusOK, &got)
	if got.Record == nil || string(got.Record.Metadata) != `{"step":1}` {
		t.Fatalf("get answered %+v", got.Record)
	}
	got.Record.check(t)
	ref.call(http.MethodGet, "/rollouts/ref/records/nope", "", http.StatusOK, &got)
	if got.Record != nil {
		t.Errorf("a missing record answered %+v, want null", got.Record)
	}
	ref.call(http.MethodGet, "/rollouts/ref", "", http.StatusOK, &info)
	if info.Version == nil || *info.Version < 1 {
		t.Errorf("get store answered %+v", info)
	}
	ref.call(http.MethodDelete, "/rollouts/ref", "", http.StatusNoContent, nil)
	ref.refError(http.MethodDelete, "/rollouts/ref", http.StatusNotFound, "NOT_FOUND", "Rollout store 'ref' does not exist")

	// Generic stores: RemoteGenericStore's calls, with the SchemaSpec as serde
	// writes it (every option spelled out, id not first).
	spec := `{"columns":[["text",{"type":"string","large":false,"nullable":true}],["id",{"type":"string","large":false,"nullable":false}],` +
		`["score",{"type":"float64","nullable":true}]]}`
	var ginfo struct {
		Name    string          `json:"name"`
		URI     string          `json:"uri"`
		Version *uint64         `json:"version"`
		Schema  json.RawMessage `json:"schema"`
	}
	ref.call(http.MethodPost, "/generic", `{"name":"gref","schema":`+spec+`,"storage_options":null,"seal_on_add":false}`, http.StatusCreated, &ginfo)
	if ginfo.Version == nil || ginfo.URI == "" || !strings.Contains(string(ginfo.Schema), `["text",{"type":"string","nullable":true}]`) {
		t.Fatalf("create answered %+v %s", ginfo, ginfo.Schema)
	}
	var gadded struct {
		Version *uint64 `json:"version"`
		Count   *int    `json:"count"`
	}
	ref.call(http.MethodPost, "/generic/gref/rows", `{"rows":[{"id":"x","text":"hi"},{"id":"y","score":0.5}]}`, http.StatusCreated, &gadded)
	if gadded.Version == nil || gadded.Count == nil || *gadded.Count != 2 {
		t.Fatalf("add answered %+v", gadded)
	}
	ref.call(http.MethodPost, "/generic/gref/flush", "", http.StatusNoContent, nil)
	var rows struct {
		Rows []map[string]any `json:"rows"`
	}
	ref.call(http.MethodGet, "/generic/gref/rows", "", http.StatusOK, &rows)
	if len(rows.Rows) != 2 {
		t.Fatalf("listed %v", rows.Rows)
	}
	var row map[string]any
	ref.call(http.MethodGet, "/generic/gref/rows/x", "", http.StatusOK, &row)
	if row["id"] != "x" || row["text"] != "hi" {
		t.Errorf("get row answered %v", row)
	}
	ref.refError(http.MethodGet, "/generic/gref/rows/zz", http.StatusNotFound, "NOT_FOUND", "Row 'zz' does not exist")
	// The batch get of newer reference clients (RemoteGenericStore::get_many;
	// routes/generic.rs get_rows at commit 84f5be071644f268caed7de78ff97ac8b42a980a):
	// missing ids left out, duplicates once, in first-asked order.
	var batch struct {
		Rows []map[string]any `json:"rows"`
	}
	ref.call(http.MethodPost, "/generic/gref/get-rows", `{"ids":["y","zz","x","y"]}`, http.StatusOK, &batch)
	if len(batch.Rows) != 2 || batch.Rows[0]["id"] != "y" || batch.Rows[0]["score"] != 0.5 || batch.Rows[1]["text"] != "hi" {
		t.Errorf("batch get answered %v", batch.Rows)
	}
	var idsOnly struct {
		Rows []map[string]any `json:"rows"`
	}
	ref.call(http.MethodPost, "/generic/gref/get-rows", `{"ids":["x"],"columns":["id"]}`, http.StatusOK, &idsOnly)
	if len(idsOnly.Rows) != 1 || len(idsOnly.Rows[0]) != 1 || idsOnly.Rows[0]["id"] != "x" {
		t.Errorf("batch get of ids alone answered %v", idsOnly.Rows)
	}
	var tooMany struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	ref.call(http.MethodPost, "/generic/gref/get-rows", `{"ids":[`+strings.Repeat(`"x",`, 1024)+`"x"]}`, http.StatusBadRequest, &tooMany)
	if tooMany.Error.Code != "INVALID_REQUEST" || tooMany.Error.Message != "batch get accepts at most 1024 IDs" {
		t.Errorf("1025 ids answered %+v", tooMany.Error)
	}
	ref.call(http.MethodDelete, "/generic/gref", "", http.StatusNoContent, nil)
	ref.refError(http.MethodGet, "/generic/gref", http.StatusNotFound, "NOT_FOUND", "Generic store 'gref' does not exist")
}

// rolloutRecordDto is the reference's RolloutRecordDto: the pointer fields are the
// ones it requires (not Option), which a null or a missing key fails to decode.
type rolloutRecordDto struct {
	ID            *string         `json:"id"`
	RolloutID     *string         `json:"rollout_id"`
	ProblemID     *string         `json:"problem_id"`
	SequenceOrder *int32          `json:"sequence_order"`
	Role          *string         `json:"role"`
	CreatedAt     *time.Time      `json:"created_at"`
	ContentType   *string         `json:"content_type"`
	Metadata      json.RawMessage `json:"metadata"`
}

func (r *rolloutRecordDto) check(t *testing.T) {
	t.Helper()
	if r.ID == nil || r.RolloutID == nil || r.ProblemID == nil || r.SequenceOrder == nil || r.Role == nil || r.CreatedAt == nil || r.ContentType == nil {
		t.Errorf("record lacks a field the reference client requires: %+v", *r)
	}
}

// refClient sends requests as the reference client does (JSON bodies, the
// cluster's token).
type refClient struct {
	t    *testing.T
	base string
}

func (c refClient) call(method, path, body string, want int, v any) {
	c.t.Helper()
	a, err := send(&http.Client{Timeout: 30 * time.Second}, method, c.base+path, body)
	if err != nil || a.status != want {
		c.t.Fatalf("%s %s: %d %s %v; want %d", method, path, a.status, a.body, err, want)
	}
	if want == http.StatusNoContent && a.body != "" {
		c.t.Errorf("%s %s: 204 with a body %q", method, path, a.body)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(a.body), v); err != nil {
			c.t.Fatalf("%s %s: %s: %v", method, path, a.body, err)
		}
	}
}

func (c refClient) refError(method, path string, status int, code, message string) {
	c.t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	c.call(method, path, "", status, &e)
	if e.Error.Code != code || e.Error.Message != message {
		c.t.Errorf("%s %s: %+v, want %s %q", method, path, e.Error, code, message)
	}
}
