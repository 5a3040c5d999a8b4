package api

// Conformance of the master's HTTP routes with the reference system's master
// (lance-context), whose UI and clients must work against a Tidemark master
// unchanged. Written from the reference source at
// github.com/lance-format/lance-context:
//
//   - crates/lance-context-master/src/routes.rs at commit
//     1e6f4c0756c2cd58252139cb6ca215276d17c0e0 (the router; list_experiments with
//     search/limit/offset, default limit 50; get_experiment with fresh and its two
//     404 wordings, "experiment 'x' not found in stats" and "experiment 'x' does
//     not exist"; rescan's {"scanned":n}; enqueue_task's 202 and its 404 for an
//     unknown target; get_task's "task 'x' not found");
//   - crates/lance-context-api/src/lib.rs at commit
//     989a248ebd2da4d0376c44830c456184d331f05e (ExperimentSummary and its Unix
//     millisecond timestamps, ExperimentDetail flattening it, ExperimentListResponse,
//     ExperimentRecordsResponse {records,has_more,limit,offset,source}, TaskRecord
//     with Unix millisecond timestamps and its optional fields left out,
//     EnqueueTaskRequest, TaskListResponse {tasks,total,limit,offset} newest first);
//   - crates/lance-context-master/ui/src/api.ts at commit
//     0b03cbb3bf17f1a5e37754385d5d9a8d7f2e1112 (the query parameters the UI sends:
//     tasks' limit/offset, records' limit/offset/source and filters);
//   - crates/lance-context-master/src/stats_store.rs at commit
//     0b03cbb3bf17f1a5e37754385d5d9a8d7f2e1112 (search is a case-sensitive
//     substring of the name; rows in name order).
//
// Deliberate differences: errors are {"error":{"code","message"}} as on the
// worker (the reference master answers {"error":"message"}); a malformed body or
// an unknown kind is a 400 (axum answers 422); records are read through a worker,
// which serves source=fragments (a read at the store's version) and source=all,
// but not the pending rows alone (wal is a 400 naming why). Where
// Tidemark answers more, the extra fields sit beside the reference's; these tests
// check the reference's fields, their JSON types and the keys it leaves out. The
// e2e suite's TestConformanceOfAMasterProcess drives real processes.

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
	"github.com/tidemark-io/tidemark/testutil/jsonshape"
)

const conformanceToken = "conformance-token-0123456789abcdef"

// The reference's TaskRecord fields and ExperimentSummary fields, with their JSON
// types.
var (
	refTask       = map[string]string{"id": "string", "kind": "string", "target": "string", "state": "string", "enqueued_at": "number"}
	refExperiment = map[string]string{"name": "string", "uri": "string", "row_count": "number", "fragment_count": "number",
		"last_updated": "number", "pending_wal_generations": "number", "total_compactions": "number", "scanned_at": "number"}
)

// confEnv is a master's HTTP API over an embedded etcd, with a real worker
// serving the data API on the same bucket.
type confEnv struct {
	*adminEnv
	t       *testing.T
	master  string       // base URL of the master's HTTP API
	worker  string       // base URL of the worker's HTTP API
	workers atomic.Value // []Worker: what discovery answers
}

func newConfEnv(t *testing.T) *confEnv {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	e := &confEnv{t: t}
	// The worker writes shard w2: newAdminEnv created the stores as w1.
	e.adminEnv = newAdminEnv(t, discoveryFunc(func(context.Context) ([]fanout.Worker, error) { return e.workers.Load().([]fanout.Worker), nil }))
	ss := store.NewStores(store.Config{Bucket: e.bucket, Shard: "w2", Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	reg := prometheus.NewRegistry()
	ws, err := httpapi.NewServer(httpapi.ServerConfig{InstanceID: "w2", Logger: quiet, Metrics: reg, Stores: ss,
		Merger: merge.New(merge.Config{Logger: quiet}), Series: httpapi.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	whs := httptest.NewServer(ws.Handler())
	t.Cleanup(whs.Close)
	e.worker = whs.URL
	u, _ := url.Parse(whs.URL)
	e.workers.Store([]fanout.Worker{{InstanceID: "w2", GRPCAddr: "127.0.0.1:9", HTTPAddr: u.Host}})

	tokens, err := auth.NewTokens("test", conformanceToken)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHTTPHandler(HTTPConfig{Admin: e.svc, Tasks: e.ts, Scanner: e.scanner, Discovery: e.svc.cfg.Discovery,
		Workers:   workerhttp.New(workerhttp.Config{Discovery: e.svc.cfg.Discovery}),
		EtcdCheck: func(context.Context) error { return nil }, Logger: testLogger(t), DataURL: "mem://conformance",
		Auth: auth.NewGuard(auth.GuardConfig{Tokens: tokens})})
	if err != nil {
		t.Fatal(err)
	}
	mhs := httptest.NewServer(h)
	t.Cleanup(mhs.Close)
	e.master = mhs.URL
	return e
}

// do sends body (JSON text, or "") to base+path with the token (unless
// anonymous) and returns the status and the answer.
func (e *confEnv) do(base, method, path, body string, anonymous bool) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if !anonymous {
		auth.SetHeader(req.Header, conformanceToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// ok calls the master and fails unless it answers status with a JSON body.
func (e *confEnv) ok(status int, method, path, body string) []byte {
	e.t.Helper()
	got, out := e.do(e.master, method, path, body, false)
	if got != status {
		e.t.Fatalf("%s %s = %d %s, want %d", method, path, got, out, status)
	}
	return out
}

// refError checks an error answer: status, {"error":{"code","message"}}, and a
// message containing part.
func (e *confEnv) refError(method, path, body string, status int, code, part string) {
	e.t.Helper()
	got, out := e.do(e.master, method, path, body, false)
	var eb ErrorBody
	if err := json.Unmarshal(out, &eb); err != nil || got != status || eb.Error.Code != code || !strings.Contains(eb.Error.Message, part) {
		e.t.Errorf("%s %s = %d %s; want %d {\"error\":{\"code\":%q,\"message\":...%q...}}", method, path, got, out, status, code, part)
	}
}

// checkTask checks a task's reference shape: the fields it has, the ones a
// queued task leaves out, and an enqueued_at in Unix milliseconds.
func checkTask(t *testing.T, what string, raw []byte) TaskRecord {
	t.Helper()
	jsonshape.Check(t, what, raw, refTask, "started_at", "finished_at", "error", "detail", "depends_on")
	var task TaskRecord
	if err := json.Unmarshal(raw, &task); err != nil {
		t.Fatal(err)
	}
	if now := time.Now().UnixMilli(); task.EnqueuedAt < now-time.Hour.Milliseconds() || task.EnqueuedAt > now+time.Minute.Milliseconds() {
		t.Errorf("%s: enqueued_at %d is not a recent Unix millisecond time (now %d)", what, task.EnqueuedAt, now)
	}
	return task
}

func TestConformanceTaskRoutesAnswerAsTheReference(t *testing.T) {
	e := newConfEnv(t)

	// POST /api/v1/tasks: 202 with the TaskRecord; a repeat is the same task.
	var first TaskRecord
	for i, target := range []string{"r1", "generic:g1", "r1"} {
		kind := []string{"merge_wal", "compact", "verify"}[i]
		out := e.ok(http.StatusAccepted, http.MethodPost, "/api/v1/tasks", `{"kind":"`+kind+`","target":"`+target+`"}`)
		task := checkTask(t, "enqueue", out)
		if string(task.Kind) != kind || task.Target.String() != target || task.State != "queued" {
			t.Errorf("enqueue %s on %s answered %s", kind, target, out)
		}
		if i == 0 {
			first = task
		}
	}
	out := e.ok(http.StatusAccepted, http.MethodPost, "/api/v1/tasks", `{"kind":"merge_wal","target":"r1","depends_on":[]}`)
	if again := checkTask(t, "repeated enqueue", out); again.ID != first.ID || !strings.Contains(string(out), `"deduplicated":true`) {
		t.Errorf("a repeated enqueue answered %s, want the live task %s", out, first.ID)
	}
	e.refError(http.MethodPost, "/api/v1/tasks", `{"kind":"compact","target":"nope"}`, 404, CodeNotFound, "experiment 'nope' does not exist")
	e.refError(http.MethodPost, "/api/v1/tasks", `{"kind":"defrag","target":"r1"}`, 400, CodeInvalidRequest, `"defrag"`)
	e.refError(http.MethodPost, "/api/v1/tasks", `{"target":"r1"}`, 400, CodeInvalidRequest, "kind is required")
	e.refError(http.MethodPost, "/api/v1/tasks", `{"kind":"compact","target":"r1","priority":1}`, 400, CodeInvalidRequest, "priority")
	e.refError(http.MethodPost, "/api/v1/tasks", `{"kind":`, 400, CodeInvalidRequest, "request body")
	e.refError(http.MethodPost, "/api/v1/tasks", ``, 400, CodeInvalidRequest, "empty")
	e.refError(http.MethodPost, "/api/v1/tasks", `{"kind":"compact","target":"a/b"}`, 400, CodeInvalidRequest, "a/b")
	if got, _ := e.do(e.master, http.MethodPost, "/api/v1/tasks", `{"kind":"compact","target":"r1"}`, true); got != http.StatusUnauthorized {
		t.Errorf("an enqueue without the token answered %d, want 401", got)
	}

	// GET /api/v1/tasks: {tasks,total,limit,offset}, newest first, default limit 50.
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/tasks", "")
	page := jsonshape.Check(t, "tasks", out, map[string]string{"tasks": "array", "total": "number", "limit": "number", "offset": "number"}, "next_page_token")
	var list TaskPage
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	if list.Total != 3 || list.Limit != DefaultTaskPage || list.Offset != 0 || len(list.Tasks) != 3 {
		t.Fatalf("tasks = %s, want all 3 with limit 50", out)
	}
	var raws []json.RawMessage
	_ = json.Unmarshal(page["tasks"], &raws)
	for _, raw := range raws {
		checkTask(t, "listed task", raw)
	}
	if !slices.IsSortedFunc(list.Tasks, func(a, b TaskRecord) int { return strings.Compare(b.ID, a.ID) }) || list.Tasks[2].ID != first.ID {
		t.Errorf("tasks are not newest first: %s", out)
	}
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/tasks?limit=1&offset=1", "")
	list = TaskPage{}
	if err := json.Unmarshal(out, &list); err != nil || list.Total != 3 || list.Limit != 1 || list.Offset != 1 ||
		len(list.Tasks) != 1 || list.Tasks[0].Kind != "compact" {
		t.Errorf("tasks?limit=1&offset=1 = %s, want the compact task of 3", out)
	}
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/tasks?limit=0", "")
	if !strings.Contains(string(out), `"tasks":[]`) || !strings.Contains(string(out), `"total":3`) {
		t.Errorf("tasks?limit=0 = %s, want no tasks and the total", out)
	}
	// The page token walks beside limit/offset.
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/tasks?limit=2", "")
	list = TaskPage{}
	_ = json.Unmarshal(out, &list)
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/tasks?limit=2&page_token="+list.NextPageToken, "")
	list = TaskPage{}
	if err := json.Unmarshal(out, &list); err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != first.ID || list.NextPageToken != "" {
		t.Errorf("second page by token = %s, want the first task alone", out)
	}
	e.refError(http.MethodGet, "/api/v1/tasks?offset=-1", "", 400, CodeInvalidRequest, "offset")
	e.refError(http.MethodGet, "/api/v1/tasks?offset=1&page_token="+first.ID, "", 400, CodeInvalidRequest, "not both")
	e.refError(http.MethodGet, "/api/v1/tasks?page_token=xyz", "", 400, CodeInvalidRequest, "xyz")

	// GET /api/v1/tasks/{id}.
	checkTask(t, "get task", e.ok(http.StatusOK, http.MethodGet, "/api/v1/tasks/"+first.ID, ""))
	missing := "0190b5a4-0000-7000-8000-000000000000"
	e.refError(http.MethodGet, "/api/v1/tasks/"+missing, "", 404, CodeNotFound, "task '"+missing+"' not found")

	// A finished task carries started_at and finished_at in Unix milliseconds.
	if _, err := e.ts.Cancel(e.ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/tasks/"+first.ID, "")
	obj := jsonshape.Check(t, "cancelled task", out, map[string]string{"finished_at": "number", "error": "string", "state": "string"})
	if string(obj["state"]) != `"failed"` {
		t.Errorf("cancelled task = %s", out)
	}
}

func TestConformanceExperimentRoutesAnswerAsTheReference(t *testing.T) {
	e := newConfEnv(t)

	// POST /api/v1/rescan: {"scanned":n}.
	out := e.ok(http.StatusOK, http.MethodPost, "/api/v1/rescan", "")
	jsonshape.Check(t, "rescan", out, map[string]string{"scanned": "number"})
	if !strings.Contains(string(out), `"scanned":2`) {
		t.Errorf("rescan = %s, want both stores scanned", out)
	}
	if got, _ := e.do(e.master, http.MethodPost, "/api/v1/rescan", "", true); got != http.StatusUnauthorized {
		t.Errorf("a rescan without the token answered %d, want 401", got)
	}

	// GET /api/v1/experiments: {experiments,total}, name order, default limit 50.
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/experiments", "")
	obj := jsonshape.Check(t, "experiments", out, map[string]string{"experiments": "array", "total": "number"})
	var list ExperimentList
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	if list.Total != 2 || len(list.Experiments) != 2 || list.Experiments[0].Name != "generic:g1" || list.Experiments[1].Name != "r1" || list.Limit != 50 {
		t.Fatalf("experiments = %s", out)
	}
	var raws []json.RawMessage
	_ = json.Unmarshal(obj["experiments"], &raws)
	for _, raw := range raws {
		jsonshape.Check(t, "experiment", raw, refExperiment, "last_compaction")
	}
	if want := "mem://conformance/rollout/r1"; !strings.HasPrefix(list.Experiments[1].URI, want) {
		t.Errorf("uri %q, want the table directory under DATA_URL (%s…)", list.Experiments[1].URI, want)
	}
	if now := time.Now().UnixMilli(); list.Experiments[1].ScannedAt < now-time.Hour.Milliseconds() || list.Experiments[1].ScannedAt > now+time.Minute.Milliseconds() {
		t.Errorf("scanned_at %d is not a Unix millisecond time near %d", list.Experiments[1].ScannedAt, now)
	}
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/experiments?search=g1", "")
	list = ExperimentList{}
	if err := json.Unmarshal(out, &list); err != nil || list.Total != 1 || len(list.Experiments) != 1 || list.Experiments[0].Name != "generic:g1" {
		t.Errorf("experiments?search=g1 = %s", out)
	}
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/experiments?search=R1", "")
	if !strings.Contains(string(out), `"experiments":[]`) || !strings.Contains(string(out), `"total":0`) {
		t.Errorf("experiments?search=R1 = %s, want none: the search is case-sensitive", out)
	}
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/experiments?limit=1&offset=1", "")
	list = ExperimentList{}
	if err := json.Unmarshal(out, &list); err != nil || list.Total != 2 || len(list.Experiments) != 1 || list.Experiments[0].Name != "r1" {
		t.Errorf("experiments?limit=1&offset=1 = %s", out)
	}
	e.refError(http.MethodGet, "/api/v1/experiments?limit=x", "", 400, CodeInvalidRequest, "limit")

	// A done compaction shows in last_compaction and total_compactions.
	task, _, err := e.ts.Enqueue(e.ctx, "compact", registry.MustParseTarget("r1"))
	if err != nil {
		t.Fatal(err)
	}
	claimDone(t, e.adminEnv, task.ID)

	// GET /api/v1/experiments/{name}: the summary, flattened.
	out = e.ok(http.StatusOK, http.MethodGet, "/api/v1/experiments/r1", "")
	want := map[string]string{"last_compaction": "number"}
	for k, v := range refExperiment {
		want[k] = v
	}
	jsonshape.Check(t, "experiment r1", out, want, "summary")
	if !strings.Contains(string(out), `"total_compactions":1`) {
		t.Errorf("experiment r1 = %s, want its one compaction", out)
	}
	jsonshape.Check(t, "fresh experiment", e.ok(http.StatusOK, http.MethodGet, "/api/v1/experiments/generic:g1?fresh=true", ""), refExperiment)
	e.refError(http.MethodGet, "/api/v1/experiments/nope", "", 404, CodeNotFound, "experiment 'nope' not found in stats")
	e.refError(http.MethodGet, "/api/v1/experiments/nope?fresh=true", "", 404, CodeNotFound, "experiment 'nope' does not exist")
	e.refError(http.MethodGet, "/api/v1/experiments/r1?fresh=maybe", "", 400, CodeInvalidRequest, "fresh")
}

func TestConformanceRecordsAreReadThroughAWorker(t *testing.T) {
	e := newConfEnv(t)
	if got, out := e.do(e.worker, http.MethodPost, "/api/v1/rollouts/r1/records?flush=true", `{"records":[`+
		`{"id":"a","rollout_id":"x","sequence_order":0,"content":"one"},`+
		`{"id":"b","rollout_id":"x","sequence_order":1,"content":"two","include_in_training":true},`+
		`{"id":"c","rollout_id":"y","sequence_order":0,"content":"three"}]}`, true); got/100 != 2 {
		t.Fatalf("add through the worker = %d %s", got, out)
	}
	// a, b, c merged into the base table; d pending in a generation.
	if got, out := e.do(e.worker, http.MethodPost, "/api/v1/internal/merge-wal/r1", "", true); got != http.StatusOK {
		t.Fatalf("merge through the worker = %d %s", got, out)
	}
	if got, out := e.do(e.worker, http.MethodPost, "/api/v1/rollouts/r1/records?flush=true",
		`{"records":[{"id":"d","rollout_id":"y","sequence_order":1,"content":"four"}]}`, true); got/100 != 2 {
		t.Fatalf("add through the worker = %d %s", got, out)
	}
	refRecords := map[string]string{"records": "array", "has_more": "bool", "limit": "number", "offset": "number", "source": "string"}
	records := func(path string) ExperimentRecords {
		t.Helper()
		out := e.ok(http.StatusOK, http.MethodGet, path, "")
		jsonshape.Check(t, path, out, refRecords)
		var got ExperimentRecords
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	ids := func(r ExperimentRecords) string {
		var out []string
		for _, raw := range r.Records {
			var rec struct{ ID string }
			_ = json.Unmarshal(raw, &rec)
			out = append(out, rec.ID)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	if r := records("/api/v1/experiments/r1/records?limit=2&offset=0&source=all"); len(r.Records) != 2 || !r.HasMore ||
		r.Limit != 2 || r.Offset != 0 || r.Source != "all" || r.Worker != "w2" {
		t.Errorf("first page of 2 = %+v", r)
	}
	if r := records("/api/v1/experiments/r1/records?limit=2&offset=2&source=all"); ids(r) != "c,d" || r.HasMore {
		t.Errorf("second page of 2 = %s %+v", ids(r), r)
	}
	// The default source is the base table alone, as in the reference.
	if r := records("/api/v1/experiments/r1/records"); ids(r) != "a,b,c" || r.HasMore || r.Source != "fragments" || r.Limit != DefaultRecordPage {
		t.Errorf("fragments = %s %+v, want the merged records", ids(r), r)
	}
	if r := records("/api/v1/experiments/r1/records?source=fragments&id=d"); ids(r) != "" {
		t.Errorf("fragments, id=d = %s, want none: d is not merged", ids(r))
	}
	if r := records("/api/v1/experiments/r1/records?source=all&id=d"); ids(r) != "d" {
		t.Errorf("all, id=d = %s", ids(r))
	}
	if r := records("/api/v1/experiments/r1/records?rollout_id=x"); ids(r) != "a,b" || r.HasMore {
		t.Errorf("rollout_id=x = %s", ids(r))
	}
	if r := records("/api/v1/experiments/r1/records?include_in_training=true"); ids(r) != "b" {
		t.Errorf("include_in_training=true = %s", ids(r))
	}
	if r := records("/api/v1/experiments/r1/records?id=c"); ids(r) != "c" {
		t.Errorf("id=c = %s", ids(r))
	}
	if r := records("/api/v1/experiments/r1/records?id=c&rollout_id=x"); ids(r) != "" {
		t.Errorf("id=c&rollout_id=x = %s, want none", ids(r))
	}
	if r := records("/api/v1/experiments/r1/records?id=nope"); ids(r) != "" {
		t.Errorf("id=nope = %s, want none", ids(r))
	}
	for _, source := range []string{"fragments", "all", "wal"} {
		if r := records("/api/v1/experiments/generic:g1/records?source=" + source); len(r.Records) != 0 || r.HasMore {
			t.Errorf("generic:g1 (%s) = %+v, want no rows", source, r)
		}
	}
	// wal is the pending rows alone: d, not yet merged.
	if r := records("/api/v1/experiments/r1/records?source=wal"); ids(r) != "d" || r.HasMore || r.Source != "wal" {
		t.Errorf("wal = %s %+v, want the pending record d alone", ids(r), r)
	}
	if r := records("/api/v1/experiments/r1/records?source=wal&id=a"); ids(r) != "" {
		t.Errorf("wal, id=a = %s, want none: a is merged", ids(r))
	}
	e.refError(http.MethodGet, "/api/v1/experiments/r1/records?source=disk", "", 400, CodeInvalidRequest, `"disk"`)
	e.refError(http.MethodGet, "/api/v1/experiments/r1/records?include_in_training=maybe", "", 400, CodeInvalidRequest, "include_in_training")
	e.refError(http.MethodGet, "/api/v1/experiments/r1/records?colour=red", "", 400, CodeInvalidRequest, "colour")
	e.refError(http.MethodGet, "/api/v1/experiments/generic:g1/records?role=user", "", 400, CodeInvalidRequest, "rollout stores only")
	e.refError(http.MethodGet, "/api/v1/experiments/nope/records", "", 404, CodeNotFound, "experiment 'nope' does not exist")
	e.refError(http.MethodGet, "/api/v1/experiments/-x/records", "", 400, CodeInvalidRequest, "-x")

	// A worker that cannot be reached is passed over; none left is a 503.
	e.workers.Store([]fanout.Worker{{InstanceID: "w0", HTTPAddr: "127.0.0.1:1"}})
	e.refError(http.MethodGet, "/api/v1/experiments/r1/records", "", 503, CodeUnavailable, "w0")
}

// claimDone runs task id to done the way the scheduler does: claimed under a
// lease, then finished.
func claimDone(t *testing.T, e *adminEnv, id string) {
	t.Helper()
	c, err := e.ts.Claim(e.ctx, e.lease, tasks.ClaimFilter{})
	if err != nil || c.Task.ID != id {
		t.Fatalf("claim = %+v, %v; want task %s", c, err, id)
	}
	if _, err := e.ts.Finish(e.ctx, c, tasks.Result{Report: tasks.Report{Detail: "removed 2 / added 1 fragments"}}); err != nil {
		t.Fatal(err)
	}
}

// discoveryFunc is a fanout.Discovery a test can change while the handler runs.
type discoveryFunc func(ctx context.Context) ([]fanout.Worker, error)

func (f discoveryFunc) Workers(ctx context.Context) ([]fanout.Worker, error) { return f(ctx) }
