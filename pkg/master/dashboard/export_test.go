package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// An operator follows a long export from the lists: a running export shows
// where it writes and how far it got, never the destination's credentials; a
// done one its manifest and feed cursor on its page; the store page's export
// button enqueues one with the destination typed in.
func TestExportTasksRenderWithProgressAndDestination(t *testing.T) {
	e := newEnv(t, nil)
	e.admin.mu.Lock()
	e.admin.tasks = append(e.admin.tasks,
		&tidemarkv1.Task{Id: "0190-export-running", Kind: "export", Target: "demo", State: "running", EnqueuedAt: timestamppb.Now(),
			Export:   &tidemarkv1.ExportSpec{Destination: "s3://alice:hunter2@exports?prefix=nightly/"},
			Progress: &tidemarkv1.TaskProgress{Rows: 1200, Estimate: 5000, Files: 1, Bytes: 3 << 20, Worker: "w1"}},
		&tidemarkv1.Task{Id: "0190-export-done", Kind: "export", Target: "demo", State: "done", EnqueuedAt: timestamppb.Now(),
			FinishedAt: timestamppb.Now(), Detail: "exported 5,000 rows in 2 files (7.0 MiB) of version 12 to file:///x (on w1)",
			Export:   &tidemarkv1.ExportSpec{Destination: "file:///x", Columns: []string{"id", "score"}},
			Exported: &tidemarkv1.ExportResult{Manifest: "file:///x/_manifest.json", Version: 12, Rows: 5000, Files: 2, Bytes: 7 << 20, FeedCursor: "c1.AAAA"}},
	)
	e.admin.mu.Unlock()
	c := e.browser(t)
	e.login(t, c)

	for _, page := range []string{"/ui/stores/demo", "/ui/tasks"} {
		resp, body := get(t, c, e.srv.URL+page)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", page, resp.Status)
		}
		for _, want := range []string{"export to s3://exports?prefix=nightly/: 1,200 of ~5,000 rows, 1 file, 3.0 MiB (on w1)",
			"exported 5,000 rows in 2 files"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %q", page, want)
			}
		}
		if strings.Contains(body, "hunter2") {
			t.Errorf("%s shows the destination's password", page)
		}
	}
	_, store := get(t, c, e.srv.URL+"/ui/stores/demo")
	if !strings.Contains(store, `id="export"`) || !strings.Contains(store, `name="destination"`) {
		t.Error("the store page has no export button with a destination")
	}
	_, done := get(t, c, e.srv.URL+"/ui/tasks/0190-export-done")
	for _, want := range []string{"file:///x/_manifest.json", "c1.AAAA", "columns id, score", "5,000 rows in 2 files"} {
		if !strings.Contains(done, want) {
			t.Errorf("the done export's page lacks %q", want)
		}
	}
	_, running := get(t, c, e.srv.URL+"/ui/tasks/0190-export-running")
	if !strings.Contains(running, "1,200 of ~5,000 rows") || strings.Contains(running, "hunter2") {
		t.Errorf("the running export's page: progress shown %v, password shown %v",
			strings.Contains(running, "1,200 of ~5,000 rows"), strings.Contains(running, "hunter2"))
	}

	post := func(form url.Values) (*http.Response, map[string]any) {
		form.Set("csrf", csrfOf(t, store))
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/ui/stores/demo/tasks", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp, body
	}
	if resp, body := post(url.Values{"kind": {"export"}}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body["error"].(string), "destination") {
		t.Errorf("export without a destination: %s %v; want 400 naming it", resp.Status, body)
	}
	if resp, _ := post(url.Values{"kind": {"export"}, "destination": {"file:///tmp/x"}, "version": {"many"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("export at version \"many\": %s; want 400", resp.Status)
	}
	resp, _ := post(url.Values{"kind": {"export"}, "destination": {"file:///tmp/x"}, "version": {"7"}, "columns": {"score, id"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export button: %s", resp.Status)
	}
	e.admin.mu.Lock()
	got := e.admin.enqueued[len(e.admin.enqueued)-1]
	e.admin.mu.Unlock()
	if x := got.GetExport(); got.GetKind() != "export" || x.GetDestination() != "file:///tmp/x" || x.GetVersion() != 7 ||
		strings.Join(x.GetColumns(), ",") != "score,id" {
		t.Errorf("enqueued %v", got)
	}
}
