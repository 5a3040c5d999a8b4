package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/auth"
)

// TestConformanceBlobsOfAWorkerProcess drives real worker processes through the
// reference's blob API as its clients use it: a multipart add (a "metadata" part,
// then raw parts named by record index), lists and gets without binary_payload,
// the bytes from GET .../records/{id}/blob through another worker, before and
// after the store is merged, byte for byte, and the reference's 400, 404 and 413
// answers. Written from github.com/lance-format/lance-context,
// crates/lance-context-server/src/routes/rollouts.rs at commit
// 02969b33db66f06b13201a0d2164eb98fe6a3231 (add_rollouts,
// parse_multipart_rollouts, fetch_rollout_blob) and
// crates/lance-context-api/src/lib.rs at commit
// 989a248ebd2da4d0376c44830c456184d331f05e (RolloutRecordDto). pkg/worker's
// conformance_blob_test.go checks every wording and the blob budget's 503 at the
// handler level.
func TestConformanceBlobsOfAWorkerProcess(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, nil)
	w1 := c.startWorkerWith("w1", c.bin.worker, map[string]string{"MAX_BODY_BYTES": "4194304"})
	w2 := c.startWorker("w2")
	ref := refClient{t: t, base: w1.url() + "/api/v1"}
	ref.call(http.MethodPost, "/rollouts", `{"name":"blobs","storage_options":null}`, http.StatusCreated, nil)

	blob := make([]byte, 3<<20) // several 256 KiB frames of a download
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	status, body := postMultipart(t, w1.url()+"/api/v1/rollouts/blobs/records?flush=true",
		fmt.Sprintf(`{"records":[{"id":"shot","rollout_id":"r","content_type":"image/png","payload_size":%d},{"id":"text","rollout_id":"r","content":"no blob"}]}`, len(blob)),
		map[string][]byte{"0": blob})
	var added struct {
		Version *uint64  `json:"version"`
		IDs     []string `json:"ids"`
		Count   *int     `json:"count"`
	}
	if err := json.Unmarshal(body, &added); status != http.StatusCreated || err != nil || added.Count == nil || *added.Count != 2 || added.Version == nil {
		t.Fatalf("multipart add: %d %s", status, body)
	}

	// Another worker lists and gets the records without their bytes.
	ref2 := refClient{t: t, base: w2.url() + "/api/v1"}
	var list struct {
		Records []map[string]json.RawMessage `json:"records"`
	}
	ref2.call(http.MethodGet, "/rollouts/blobs/records", "", http.StatusOK, &list)
	if len(list.Records) != 2 {
		t.Fatalf("listed %d records, want 2", len(list.Records))
	}
	for _, r := range list.Records {
		if _, ok := r["binary_payload"]; ok {
			t.Errorf("a listed record carries binary_payload: %s", r["id"])
		}
	}
	var got struct {
		Record map[string]json.RawMessage `json:"record"`
	}
	ref2.call(http.MethodGet, "/rollouts/blobs/records/shot", "", http.StatusOK, &got)
	if _, ok := got.Record["binary_payload"]; ok || string(got.Record["payload_size"]) != fmt.Sprint(len(blob)) {
		t.Errorf("get: %v, want payload_size %d and no binary_payload", got.Record, len(blob))
	}

	download := func(stage string) {
		t.Helper()
		for _, w := range []*workerProc{w1, w2} {
			status, ctype, data := getBlob(t, w.url()+"/api/v1/rollouts/blobs/records/shot/blob")
			if status != http.StatusOK || ctype != "application/octet-stream" || !bytes.Equal(data, blob) {
				t.Errorf("%s: blob through %s: %d %q, %d bytes; want 200 octet-stream, the %d bytes sent", stage, w.id, status, ctype, len(data), len(blob))
			}
		}
	}
	download("pending")
	// Nothing acknowledged is lost: merged into the base table, the bytes are the same.
	for _, w := range []*workerProc{w1, w2} {
		a, err := send(&http.Client{Timeout: time.Minute}, http.MethodPost, w.url()+"/api/v1/internal/merge-wal/blobs", "")
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("merge through %s: %d %s %v", w.id, a.status, a.body, err)
		}
	}
	download("merged")

	ref2.refError(http.MethodGet, "/rollouts/blobs/records/text/blob", http.StatusNotFound, "NOT_FOUND", "Rollout 'text' has no payload")
	ref2.refError(http.MethodGet, "/rollouts/absent/records/shot/blob", http.StatusNotFound, "NOT_FOUND", "Rollout store 'absent' does not exist")
	status, body = postMultipart(t, w1.url()+"/api/v1/rollouts/blobs/records",
		`{"records":[{"id":"x","rollout_id":"r","payload_size":2}]}`, map[string][]byte{"0": []byte("abc")})
	if status != http.StatusBadRequest || !strings.Contains(string(body), "record index 0: payload_size 2 does not match received 3 bytes") {
		t.Errorf("size mismatch: %d %s", status, body)
	}
	// A blob over the worker's MAX_BODY_BYTES is refused before it is held.
	status, body = postMultipart(t, w1.url()+"/api/v1/rollouts/blobs/records",
		`{"records":[{"id":"big","rollout_id":"r"}]}`, map[string][]byte{"0": make([]byte, 5<<20)})
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "PAYLOAD_TOO_LARGE") {
		t.Errorf("a blob over MAX_BODY_BYTES: %d %s", status, body)
	}
}

// postMultipart POSTs a multipart add (the metadata part, then parts by name)
// with the cluster's token.
func postMultipart(t *testing.T, u, metadata string, parts map[string][]byte) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormField("metadata")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write([]byte(metadata))
	for name, data := range parts {
		fw, err := mw.CreateFormFile(name, name+".bin")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write(data)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, u, &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	auth.SetHeader(req.Header, e2eToken)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// getBlob GETs a blob route: status, Content-Type and the bytes.
func getBlob(t *testing.T, u string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth.SetHeader(req.Header, e2eToken)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), data
}
