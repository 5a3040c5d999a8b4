package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// arrowAnswer is an answer to a request that asked for Arrow: the decoded stream
// when it is one, the raw body otherwise.
type arrowAnswer struct {
	status int
	header http.Header
	schema *arrow.Schema
	recs   []arrow.RecordBatch
	body   []byte
}

// rows is the number of rows of the stream.
func (a arrowAnswer) rows() int {
	n := 0
	for _, r := range a.recs {
		n += int(r.NumRows())
	}
	return n
}

// arrowDo sends a request with these headers (an "Accept" among them, or a
// ?format= in path) and decodes an Arrow answer with arrow-go's IPC reader.
func (e *apiEnv) arrowDo(method, path string, body string, header http.Header) arrowAnswer {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	a := arrowAnswer{status: resp.StatusCode, header: resp.Header, body: raw}
	if resp.Header.Get("Content-Type") != httpjson.ArrowStreamType {
		return a
	}
	rdr, err := ipc.NewReader(bytes.NewReader(raw))
	if err != nil {
		e.t.Fatalf("%s %s: not an Arrow stream: %v", method, path, err)
	}
	defer rdr.Release()
	a.schema = rdr.Schema()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		rec.Retain()
		a.recs = append(a.recs, rec)
	}
	if err := rdr.Err(); err != nil {
		e.t.Fatalf("%s %s: Arrow stream: %v", method, path, err)
	}
	e.t.Cleanup(func() {
		for _, r := range a.recs {
			r.Release()
		}
	})
	return a
}

// arrowOK is arrowDo of a request that must answer 200 with an Arrow stream.
func (e *apiEnv) arrowOK(method, path, body string) arrowAnswer {
	e.t.Helper()
	a := e.arrowDo(method, path, body, http.Header{"Accept": {httpjson.ArrowStreamType}})
	if a.status != http.StatusOK || a.schema == nil {
		e.t.Fatalf("%s %s: status %d %s, want 200 with an Arrow stream; body %.300s", method, path, a.status, a.header.Get("Content-Type"), a.body)
	}
	return a
}

// jsonRows renders an Arrow answer's rows as the JSON routes do (the same
// encoder: hidden columns, _seq and _cursor, left out; a rollout's metadata as
// its JSON value), decoded for comparison.
func jsonRows(t *testing.T, a arrowAnswer, rollout bool) []any {
	t.Helper()
	var out []any
	for _, rec := range a.recs {
		enc, err := schema.NewRowEncoder(rec.Schema(), rollout)
		if err != nil {
			t.Fatal(err)
		}
		for i := range int(rec.NumRows()) {
			row, err := enc.AppendRow(nil, rec, i)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, exact(t, row))
		}
	}
	return out
}

// decodedRows decodes raw JSON rows for comparison.
func decodedRows(t *testing.T, rows []json.RawMessage) []any {
	t.Helper()
	out := make([]any, 0, len(rows))
	for _, r := range rows {
		out = append(out, exact(t, r))
	}
	return out
}

// sameRows fails unless the Arrow answer's rows are the JSON rows, in order.
func sameRows(t *testing.T, what string, a arrowAnswer, rollout bool, want []json.RawMessage) {
	t.Helper()
	got, w := jsonRows(t, a, rollout), decodedRows(t, want)
	if len(got) != len(w) {
		t.Fatalf("%s: %d Arrow rows, %d JSON rows", what, len(got), len(w))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], w[i]) {
			t.Fatalf("%s: row %d\nArrow %v\nJSON  %v", what, i, got[i], w[i])
		}
	}
}

// seqs returns the _seq of every row of a, by id.
func seqs(t *testing.T, a arrowAnswer) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, rec := range a.recs {
		ids, ss, err := rowkey.Columns(rec)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ids.Len() {
			out[ids.Value(i)] = ss.Value(i)
		}
	}
	return out
}

// readSpec is the generic schema of the Arrow tests: a type of each family,
// and a blob.
const readSpec = `{"columns":[["id",{"type":"string"}],["score",{"type":"float64","nullable":true}],` +
	`["n",{"type":"int64","nullable":false}],["small",{"type":"int32","nullable":true}],` +
	`["tags",{"type":"list","item":{"type":"string"},"nullable":true}],["at",{"type":"timestamp","nullable":true}],` +
	`["ok",{"type":"bool","nullable":true}],["v",{"type":"vector","dim":2,"nullable":true}],` +
	`["img",{"type":"binary","blob":true}]]}`

// arrowStore is a store the Arrow tests read: rows merged in two versions
// (the second overwriting some of the first), and pending rows on top (some
// overwriting merged ones, some new).
type arrowStore struct {
	kind    kindAPI
	path    string // /api/v1/rollouts/<name> or /api/v1/generic/<name>
	rows    string // the rows route
	v1, v2  uint64 // the versions of the two merges
	live    int    // live rows now
	rollout bool
}

// row is the JSON of row i of a store of kind k in round r (a later round
// overwrites an earlier one's row of the same i).
func arrowRow(k kindAPI, i, r int) string {
	id := fmt.Sprintf("row-%04d", i)
	if k.kind == registry.KindRollout {
		return fmt.Sprintf(`{"id":%q,"rollout_id":"ro-%d","dataset":"d%d","sequence_order":%d,"content":"round %d of %d",`+
			`"input_tokens":[%d,%d],"reward":%d.5,"include_in_training":%t,"metadata":{"round":%d,"k":[1,"x"]},`+
			`"relationships":[{"target_id":"t%d","relation":"r","weight":0.25}],"binary_payload":"aGVsbG8=","payload_size":5}`,
			id, i%7, i%3, i, r, i, i, r, r, i%2 == 0, r, i)
	}
	tags := `null`
	if i%4 != 0 {
		tags = fmt.Sprintf(`["a%d","b"]`, r)
	}
	return fmt.Sprintf(`{"id":%q,"score":%d.25,"n":%d,"small":%d,"tags":%s,"at":"2024-05-01T12:00:%02d.123456Z","ok":%t,"v":[%d,0.5],"img":"aGVsbG8="}`,
		id, r, i*10+r, i%100, tags, i%60, i%2 == 0, r)
}

// add adds rows [from, to) of round r to st and seals them.
func (e *apiEnv) addRound(st arrowStore, from, to, r int) {
	e.t.Helper()
	var rows []string
	for i := from; i < to; i++ {
		rows = append(rows, arrowRow(st.kind, i, r))
	}
	e.ok(http.StatusCreated, http.MethodPost, st.rows+"?flush=true", `{"`+st.kind.rows+`":[`+strings.Join(rows, ",")+`]}`, nil)
}

// newArrowStore creates store name of kind k and fills it: rows 0-299 merged
// (v1), rows 0-99 overwritten and merged (v2), rows 50-149 overwritten and
// rows 300-349 added, both pending.
func newArrowStore(e *apiEnv, k kindAPI, name string) arrowStore {
	e.t.Helper()
	st := arrowStore{kind: k, rollout: k.kind == registry.KindRollout}
	target := name
	if st.rollout {
		st.path = "/api/v1/rollouts/" + name
		e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"`+name+`"}`, nil)
	} else {
		st.path = "/api/v1/generic/" + name
		target = "generic:" + name
		e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"`+name+`","schema":`+readSpec+`}`, nil)
	}
	st.rows = st.path + "/" + k.rows
	e.addRound(st, 0, 300, 1)
	st.v1 = e.mergeVersion(target)
	e.addRound(st, 0, 100, 2)
	st.v2 = e.mergeVersion(target)
	e.addRound(st, 50, 150, 3)
	e.addRound(st, 300, 350, 3)
	st.live = 350
	return st
}

// jsonList is the JSON list at path (a rows route with its query): its rows,
// and its next_cursor.
func (e *apiEnv) jsonList(path, key string) ([]json.RawMessage, string) {
	e.t.Helper()
	var ans map[string]json.RawMessage
	e.ok(http.StatusOK, http.MethodGet, path, nil, &ans)
	var rows []json.RawMessage
	if err := json.Unmarshal(ans[key], &rows); err != nil {
		e.t.Fatal(err)
	}
	var next string
	if raw, ok := ans["next_cursor"]; ok {
		_ = json.Unmarshal(raw, &next)
	}
	return rows, next
}

// The stored types and the schema's metadata: an Arrow answer carries the
// table's columns in table order (id first, _seq last), without the blob
// columns a list leaves out.
func checkArrowSchema(t *testing.T, e *apiEnv, st arrowStore, a arrowAnswer, version uint64) {
	t.Helper()
	name := strings.TrimPrefix(strings.TrimPrefix(st.path, "/api/v1/rollouts/"), "/api/v1/generic/")
	h, release, err := e.stores.Open(context.Background(), st.kind.kind, name)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	table := h.Snapshot().Base.ArrowSchema()
	var want []arrow.Field
	for _, f := range table.Fields() {
		if !slices.Contains(h.BlobColumns(), f.Name) {
			want = append(want, f)
		}
	}
	got := a.schema.Fields()
	if len(got) != len(want) {
		t.Fatalf("Arrow schema %s, want the table's columns %v but the blobs", a.schema, want)
	}
	for i := range got {
		if got[i].Name != want[i].Name || !arrow.TypeEqual(got[i].Type, want[i].Type) {
			t.Fatalf("Arrow field %d is %s, want the table's %s", i, got[i], want[i])
		}
	}
	if got[0].Name != rowkey.IDColumn || got[len(got)-1].Name != rowkey.SeqColumn || got[len(got)-1].Type.ID() != arrow.UINT64 {
		t.Fatalf("Arrow schema %s: want id first and _seq (uint64) last", a.schema)
	}
	md := a.schema.Metadata()
	for k, want := range map[string]string{metaStore: name, metaKind: string(st.kind.kind), metaVersion: strconv.FormatUint(version, 10)} {
		if v, ok := md.GetValue(k); !ok || v != want {
			t.Errorf("metadata %s = %q, want %q", k, v, want)
		}
	}
	if v, _ := md.GetValue(metaSeq); !strings.HasPrefix(v, "_seq: ") || !strings.Contains(v, "higher is newer") {
		t.Errorf("metadata %s = %q: want the meaning of _seq", metaSeq, v)
	}
	if got := a.header.Get(httpjson.VersionHeader); got != strconv.FormatUint(version, 10) {
		t.Errorf("%s = %q, want %d", httpjson.VersionHeader, got, version)
	}
}

// arrowKinds are the two store kinds, each with a store filled by newArrowStore.
func arrowKinds(t *testing.T) (*apiEnv, []arrowStore) {
	t.Helper()
	e := newAPIEnv(t, objstoretest.File(t), "w1", nil)
	return e, []arrowStore{newArrowStore(e, rolloutAPI, "ro"), newArrowStore(e, genericAPI, "ge")}
}

func TestArrowListHoldsTheJSONListsRows(t *testing.T) {
	e, stores := arrowKinds(t)
	for _, st := range stores {
		t.Run(string(st.kind.kind), func(t *testing.T) {
			e := e.with(t)
			filter := "filter=" + url.QueryEscape("n >= 100 AND (ok OR small < 30)")
			if st.rollout {
				filter = "filters=" + url.QueryEscape(`{"dataset":"d1"}`)
			}
			for _, q := range []string{"", "?" + filter, "?version=" + strconv.FormatUint(st.v1, 10),
				"?version=" + strconv.FormatUint(st.v2, 10) + "&" + filter, "?source=wal", "?source=wal&" + filter} {
				want, _ := e.jsonList(st.rows+q, st.kind.rows)
				a := e.arrowOK(http.MethodGet, st.rows+q, "")
				sameRows(t, "list "+q, a, st.rollout, want)
				if a.header.Get(httpjson.NextCursorHeader) != "" || a.header.Get(httpjson.CountHeader) != "" {
					t.Errorf("list %s: a full stream has a cursor or count header: %v", q, a.header)
				}
			}
			all := e.arrowOK(http.MethodGet, st.rows, "")
			if all.rows() != st.live {
				t.Fatalf("full stream: %d rows, want %d", all.rows(), st.live)
			}
			checkArrowSchema(t, e, st, all, st.v2)
			v1 := e.arrowOK(http.MethodGet, st.rows+"?version="+strconv.FormatUint(st.v1, 10), "")
			checkArrowSchema(t, e, st, v1, st.v1)
			if v1.rows() != 300 {
				t.Errorf("version %d: %d rows, want 300", st.v1, v1.rows())
			}
			// The pending overwrites are the newest versions: their _seqs are
			// above every merged row's.
			wal := seqs(t, e.arrowOK(http.MethodGet, st.rows+"?source=wal", ""))
			now := seqs(t, all)
			if len(wal) != 150 {
				t.Errorf("source=wal: %d rows, want 150", len(wal))
			}
			for id, s := range wal {
				if now[id] != s {
					t.Errorf("row %s: _seq %d in the full stream, %d pending", id, now[id], s)
				}
			}
		})
	}
}

func TestArrowPagesWalkEveryRowOnceByTheCursorHeader(t *testing.T) {
	e, stores := arrowKinds(t)
	for _, st := range stores {
		t.Run(string(st.kind.kind), func(t *testing.T) {
			e := e.with(t)
			for _, extra := range []string{"", "&version=" + strconv.FormatUint(st.v2, 10), "&source=wal"} {
				full, _ := e.jsonList(st.rows+"?"+strings.TrimPrefix(extra, "&"), st.kind.rows)
				var walked []json.RawMessage
				cursor := ""
				for pages := 0; ; pages++ {
					q := "?limit=37" + extra
					if cursor != "" {
						q += "&cursor=" + cursor
					}
					want, next := e.jsonList(st.rows+q, st.kind.rows)
					a := e.arrowOK(http.MethodGet, st.rows+q, "")
					sameRows(t, "page "+q, a, st.rollout, want)
					if got := a.header.Get(httpjson.NextCursorHeader); got != next {
						t.Fatalf("page %s: %s %q, JSON's next_cursor %q", q, httpjson.NextCursorHeader, got, next)
					}
					if got := a.header.Get(httpjson.CountHeader); got != strconv.Itoa(len(want)) {
						t.Fatalf("page %s: %s %q, want %d", q, httpjson.CountHeader, got, len(want))
					}
					walked = append(walked, want...)
					if cursor = a.header.Get(httpjson.NextCursorHeader); cursor == "" {
						break
					}
					if pages > 20 {
						t.Fatal("the walk does not end")
					}
				}
				if !reflect.DeepEqual(decodedRows(t, walked), decodedRows(t, full)) {
					t.Fatalf("walk%s: %d rows, the full list %d", extra, len(walked), len(full))
				}
			}
			// offset, start_after and limit=0 as in JSON.
			for _, q := range []string{"?limit=20&offset=5", "?limit=15&start_after=row-0120", "?limit=0", "?limit=10000&offset=340"} {
				want, next := e.jsonList(st.rows+q, st.kind.rows)
				a := e.arrowOK(http.MethodGet, st.rows+q, "")
				sameRows(t, "page "+q, a, st.rollout, want)
				if a.header.Get(httpjson.NextCursorHeader) != next {
					t.Errorf("page %s: next cursor %q, JSON's %q", q, a.header.Get(httpjson.NextCursorHeader), next)
				}
			}
		})
	}
}

func TestArrowStorageOrderStreamsTheLiveRowsOnce(t *testing.T) {
	e, stores := arrowKinds(t)
	for _, st := range stores {
		t.Run(string(st.kind.kind), func(t *testing.T) {
			e := e.with(t)
			filter := "filter=" + url.QueryEscape("n >= 100")
			if st.rollout {
				filter = "filters=" + url.QueryEscape(`{"dataset":"d2"}`)
			}
			for _, q := range []string{"", "&" + filter, "&version=" + strconv.FormatUint(st.v1, 10), "&source=wal"} {
				byID, _ := e.jsonList(st.rows+"?"+strings.TrimPrefix(q, "&"), st.kind.rows)
				a := e.arrowOK(http.MethodGet, st.rows+"?order=storage"+q, "")
				jsonStorage, _ := e.jsonList(st.rows+"?order=storage"+q, st.kind.rows)
				want := sortedRows(t, decodedRows(t, byID))
				if got := sortedRows(t, jsonRows(t, a, st.rollout)); !reflect.DeepEqual(got, want) {
					t.Fatalf("order=storage%s: %d Arrow rows, not the %d live rows", q, len(got), len(want))
				}
				if got := sortedRows(t, decodedRows(t, jsonStorage)); !reflect.DeepEqual(got, want) {
					t.Fatalf("JSON order=storage%s: %d rows, not the %d live rows", q, len(got), len(want))
				}
			}
			for _, q := range []string{"limit=5", "cursor=c1.eA", "start_after=a", "offset=0"} {
				msg := e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, st.rows+"?order=storage&"+q+"&format=arrow", nil)
				if !strings.Contains(msg, strings.Split(q, "=")[0]) {
					t.Errorf("order=storage&%s: %q does not name the conflict", q, msg)
				}
			}
			e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, st.rows+"?order=random", nil)
		})
	}
}

// sortedRows orders decoded rows by id.
func sortedRows(t *testing.T, rows []any) []any {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range rows {
		id := r.(map[string]any)["id"].(string)
		if seen[id] {
			t.Fatalf("id %s twice", id)
		}
		seen[id] = true
	}
	out := slices.Clone(rows)
	slices.SortFunc(out, func(a, b any) int {
		return strings.Compare(a.(map[string]any)["id"].(string), b.(map[string]any)["id"].(string))
	})
	return out
}

func TestArrowGetAndBatchGetHoldTheJSONRows(t *testing.T) {
	e, stores := arrowKinds(t)
	ids := []string{"row-0000", "row-0060", "row-0120", "row-0200", "row-0320"} // merged twice, pending over merged, ..., pending only
	for _, st := range stores {
		t.Run(string(st.kind.kind), func(t *testing.T) {
			e := e.with(t)
			for _, q := range []string{"", "?version=" + strconv.FormatUint(st.v1, 10), "?source=wal"} {
				for _, id := range ids {
					_, raw := e.do(http.MethodGet, st.rows+"/"+id+q, nil)
					var want []json.RawMessage
					if st.rollout {
						var ans map[string]json.RawMessage
						if err := json.Unmarshal(raw, &ans); err != nil {
							t.Fatal(err)
						}
						if string(ans["record"]) != "null" {
							want = append(want, ans["record"])
						}
					} else if !strings.Contains(string(raw), `"error"`) {
						want = append(want, raw)
					}
					if len(want) == 0 && !st.rollout {
						e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, withQuery(st.rows+"/"+id+q, "format=arrow"), nil)
						continue
					}
					a := e.arrowOK(http.MethodGet, st.rows+"/"+id+q, "")
					sameRows(t, "get "+id+q, a, st.rollout, want)
					if a.header.Get(httpjson.CountHeader) != strconv.Itoa(len(want)) {
						t.Errorf("get %s%s: count %q", id, q, a.header.Get(httpjson.CountHeader))
					}
				}
			}
			// A missing rollout record is a stream of no rows, with the schema.
			if st.rollout {
				a := e.arrowOK(http.MethodGet, st.rows+"/nope", "")
				checkArrowSchema(t, e, st, a, st.v2)
				if a.rows() != 0 {
					t.Errorf("missing record: %d rows", a.rows())
				}
				return
			}
			e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, st.rows+"/nope?format=arrow", nil)
			// columns= names columns (a blob too).
			for _, cols := range []string{"score,tags", "img", "", " n , at "} {
				q := "?columns=" + url.QueryEscape(cols)
				_, raw := e.do(http.MethodGet, st.rows+"/row-0120"+q, nil)
				a := e.arrowOK(http.MethodGet, st.rows+"/row-0120"+q, "")
				sameRows(t, "get columns="+cols, a, false, []json.RawMessage{raw})
				if last := a.schema.Field(a.schema.NumFields() - 1); last.Name != rowkey.SeqColumn {
					t.Errorf("columns=%s: last column %s, want _seq", cols, last.Name)
				}
			}
			e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, st.rows+"/row-0120?format=arrow&columns=nope", nil)
			e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, st.rows+"/row-0120?format=arrow&columns=_seq", nil)

			// The batch get: found ids in the order first asked, missing ones left out.
			batch := `["row-0320","nope","row-0000","row-0120","row-0000","row-0200"]`
			for _, body := range []string{
				`{"ids":` + batch + `}`,
				`{"ids":` + batch + `,"columns":["score","img"]}`,
				`{"ids":` + batch + `,"columns":["id"]}`,
			} {
				for _, q := range []string{"", "?version=" + strconv.FormatUint(st.v2, 10), "?source=wal"} {
					var ans struct{ Rows []json.RawMessage }
					e.ok(http.StatusOK, http.MethodPost, st.path+"/get-rows"+q, body, &ans)
					a := e.arrowOK(http.MethodPost, st.path+"/get-rows"+q, body)
					sameRows(t, "get-rows "+body+q, a, false, ans.Rows)
				}
			}
			e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodPost, st.path+"/get-rows?format=arrow", `{"ids":["a"],"columns":["nope"]}`)
		})
	}
}

func TestArrowChangesHoldTheJSONChangesAndCursors(t *testing.T) {
	hz := newFixedHorizons()
	e := newAPIEnv(t, objstoretest.File(t), "w1", func(c *ServerConfig) { c.Horizons = hz })
	stores := []arrowStore{newArrowStore(e, rolloutAPI, "ro"), newArrowStore(e, genericAPI, "ge")}
	hz.set(1 << 62)
	for _, st := range stores {
		t.Run(string(st.kind.kind), func(t *testing.T) {
			e := e.with(t)
			filter := "&filter=" + url.QueryEscape("n >= 100")
			if st.rollout {
				filter = "&filters=" + url.QueryEscape(`{"dataset":"d0"}`)
			}
			extras := []string{"", filter}
			if !st.rollout {
				extras = append(extras, "&columns=score,img")
			}
			for _, extra := range extras {
				cursor, total := "", 0
				for pages := 0; ; pages++ {
					q := "?limit=64" + extra
					if cursor != "" {
						q += "&cursor=" + cursor
					}
					var want changesAnswer
					e.ok(http.StatusOK, http.MethodGet, st.path+"/changes"+q, nil, &want)
					a := e.arrowOK(http.MethodGet, st.path+"/changes"+q, "")
					var rows []json.RawMessage
					for _, c := range want.Changes {
						rows = append(rows, c.Row)
					}
					sameRows(t, "changes "+q, a, st.rollout, rows)
					if got := a.header.Get(httpjson.NextCursorHeader); got != want.NextCursor {
						t.Fatalf("changes %s: next cursor %q, JSON's %q", q, got, want.NextCursor)
					}
					if last := a.schema.Field(a.schema.NumFields() - 1); last.Name != cursorColumn || last.Type.ID() != arrow.STRING {
						t.Fatalf("changes: last column %s, want the utf8 %s", last, cursorColumn)
					}
					if seq := a.schema.Field(a.schema.NumFields() - 2); seq.Name != rowkey.SeqColumn {
						t.Fatalf("changes: column before %s is %s, want _seq", cursorColumn, seq.Name)
					}
					var cursors []string
					for _, rec := range a.recs {
						col := rec.Column(int(rec.NumCols()) - 1)
						for i := range col.Len() {
							cursors = append(cursors, col.ValueStr(i))
						}
					}
					for i, c := range want.Changes {
						if cursors[i] != c.Cursor {
							t.Fatalf("changes %s: row %d _cursor %q, JSON's cursor %q", q, i, cursors[i], c.Cursor)
						}
					}
					total += len(want.Changes)
					if len(want.Changes) == 0 {
						break
					}
					cursor = want.NextCursor
					if pages > 20 {
						t.Fatal("the feed does not end")
					}
				}
				if extra == "" && total != st.live {
					t.Errorf("the feed answered %d rows, want %d", total, st.live)
				}
			}
		})
	}
}

func TestArrowFormatAndCompressionNegotiation(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	st := arrowStore{kind: genericAPI, path: "/api/v1/generic/g", rows: "/api/v1/generic/g/rows"}
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+readSpec+`}`, nil)
	e.addRound(st, 0, 50, 1)
	want, _ := e.jsonList(st.rows, "rows")
	for _, tc := range []struct {
		path, accept string
		arrow        bool
	}{
		{"", "", false},
		{"", "*/*", false},
		{"", "application/json", false},
		{"", httpjson.ArrowStreamType, true},
		{"", "Application/Vnd.Apache.Arrow.Stream", true},
		{"", "application/json;q=0.5, " + httpjson.ArrowStreamType, true},
		{"", "application/json, " + httpjson.ArrowStreamType, false},
		{"", httpjson.ArrowStreamType + ";q=0.9, application/json", false},
		{"", httpjson.ArrowStreamType + ", */*;q=0.1", true},
		{"", "*/*, " + httpjson.ArrowStreamType, true},
		{"", httpjson.ArrowStreamType + ";q=0", false},
		{"", httpjson.ArrowStreamType + ";q=bad", false},
		{"", "text/html, " + httpjson.ArrowStreamType + ";compression=zstd;q=0.8", true},
		{"", httpjson.ArrowStreamType + `;x="a,b";compression=lz4`, true},
		{"?format=arrow", "", true},
		{"?format=arrow", "application/json", true},
		{"?format=json", httpjson.ArrowStreamType, false},
		{"?format=arrow&compression=zstd", "", true},
		{"?format=arrow&compression=LZ4", "", true},
		{"?compression=zstd", httpjson.ArrowStreamType + ";compression=lz4", true},
	} {
		h := http.Header{}
		if tc.accept != "" {
			h.Set("Accept", tc.accept)
		}
		a := e.arrowDo(http.MethodGet, st.rows+tc.path, "", h)
		if a.status != http.StatusOK {
			t.Fatalf("%q Accept %q: status %d %s", tc.path, tc.accept, a.status, a.body)
		}
		if got := a.schema != nil; got != tc.arrow {
			t.Errorf("%q Accept %q: Arrow %t, want %t (Content-Type %s)", tc.path, tc.accept, got, tc.arrow, a.header.Get("Content-Type"))
			continue
		}
		if tc.arrow {
			sameRows(t, tc.path+" "+tc.accept, a, false, want)
		}
	}
	for _, q := range []string{"?format=xml", "?format=", "?format=arrow&compression=gzip", "?format=arrow&compression=", "?compression=zstd", "?format=json&compression=lz4"} {
		e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, st.rows+q, nil)
	}
	// A bad compression in Accept is refused as one in the query.
	a := e.arrowDo(http.MethodGet, st.rows, "", http.Header{"Accept": {httpjson.ArrowStreamType + ";compression=snappy"}})
	if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "compression") {
		t.Errorf("Accept with compression=snappy: %d %s", a.status, a.body)
	}
}

// Compressed streams carry compressed buffers that arrow-go's reader decodes.
func TestArrowCompressedStreamsDecode(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	st := arrowStore{kind: genericAPI, path: "/api/v1/generic/g", rows: "/api/v1/generic/g/rows"}
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+readSpec+`}`, nil)
	e.addRound(st, 0, 2000, 1)
	want, _ := e.jsonList(st.rows, "rows")
	plain := e.arrowDo(http.MethodGet, st.rows+"?format=arrow", "", nil)
	for _, codec := range []string{"zstd", "lz4"} {
		for _, h := range []http.Header{nil, {"Accept": {httpjson.ArrowStreamType + ";compression=" + codec}}} {
			path := st.rows
			if h == nil {
				path += "?format=arrow&compression=" + codec
			}
			a := e.arrowDo(http.MethodGet, path, "", h)
			if a.schema == nil {
				t.Fatalf("%s: status %d %s", codec, a.status, a.body)
			}
			sameRows(t, codec, a, false, want)
			if len(a.body) >= len(plain.body) {
				t.Errorf("%s: %d bytes, uncompressed %d", codec, len(a.body), len(plain.body))
			}
		}
	}
}

// A read that fails before anything is written answers its JSON error, Arrow
// asked or not.
func TestArrowReadThatFailsFirstAnswersJSON(t *testing.T) {
	e, stores := arrowKinds(t)
	for _, st := range stores {
		for _, path := range []string{
			st.rows + "?version=999",
			st.rows + "?version=999&limit=5",
			st.rows + "/row-0001?version=999",
			st.rows + "?filters=nope",
			st.rows + "?source=wal&version=1",
			st.path + "x/" + st.kind.rows,
		} {
			a := e.arrowDo(http.MethodGet, path, "", http.Header{"Accept": {httpjson.ArrowStreamType}})
			var eb ErrorBody
			if a.schema != nil || a.header.Get("Content-Type") != "application/json" || json.Unmarshal(a.body, &eb) != nil || eb.Error.Code == "" || a.status < 400 {
				t.Errorf("GET %s: %d %s %.200s, want a JSON error", path, a.status, a.header.Get("Content-Type"), a.body)
			}
		}
	}
	a := e.arrowDo(http.MethodGet, "/api/v1/generic/ge/changes", "", http.Header{"Accept": {httpjson.ArrowStreamType}})
	if a.status != http.StatusServiceUnavailable || a.schema != nil {
		t.Errorf("changes without horizons: %d %.200s", a.status, a.body)
	}
}

// A failure once the stream has started cuts it: the reader sees an error, not
// the end-of-stream marker of a whole answer.
func TestArrowStreamCutAfterItsFirstBatchHasNoEnd(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	sch := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "_seq", Type: arrow.PrimitiveTypes.Uint64}}, nil)
	rec := oneRow(t, sch)
	defer rec.Release()
	for _, fail := range []bool{false, true} {
		mux := http.NewServeMux()
		mux.Handle("GET /x", e.srv.api(func(w http.ResponseWriter, r *http.Request) error {
			return e.srv.serveArrow(w, r, answerFormat{arrow: true}, sch, arrowHeader(1), func(emit func(arrow.RecordBatch) error) error {
				if err := emit(rec); err != nil {
					return err
				}
				if fail {
					return fmt.Errorf("the read failed midway")
				}
				return emit(rec)
			})
		}))
		hs := newTestServer(t, mux)
		resp, err := http.Get(hs + "/x")
		if err != nil {
			t.Fatal(err)
		}
		rdr, err := ipc.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rdr.Next() {
			n++
		}
		err = rdr.Err()
		rdr.Release()
		resp.Body.Close()
		switch {
		case fail && (err == nil || n != 1):
			t.Errorf("a cut stream read as %d batches, error %v: want one batch, then an error", n, err)
		case !fail && (err != nil || n != 2):
			t.Errorf("a whole stream read as %d batches, error %v", n, err)
		}
	}
}

// withQuery adds the parameter pair to path's query.
func withQuery(path, pair string) string {
	if strings.Contains(path, "?") {
		return path + "&" + pair
	}
	return path + "?" + pair
}

// oneRow is a batch of schema sch (an id and a _seq) of one row.
func oneRow(t *testing.T, sch *arrow.Schema) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sch)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("a")
	b.Field(1).(*array.Uint64Builder).Append(1)
	return b.NewRecordBatch()
}

// newTestServer serves h over net/http and returns its URL.
func newTestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}

// with is e reporting to t (a subtest's).
func (e *apiEnv) with(t *testing.T) *apiEnv {
	c := *e
	c.t = t
	return &c
}
