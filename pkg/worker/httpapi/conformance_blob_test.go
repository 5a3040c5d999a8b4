package httpapi

// Conformance of blobs with the reference system (lance-context): multipart
// rollout adds, the blob download route, the in-flight blob budget and blob
// columns left out of lists. Written from the reference source at
// github.com/lance-format/lance-context:
//
//   - crates/lance-context-server/src/routes/rollouts.rs at commit
//     02969b33db66f06b13201a0d2164eb98fe6a3231 (add_rollouts' Content-Type
//     dispatch and parse_multipart_rollouts: the "metadata" part, binary parts
//     named by record index, the payload_size checks and every 400 wording;
//     fetch_rollout_blob: octet-stream, Content-Length, 404 "Rollout 'x' has no
//     payload"; acquire_blob_budget and load_blob_with_budget: admission before
//     buffering, 503 "server is at its in-flight blob memory limit; retry
//     shortly");
//   - crates/lance-context-server/src/state.rs (BlobBudget: a request larger
//     than the limit is admitted when nothing else is in flight) and
//     crates/lance-context-server/src/error.rs at commit
//     15e81d9373de671b2a2481284eb642af08928943 (Overloaded: 503 OVERLOADED);
//   - the config flag ROLLOUT_MAX_INFLIGHT_BLOB_BYTES (0 disables);
//   - crates/lance-context-server/src/routes/generic.rs at commit
//     02969b33db66f06b13201a0d2164eb98fe6a3231 and
//     crates/lance-context-api/src/schema_spec.rs at commit
//     bad22ae2690dcc6d7fd32147e407e7f9a431bdf2 (a binary column's "blob": true
//     leaves it out of lists and of a get without ?columns=; no multipart and no
//     blob route for generic stores);
//   - crates/lance-context-api/src/lib.rs at commit
//     989a248ebd2da4d0376c44830c456184d331f05e (RolloutRecordDto: binary_payload
//     is skipped when not materialized, so lists and gets leave it out) and
//     crates/lance-context-core/src/rollout_store.rs at commit
//     02969b33db66f06b13201a0d2164eb98fe6a3231 (artifact bytes stored inline,
//     projected out of list-style scans).
//
// The e2e suite's TestConformanceBlobs drives a real worker process through a
// multipart add, a merge and a download.

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/jsonshape"
)

// blobPart is one part of a multipart body: its name ("" for none) and bytes.
type blobPart struct {
	name string
	data []byte
}

// multipartBody writes parts as multipart/form-data and returns the body and
// its Content-Type.
func multipartBody(t testing.TB, parts ...blobPart) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		if p.name == "" {
			h.Set("Content-Disposition", "form-data")
		} else {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, p.name))
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), mw.FormDataContentType()
}

// metadata is a multipart add's first part holding records.
func metadata(records ...string) blobPart {
	return blobPart{"metadata", []byte(`{"records":[` + strings.Join(records, ",") + `]}`)}
}

// post sends body with Content-Type ctype; chunked sends it without a length.
func (e *apiEnv) post(path, ctype string, body []byte, chunked bool) (int, []byte) {
	e.t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = iotest.HalfReader(bytes.NewReader(body)) // not a type NewRequest knows the length of
	}
	req, err := http.NewRequest(http.MethodPost, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// blob is GET .../records/{id}/blob: status, Content-Type, Content-Length
// header and body.
func (e *apiEnv) blob(path string) (status int, ctype, length string, body []byte) {
	e.t.Helper()
	resp, err := http.Get(e.url + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Length"), body
}

// errorOf decodes an error answer, failing the test if it is not one.
func errorOf(t *testing.T, what string, body []byte) ErrorDetail {
	t.Helper()
	var eb ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code == "" {
		t.Fatalf("%s: %q is not the error shape: %v", what, body, err)
	}
	return eb.Error
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// A multipart add stores each part's bytes as its record's binary_payload:
// 201 {version, ids, count}; lists and gets leave binary_payload out; the blob
// route streams the bytes, with the reference's 404s for a record without a
// payload, an absent record and an absent store.
func TestConformanceMultipartAddAndBlobRoute(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"art"}`, nil)
	big := randomBytes(t, 3*blobChunkBytes+17) // several chunks of a download
	small := []byte("\x00\x01\x02trace-bytes")
	body, ctype := multipartBody(t,
		metadata(
			fmt.Sprintf(`{"id":"a0","rollout_id":"r","content_type":"application/octet-stream","payload_size":%d}`, len(big)),
			`{"id":"a1","rollout_id":"r"}`,
			`{"id":"a2","rollout_id":"r","binary_payload":"aW5saW5l"}`,
			`{"id":"a3","rollout_id":"r","binary_payload":"aW5saW5l"}`,
			`{"id":"a4","rollout_id":"r","payload_size":0}`,
		),
		// Parts in any order; a part replaces a payload sent inline.
		blobPart{"3", small}, blobPart{"0", big}, blobPart{"4", nil},
	)
	status, out := e.post("/api/v1/rollouts/art/records?flush=true", ctype, body, false)
	if status != http.StatusCreated {
		t.Fatalf("multipart add: %d %s", status, out)
	}
	ans := jsonshape.Check(t, "multipart add", out, map[string]string{"version": "number", "ids": "array", "count": "number"})
	if string(ans["ids"]) != `["a0","a1","a2","a3","a4"]` || string(ans["count"]) != "5" {
		t.Errorf("multipart add: %s", out)
	}

	// Lists (paged and streamed) and gets leave binary_payload out; its size and
	// the other columns stay.
	for _, path := range []string{"/api/v1/rollouts/art/records", "/api/v1/rollouts/art/records?limit=10"} {
		_, out := e.do(http.MethodGet, path, nil)
		var list struct{ Records []json.RawMessage }
		if err := json.Unmarshal(out, &list); err != nil || len(list.Records) != 5 {
			t.Fatalf("%s: %s %v", path, out, err)
		}
		for _, r := range list.Records {
			jsonshape.Check(t, path, r, rolloutRecordDto, schema.BinaryPayloadColumn)
		}
	}
	_, out = e.do(http.MethodGet, "/api/v1/rollouts/art/records/a0", nil)
	rec := jsonshape.Check(t, "get record", out, map[string]string{"record": "object"})
	if got := jsonshape.Check(t, "get record", rec["record"], rolloutRecordDto, schema.BinaryPayloadColumn); string(got["payload_size"]) != fmt.Sprint(len(big)) {
		t.Errorf("get record: payload_size %s, want %d", got["payload_size"], len(big))
	}

	for id, want := range map[string][]byte{"a0": big, "a2": []byte("inline"), "a3": small, "a4": {}} {
		status, ct, length, got := e.blob("/api/v1/rollouts/art/records/" + id + "/blob")
		if status != http.StatusOK || ct != "application/octet-stream" || length != fmt.Sprint(len(want)) || !bytes.Equal(got, want) {
			t.Errorf("blob %s: %d %q length %q, %d bytes; want 200 octet-stream, %d bytes as sent", id, status, ct, length, len(got), len(want))
		}
	}
	refError(t, e, http.MethodGet, "/api/v1/rollouts/art/records/a1/blob", nil, 404, CodeNotFound, "Rollout 'a1' has no payload")
	refError(t, e, http.MethodGet, "/api/v1/rollouts/art/records/nope/blob", nil, 404, CodeNotFound, "Rollout 'nope' has no payload")
	refError(t, e, http.MethodGet, "/api/v1/rollouts/absent/records/a0/blob", nil, 404, CodeNotFound, "Rollout store 'absent' does not exist")
	if n := e.srv.blobs.inUse(); n != 0 {
		t.Errorf("%d budget bytes still reserved after every request was answered", n)
	}
	if n := testutil.CollectAndCount(e.series.BlobBytes); n != 1 {
		t.Errorf("rollout_blob_bytes: %d series", n)
	}
}

// Every refusal of the multipart parser is the reference's 400 (415 for a type
// the route does not take), and a refused add writes nothing.
func TestConformanceMultipartRefusals(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"art"}`, nil)
	rec := func(id string, extra string) string { return `{"id":"` + id + `","rollout_id":"r"` + extra + `}` }
	for _, tc := range []struct {
		name    string
		parts   []blobPart
		message string // exact, or a prefix ending in ": "
	}{
		{"empty", nil, "multipart body is empty"},
		{"first part not metadata", []blobPart{{"records", []byte(`{"records":[]}`)}}, "first multipart part must be named 'metadata', found 'records'"},
		{"first part unnamed", []blobPart{{"", []byte(`{}`)}}, "first multipart part must be named 'metadata', found '<unnamed>'"},
		{"metadata not JSON", []blobPart{{"metadata", []byte(`{"records":[`)}}, "invalid metadata JSON: "},
		{"metadata without records", []blobPart{{"metadata", []byte(`{}`)}}, "invalid metadata JSON: "},
		{"metadata unknown field", []blobPart{{"metadata", []byte(`{"records":[],"x":1}`)}}, "invalid metadata JSON: "},
		{"part not an index", []blobPart{metadata(rec("a", "")), {"blob", []byte("x")}}, "unexpected multipart part 'blob': expected a record index"},
		{"negative index", []blobPart{metadata(rec("a", "")), {"-1", []byte("x")}}, "unexpected multipart part '-1': expected a record index"},
		{"index without record", []blobPart{metadata(rec("a", "")), {"1", []byte("x")}}, "multipart part '1' has no matching record (1 records supplied)"},
		{"index of an empty batch", []blobPart{metadata(), {"0", []byte("x")}}, "multipart part '0' has no matching record (0 records supplied)"},
		{"part without a name", []blobPart{metadata(rec("a", "")), {"", []byte("x")}}, "multipart part is missing a name"},
		{"duplicate index", []blobPart{metadata(rec("a", "")), {"0", []byte("x")}, {"+0", []byte("y")}}, "duplicate multipart part for record index 0"},
		{"size mismatch", []blobPart{metadata(rec("a", `,"payload_size":3`)), {"0", []byte("hello")}}, "record index 0: payload_size 3 does not match received 5 bytes"},
		{"size without bytes", []blobPart{metadata(rec("a", ""), rec("b", `,"payload_size":3`)), {"0", []byte("x")}}, "record index 1 declares payload_size but no binary part was supplied"},
		{"no records", []blobPart{metadata()}, "records array must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, ctype := multipartBody(t, tc.parts...)
			status, out := e.post("/api/v1/rollouts/art/records?flush=true", ctype, body, false)
			got := errorOf(t, tc.name, out)
			if status != http.StatusBadRequest || got.Code != CodeInvalidRequest {
				t.Fatalf("%d %+v, want 400 %s", status, got, CodeInvalidRequest)
			}
			if prefix, ok := strings.CutSuffix(tc.message, ": "); ok && !strings.HasPrefix(got.Message, prefix+": ") ||
				!ok && got.Message != tc.message {
				t.Errorf("message %q, want the reference's %q", got.Message, tc.message)
			}
		})
	}
	// Malformed framing and a missing boundary.
	for _, tc := range []struct{ ctype, body, prefix string }{
		{"multipart/form-data", "--x\r\n\r\n", "invalid multipart request: "},
		{"multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"records\":[]}", "failed to read metadata part: "},
		{"multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"records\":[{\"id\":\"a\"}]}\r\n--x\r\nbad header line\r\n\r\n", "malformed multipart body: "},
	} {
		status, out := e.post("/api/v1/rollouts/art/records", tc.ctype, []byte(tc.body), false)
		if got := errorOf(t, tc.prefix, out); status != http.StatusBadRequest || !strings.HasPrefix(got.Message, tc.prefix) {
			t.Errorf("%q: %d %+v, want 400 %q...", tc.body, status, got, tc.prefix)
		}
	}
	// A type the route does not take names both it does (Tidemark keeps its 415).
	status, out := e.post("/api/v1/rollouts/art/records", "text/plain", []byte(`{"records":[]}`), false)
	if got := errorOf(t, "text/plain", out); status != http.StatusUnsupportedMediaType ||
		got.Message != "unsupported Content-Type 'text/plain': expected application/json or multipart/form-data" {
		t.Errorf("text/plain: %d %+v", status, got)
	}
	// Generic stores take JSON only, as in the reference.
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	body, ctype := multipartBody(t, blobPart{"metadata", []byte(`{"rows":[]}`)})
	if status, _ := e.post("/api/v1/generic/g/rows", ctype, body, false); status != http.StatusUnsupportedMediaType {
		t.Errorf("multipart generic add: %d, want 415", status)
	}
	e.seal("rollout", "art")
	if rows := e.rows("rollouts", "art"); len(rows) != 0 {
		t.Errorf("refused adds wrote %d records", len(rows))
	}
}

// A blob larger than the body limit is a 413 before it is held in memory, and
// the body limit is what bounds a blob: as a multipart part and inline alike.
func TestMultipartBlobOverBodyLimitIs413(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.MaxBodyBytes = 4 << 10 })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"art"}`, nil)
	body, ctype := multipartBody(t, metadata(`{"id":"a","rollout_id":"r"}`), blobPart{"0", randomBytes(t, 8<<10)})
	for _, chunked := range []bool{false, true} {
		status, out := e.post("/api/v1/rollouts/art/records", ctype, body, chunked)
		if got := errorOf(t, "413", out); status != http.StatusRequestEntityTooLarge || got.Code != CodePayloadTooLarge {
			t.Errorf("chunked=%v: %d %+v, want 413 %s", chunked, status, got, CodePayloadTooLarge)
		}
	}
	body, ctype = multipartBody(t, metadata(`{"id":"a","rollout_id":"r"}`), blobPart{"0", randomBytes(t, 2<<10)})
	if status, out := e.post("/api/v1/rollouts/art/records", ctype, body, true); status != http.StatusCreated {
		t.Errorf("a blob under the limit: %d %s", status, out)
	}
}

// Nothing acknowledged is lost: blobs added by multipart (and inline) are read
// back byte for byte after their generation is merged into the base table,
// through the worker that wrote them and through another one.
func TestBlobRoundTripThroughMerge(t *testing.T) {
	for _, b := range buckets {
		t.Run(b.name, func(t *testing.T) {
			bucket := b.open(t)
			w1 := newAPIEnv(t, bucket, "w1", nil)
			w2 := newAPIEnv(t, bucket, "w2", nil)
			w1.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"rt"}`, nil)
			blobs := map[string][]byte{}
			for i := range 3 {
				var parts []blobPart
				var records []string
				for j := range 3 {
					id := fmt.Sprintf("b%d-%d", i, j)
					blobs[id] = randomBytes(t, 1<<10+i*(32<<10)+j) // 1 KiB .. ~65 KiB
					records = append(records, fmt.Sprintf(`{"id":%q,"rollout_id":"r","payload_size":%d}`, id, len(blobs[id])))
					parts = append(parts, blobPart{fmt.Sprint(j), blobs[id]})
				}
				body, ctype := multipartBody(t, append([]blobPart{metadata(records...)}, parts...)...)
				if status, out := w1.post("/api/v1/rollouts/rt/records?flush=true", ctype, body, false); status != http.StatusCreated {
					t.Fatalf("add %d: %d %s", i, status, out)
				}
			}
			inline := randomBytes(t, 5000)
			w1.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/rt/records?flush=true",
				`{"records":[{"id":"inline","rollout_id":"r","binary_payload":"`+base64.StdEncoding.EncodeToString(inline)+`"}]}`, nil)
			blobs["inline"] = inline
			// b0-0 again: the newest write wins, its blob with it.
			blobs["b0-0"] = []byte("rewritten")
			body, ctype := multipartBody(t, metadata(`{"id":"b0-0","rollout_id":"r"}`), blobPart{"0", blobs["b0-0"]})
			if status, out := w2.post("/api/v1/rollouts/rt/records?flush=true", ctype, body, false); status != http.StatusCreated {
				t.Fatalf("rewrite: %d %s", status, out)
			}

			check := func(stage string) {
				t.Helper()
				for _, e := range []*apiEnv{w1, w2} {
					for id, want := range blobs {
						status, _, _, got := e.blob("/api/v1/rollouts/rt/records/" + id + "/blob")
						if status != http.StatusOK || !bytes.Equal(got, want) {
							t.Errorf("%s: blob %s: %d, %d bytes; want 200 and the %d bytes written", stage, id, status, len(got), len(want))
						}
					}
				}
			}
			check("pending")
			var merged mergeAnswer
			w1.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/rt", nil, &merged)
			w2.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/rt", nil, &merged)
			if st := w1.stats("rollouts", "rt").Stats; st.PendingGenerations != 0 || st.RowCount != int64(len(blobs)) {
				t.Fatalf("after the merges: %+v, want every row in the base table", st)
			}
			check("merged")
		})
	}
}

// The in-flight blob budget answers 503 OVERLOADED in the reference's words,
// before reading an add's body (known length or chunked) and before loading a
// blob, and counts the refusals; once the bytes in flight are released the
// same requests succeed.
func TestBlobBudgetRefusesWith503(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.MaxInflightBlobBytes = 1 << 10 })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"art"}`, nil)
	body, ctype := multipartBody(t, metadata(`{"id":"a","rollout_id":"r"}`), blobPart{"0", []byte("bytes")})
	if status, out := e.post("/api/v1/rollouts/art/records?flush=true", ctype, body, false); status != http.StatusCreated {
		t.Fatalf("add: %d %s", status, out)
	}

	held := e.srv.blobs.tryAcquire(1 << 10) // another request's blob, in flight
	const message = "server is at its in-flight blob memory limit; retry shortly"
	for _, chunked := range []bool{false, true} {
		status, out := e.post("/api/v1/rollouts/art/records?flush=true", ctype, body, chunked)
		if got := errorOf(t, "add", out); status != http.StatusServiceUnavailable || got.Code != CodeOverloaded || got.Message != message {
			t.Errorf("add (chunked=%v) over the budget: %d %+v", chunked, status, got)
		}
	}
	refError(t, e, http.MethodGet, "/api/v1/rollouts/art/records/a/blob", nil, 503, CodeOverloaded, message)
	// A JSON add carries blobs inline, so it is admitted the same way.
	refError(t, e, http.MethodPost, "/api/v1/rollouts/art/records", `{"records":[{"id":"b","rollout_id":"r"}]}`, 503, CodeOverloaded, message)
	if n := testutil.ToFloat64(e.series.BlobBudgetRejections); n != 4 {
		t.Errorf("rollout_blob_budget_rejections_total = %v, want 4", n)
	}
	// The store is still read and 404 says so before the budget is asked.
	refError(t, e, http.MethodGet, "/api/v1/rollouts/absent/records/a/blob", nil, 404, CodeNotFound, "Rollout store 'absent' does not exist")

	held.release()
	if status, _, _, got := e.blob("/api/v1/rollouts/art/records/a/blob"); status != http.StatusOK || string(got) != "bytes" {
		t.Errorf("blob after release: %d %q", status, got)
	}
	if status, out := e.post("/api/v1/rollouts/art/records", ctype, body, true); status != http.StatusCreated {
		t.Errorf("chunked add after release: %d %s", status, out)
	}
	if n := e.srv.blobs.inUse(); n != 0 {
		t.Errorf("%d bytes reserved after every request was answered", n)
	}
}

// A negative MaxInflightBlobBytes (--rollout-max-inflight-blob-bytes 0) is no
// budget at all.
func TestBlobBudgetDisabled(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.MaxInflightBlobBytes = -1 })
	if e.srv.blobs != nil {
		t.Fatal("a negative budget built a budget")
	}
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"art"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/art/records", `{"records":[{"id":"b","rollout_id":"r"}]}`, nil)
}

// The budget's rules, under concurrent use: what is reserved never exceeds the
// limit except by a lone request larger than all of it; shrinking gives bytes
// back; a reservation is released once however often release is called.
func TestBlobBudgetAdmission(t *testing.T) {
	b := newBlobBudget(100)
	big := b.tryAcquire(250) // larger than the limit, nothing in flight: admitted
	if big == nil || b.inUse() != 250 {
		t.Fatalf("a lone oversized request: %v, in use %d", big, b.inUse())
	}
	if b.tryAcquire(1) != nil {
		t.Error("admitted 1 byte beside an oversized request")
	}
	big.shrinkTo(60)
	small := b.tryAcquire(40)
	if small == nil || b.tryAcquire(1) != nil {
		t.Errorf("after shrinking to 60: 40 admitted %v, then 1 more refused", small != nil)
	}
	big.release()
	big.release()
	small.release()
	if b.inUse() != 0 {
		t.Fatalf("in use %d after every release", b.inUse())
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var over []int64
	for range 8 {
		wg.Go(func() {
			for i := range 500 {
				r := b.tryAcquire(int64(10 + i%50))
				if r == nil {
					continue
				}
				if n := b.inUse(); n > 100 {
					mu.Lock()
					over = append(over, n)
					mu.Unlock()
				}
				r.shrinkTo(5)
				r.release()
			}
		})
	}
	wg.Wait()
	if len(over) > 0 || b.inUse() != 0 {
		t.Errorf("reserved beyond the limit: %v; %d left in use", over, b.inUse())
	}
	zero := newBlobBudget(0) // smaller than every request: one at a time
	one := zero.tryAcquire(10)
	if one == nil || zero.tryAcquire(1) != nil {
		t.Errorf("a zero budget: first request admitted %v, then a second refused", one != nil)
	}
	var none *blobBudget
	if r := none.tryAcquire(1 << 40); r == nil {
		t.Error("no budget refused a request")
	} else {
		r.release()
	}
}

// A generic store's binary column declared "blob": true is left out of lists
// and of a get, and returned (base64) by a get whose ?columns= names it; the
// create answer echoes the option.
func TestConformanceGenericBlobColumns(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	spec := `{"columns":[["id",{"type":"string","nullable":false}],["user",{"type":"string"}],` +
		`["img",{"type":"binary","blob":true}],["thumb",{"type":"binary","blob":false}]]}`
	status, out := e.do(http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+spec+`}`)
	if status != http.StatusCreated || !strings.Contains(string(out), `["img",{"type":"binary","blob":true,"nullable":true}]`) {
		t.Fatalf("create: %d %s", status, out)
	}
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/g/rows?flush=true",
		`{"rows":[{"id":"r1","user":"u1","img":"AQID","thumb":"BA=="},{"id":"r2","user":"u2"}]}`, nil)
	// The same answers from a pending generation and, after a merge, from the
	// base table, where a read that leaves a blob out does not read it.
	check := func(stage string) {
		t.Helper()
		for _, path := range []string{"/api/v1/generic/g/rows", "/api/v1/generic/g/rows?limit=5"} {
			_, out := e.do(http.MethodGet, path, nil)
			var list struct{ Rows []json.RawMessage }
			if err := json.Unmarshal(out, &list); err != nil || len(list.Rows) != 2 {
				t.Fatalf("%s: %s", path, out)
			}
			for _, r := range list.Rows {
				jsonshape.Check(t, stage+" "+path, r, map[string]string{"id": "string", "user": "string", "thumb": "string|null"}, "img")
			}
		}
		_, out = e.do(http.MethodGet, "/api/v1/generic/g/rows/r1", nil)
		jsonshape.Check(t, stage+" get", out, map[string]string{"id": "string", "user": "string", "thumb": "string"}, "img")
		_, out = e.do(http.MethodGet, "/api/v1/generic/g/rows/r1?columns=img", nil)
		if got := jsonshape.Check(t, stage+" get img", out, map[string]string{"id": "string", "img": "string"}, "user", "thumb"); string(got["img"]) != `"AQID"` {
			t.Errorf("get img: %s", out)
		}
		_, out = e.do(http.MethodGet, "/api/v1/generic/g/rows/r1?columns=user", nil)
		jsonshape.Check(t, stage+" get user", out, map[string]string{"id": "string", "user": "string"}, "img", "thumb")
		// A filter on the blob column reads it, in a page and in a stream.
		for _, path := range []string{"/api/v1/generic/g/rows?filter=img%20IS%20NULL", "/api/v1/generic/g/rows?limit=5&filter=img%20IS%20NULL"} {
			_, out := e.do(http.MethodGet, path, nil)
			var list struct{ Rows []struct{ ID string } }
			if err := json.Unmarshal(out, &list); err != nil || len(list.Rows) != 1 || list.Rows[0].ID != "r2" {
				t.Errorf("%s %s: %s, want r2 alone", stage, path, out)
			}
		}
	}
	check("pending")
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/g/merge-wal", nil, nil)
	if st := e.stats("generic", "g").Stats; st.PendingGenerations != 0 || st.RowCount != 2 {
		t.Fatalf("after the merge: %+v, want both rows in the base table", st)
	}
	check("merged")
	refError(t, e, http.MethodPost, "/api/v1/generic", `{"name":"g2","schema":{"columns":[["id",{"type":"string","nullable":false}],["n",{"type":"int64","blob":true}]]}}`,
		400, CodeInvalidRequest, "")
}

// multipartSeeds are bodies for FuzzMultipartAdd: valid adds and near misses.
func multipartSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	add := func(parts ...blobPart) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if err := mw.SetBoundary(fuzzBoundary); err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, p.name))
			w, _ := mw.CreatePart(h)
			_, _ = w.Write(p.data)
		}
		_ = mw.Close()
		seeds = append(seeds, buf.Bytes())
	}
	add(metadata(`{"id":"a","rollout_id":"r","payload_size":3}`, `{"id":"b"}`), blobPart{"0", []byte("xyz")})
	add(metadata(`{"id":"a","binary_payload":"AA=="}`), blobPart{"+0", []byte{0, 1}}, blobPart{"0", nil})
	add(metadata(), blobPart{"0", nil})
	add(blobPart{"records", nil})
	add(metadata(`{"id":"a","payload_size":1}`))
	add(metadata(`{"id":"a"}`, `{"id":"b"}`), blobPart{"1", []byte("\r\n--" + fuzzBoundary)}, blobPart{"x", nil})
	return seeds
}

const fuzzBoundary = "fuzzboundary"

// FuzzMultipartAdd feeds arbitrary bodies to the multipart add parser and the
// step that attaches the parts to their records. Properties: a refusal is a
// 400 (or a 413 for too many blob bytes), never a panic or a 500; an accepted
// body names only record indexes that exist, each once, and written back out by
// a standard multipart writer it parses to the same records and bytes; each
// record with a part carries exactly that part's bytes as its binary_payload.
func FuzzMultipartAdd(f *testing.F) {
	for _, s := range multipartSeeds(f) {
		f.Add(s)
	}
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		records, blobs, err := parseMultipartAdd(bytes.NewReader(body), fuzzBoundary)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest {
				t.Fatalf("refusal %v is not a 400", err)
			}
			return
		}
		for idx := range blobs {
			if idx < 0 || idx >= len(records) {
				t.Fatalf("part for record %d of %d", idx, len(records))
			}
		}
		// Written back out, the body parses to the same thing.
		parts := []blobPart{{"metadata", []byte(`{"records":[` + string(bytes.Join(rawBytes(records), []byte(","))) + `]}`)}}
		for _, idx := range slices.Sorted(maps.Keys(blobs)) {
			parts = append(parts, blobPart{fmt.Sprint(idx), blobs[idx]})
		}
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.SetBoundary(fuzzBoundary)
		for _, p := range parts {
			w, _ := mw.CreateFormField(p.name)
			_, _ = w.Write(p.data)
		}
		_ = mw.Close()
		again, blobsAgain, err := parseMultipartAdd(&buf, fuzzBoundary)
		if err != nil {
			t.Fatalf("re-encoded body refused: %v", err)
		}
		if !slices.EqualFunc(records, again, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) || len(blobs) != len(blobsAgain) {
			t.Fatalf("re-encoded body parses to %d records, %d blobs; want %d, %d", len(again), len(blobsAgain), len(records), len(blobs))
		}
		for idx, data := range blobs {
			if !bytes.Equal(blobsAgain[idx], data) {
				t.Fatalf("part %d: %q after re-encoding, was %q", idx, blobsAgain[idx], data)
			}
		}

		rec, err := decodeMultipartRollouts(records, blobs, now)
		if err != nil {
			var ae *apiError
			if !errors.Is(err, schema.ErrInvalid) && !(errors.As(err, &ae) && ae.status < http.StatusInternalServerError) {
				t.Fatalf("decode refusal %v is not a client error", err)
			}
			return
		}
		defer rec.Release()
		payload := rec.Column(rec.Schema().FieldIndices(schema.BinaryPayloadColumn)[0]).(*array.Binary)
		for idx, data := range blobs {
			if payload.IsNull(idx) || !bytes.Equal(payload.Value(idx), data) {
				t.Fatalf("record %d: binary_payload %q, want its part's %q", idx, payload.Value(idx), data)
			}
		}
	})
}

func rawBytes(rows []json.RawMessage) [][]byte {
	out := make([][]byte, len(rows))
	for i, r := range rows {
		out[i] = r
	}
	return out
}

// A download keeps its reservation until the last byte is written: while a
// client is slow to take the bytes the blob stays accounted for, and another
// download that does not fit beside it is refused meanwhile.
func TestBlobDownloadHoldsItsReservationWhileWriting(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.MaxInflightBlobBytes = 64 << 20 })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"art"}`, nil)
	data := randomBytes(t, 3*blobChunkBytes)
	body, ctype := multipartBody(t, metadata(`{"id":"a","rollout_id":"r"}`), blobPart{"0", data})
	if status, out := e.post("/api/v1/rollouts/art/records?flush=true", ctype, body, false); status != http.StatusCreated {
		t.Fatalf("add: %d %s", status, out)
	}
	// A client that takes the first chunk and then stalls until released.
	w := &stallingWriter{header: http.Header{}, started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequest(http.MethodGet, "/api/v1/rollouts/art/records/a/blob", nil)
		e.srv.Handler().ServeHTTP(w, req)
	}()
	<-w.started
	if n := e.srv.blobs.inUse(); n != int64(len(data)) {
		t.Errorf("while writing: %d bytes reserved, want the blob's %d", n, len(data))
	}
	refError(t, e, http.MethodGet, "/api/v1/rollouts/art/records/a/blob", nil, 503, CodeOverloaded, "")
	close(w.release)
	<-done
	if n := e.srv.blobs.inUse(); n != 0 || !bytes.Equal(w.body.Bytes(), data) {
		t.Errorf("after the download: %d bytes reserved, %d of %d bytes written", n, w.body.Len(), len(data))
	}
}

// stallingWriter is a ResponseWriter whose writes after the first wait for
// release.
type stallingWriter struct {
	header  http.Header
	body    bytes.Buffer
	writes  int
	started chan struct{}
	release chan struct{}
}

func (w *stallingWriter) Header() http.Header { return w.header }
func (w *stallingWriter) WriteHeader(int)     {}
func (w *stallingWriter) Write(p []byte) (int, error) {
	if w.writes++; w.writes == 1 {
		close(w.started)
	} else {
		<-w.release
	}
	return w.body.Write(p)
}
