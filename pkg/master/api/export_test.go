package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// An export through the AdminService: its spec is checked where it enters (a
// code naming the field), it is idempotent by the id the client picked, an id
// of another task is ALREADY_EXISTS, and the task answers its spec; a running
// export can be cancelled (asked to stop), a running compact still cannot.
func TestAdminEnqueuesExportsIdempotentlyByID(t *testing.T) {
	e := newAdminEnv(t, nil)
	c, ctx := e.client, e.ctx
	dest := "file://" + t.TempDir()
	spec := &tidemarkv1.ExportSpec{Destination: dest, Columns: []string{"score"}, Filter: "score > 1"}

	_, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:g1"})
	wantCode(t, "export without a spec", err, codes.InvalidArgument, "spec")
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:g1", Export: &tidemarkv1.ExportSpec{Destination: "ftp://x"}})
	wantCode(t, "unknown scheme", err, codes.InvalidArgument, "destination", "ftp")
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:nope", Export: spec})
	wantCode(t, "unregistered store", err, codes.NotFound, "nope")
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "compact", Target: "r1", Export: spec})
	wantCode(t, "a spec with another kind", err, codes.InvalidArgument, "export")
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:g1", Export: spec, Id: "x"})
	wantCode(t, "malformed id", err, codes.InvalidArgument, `"x"`)

	id := uuid.NewString()
	first, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:g1", Export: spec, Id: id})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:g1", Export: spec, Id: id})
	if err != nil || !again.Deduplicated || again.Task.Id != id || first.Deduplicated {
		t.Fatalf("second enqueue with the id: %v, %v; want the first task, deduplicated", again, err)
	}
	if x := again.Task.GetExport(); x.GetDestination() != dest || x.GetFilter() != "score > 1" || len(x.GetColumns()) != 1 {
		t.Errorf("task's spec %v", x)
	}
	other := &tidemarkv1.ExportSpec{Destination: dest + "/other"}
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:g1", Export: other, Id: id})
	wantCode(t, "the id with another spec", err, codes.AlreadyExists, id)
	second, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: "generic:g1", Export: other})
	if err != nil || second.Deduplicated || second.Task.Id == id {
		t.Fatalf("a second export of the store: %v, %v; want a new task", second, err)
	}

	claim, err := e.ts.Claim(ctx, e.lease, tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindExport}})
	if err != nil || claim.Task.ID != id {
		t.Fatalf("claim: %v, %v", claim, err)
	}
	got, err := c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: id})
	if err != nil || got.Task.State != "running" || !got.Task.CancelRequested {
		t.Fatalf("cancel of a running export: %v, %v; want it running with the request", got, err)
	}
}

func TestHTTPEnqueuesAnExportAndAnswersItsProgress(t *testing.T) {
	e := newAdminEnv(t, fanout.StaticDiscovery{{InstanceID: "w1", GRPCAddr: "127.0.0.1:9"}})
	h, err := NewHTTPHandler(HTTPConfig{Admin: e.svc, Tasks: e.ts, Scanner: e.scanner, Discovery: e.svc.cfg.Discovery,
		Workers: workerhttp.New(workerhttp.Config{Discovery: e.svc.cfg.Discovery}), Logger: testLogger(t),
		EtcdCheck: func(context.Context) error { return nil }, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) (int, []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/tasks", bytes.NewBufferString(body)))
		return rec.Code, rec.Body.Bytes()
	}
	dest := "file://" + t.TempDir()
	id := uuid.NewString()
	code, body := post(`{"kind":"export","target":"r1","id":"` + id + `","export":{"destination":"` + dest + `","version":3}}`)
	var ans EnqueueAnswer
	if err := json.Unmarshal(body, &ans); err != nil || code != http.StatusAccepted || ans.ID != id || ans.Kind != tasks.KindExport {
		t.Fatalf("POST export = %d %s", code, body)
	}
	if code, body := post(`{"kind":"export","target":"r1","id":"` + id + `","export":{"destination":"` + dest + `"}}`); code != http.StatusConflict {
		t.Errorf("the id with another spec = %d %s; want 409", code, body)
	}
	if code, body := post(`{"kind":"export","target":"r1"}`); code != http.StatusBadRequest {
		t.Errorf("export without its spec = %d %s; want 400", code, body)
	}

	c, err := e.ts.Claim(e.ctx, e.lease, tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindExport}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ts.UpdateProgress(e.ctx, c, tasks.Progress{Rows: 40, Estimate: 100, Files: 1, Bytes: 4096, Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	var rec TaskRecord
	_, _, body = get(t, h, "GET", "/api/v1/tasks/"+id)
	if err := json.Unmarshal(body, &rec); err != nil || rec.Progress == nil || rec.Progress.Rows != 40 || rec.Progress.UpdatedAt == nil ||
		!bytes.Contains(rec.Export, []byte(`"version":3`)) {
		t.Errorf("task = %s", body)
	}
}
