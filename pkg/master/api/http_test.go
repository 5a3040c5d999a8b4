package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// get requests path from h and returns the status, the Content-Type and the body.
func get(t *testing.T, h http.Handler, method, path string) (int, string, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, rec.Header().Get("Content-Type"), body
}

// wantError checks a JSON error answer.
func wantError(t *testing.T, h http.Handler, method, path string, status int, code, part string) {
	t.Helper()
	got, ctype, body := get(t, h, method, path)
	var e ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || got != status || ctype != "application/json" ||
		e.Error.Code != code || !strings.Contains(e.Error.Message, part) {
		t.Errorf("%s %s = %d %s %s; want %d with code %s naming %q", method, path, got, ctype, body, status, code, part)
	}
}

func TestHTTPRoutesAnswerJSON(t *testing.T) {
	e := newAdminEnv(t, fanout.StaticDiscovery{{InstanceID: "w1", GRPCAddr: "127.0.0.1:9"}})
	// The series /metrics serves are the registry's, whoever registered them.
	reg := prometheus.NewRegistry()
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "master_etcd_up", Help: "1 while etcd answers."})
	up.Set(1)
	reg.MustRegister(up, prometheus.NewCounter(prometheus.CounterOpts{Name: "master_tasks_total", Help: "Tasks."}))
	var etcdErr error
	h, err := NewHTTPHandler(HTTPConfig{Admin: e.svc, Tasks: e.ts, Scanner: e.scanner, Discovery: e.svc.cfg.Discovery,
		Workers:   workerhttp.New(workerhttp.Config{Discovery: e.svc.cfg.Discovery}),
		EtcdCheck: func(context.Context) error { return etcdErr }, Metrics: reg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	enq, err := e.client.RequeueMerge(e.ctx, &tidemarkv1.RequeueMergeRequest{Target: "generic:g1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.EnqueueTask(e.ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "compact", Target: "r1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.scanner.Rescan(e.ctx, registry.MustParseTarget("r1")); err != nil {
		t.Fatal(err)
	}

	status, ctype, body := get(t, h, "GET", "/api/v1/health")
	if status != 200 || ctype != "application/json" || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Errorf("health = %d %s %s", status, ctype, body)
	}
	etcdErr = errors.New("context deadline exceeded")
	status, _, body = get(t, h, "GET", "/api/v1/health")
	var hb HealthBody
	if err := json.Unmarshal(body, &hb); err != nil || status != 503 || hb.Status != "etcd unreachable" {
		t.Errorf("health with etcd away = %d %s", status, body)
	}
	etcdErr = nil

	var page TaskPage
	status, _, body = get(t, h, "GET", "/api/v1/tasks?kind=merge_wal&state=queued&target=generic:g1")
	if err := json.Unmarshal(body, &page); err != nil || status != 200 || len(page.Tasks) != 1 || page.Tasks[0].ID != enq.Task.Id {
		t.Errorf("filtered tasks = %d %s", status, body)
	}
	status, _, body = get(t, h, "GET", "/api/v1/tasks?limit=1&newest_first=false")
	page = TaskPage{}
	if err := json.Unmarshal(body, &page); err != nil || status != 200 || len(page.Tasks) != 1 || page.NextPageToken != enq.Task.Id || page.Total != 2 {
		t.Errorf("first page of 1 = %d %s", status, body)
	}
	status, _, body = get(t, h, "GET", "/api/v1/tasks?limit=1&newest_first=false&page_token="+page.NextPageToken)
	page = TaskPage{}
	if err := json.Unmarshal(body, &page); err != nil || status != 200 || len(page.Tasks) != 1 || page.Tasks[0].Kind != tasks.KindCompact {
		t.Errorf("second page of 1 = %d %s", status, body)
	}
	status, _, body = get(t, h, "GET", "/api/v1/tasks?state=done")
	if status != 200 || !strings.Contains(string(body), `"tasks":[]`) {
		t.Errorf("empty list = %d %s, want an empty array", status, body)
	}

	var task TaskRecord
	status, _, body = get(t, h, "GET", "/api/v1/tasks/"+enq.Task.Id)
	if err := json.Unmarshal(body, &task); err != nil || status != 200 || task.Target.String() != "generic:g1" {
		t.Errorf("task = %d %s", status, body)
	}

	var stats StatsPage
	status, _, body = get(t, h, "GET", "/api/v1/stats?limit=10")
	if err := json.Unmarshal(body, &stats); err != nil || status != 200 || len(stats.Stats) != 1 || stats.Stats[0].Target.String() != "r1" {
		t.Errorf("stats = %d %s", status, body)
	}

	var workers WorkerList
	status, _, body = get(t, h, "GET", "/api/v1/workers")
	if err := json.Unmarshal(body, &workers); err != nil || status != 200 || len(workers.Workers) != 1 ||
		workers.Workers[0].InstanceID != "w1" || workers.Workers[0].Source != "static" {
		t.Errorf("workers = %d %s", status, body)
	}

	status, _, body = get(t, h, "GET", "/metrics")
	if status != 200 || !strings.Contains(string(body), "master_etcd_up 1") || !strings.Contains(string(body), "master_tasks_total") {
		t.Errorf("metrics = %d, missing master series:\n%s", status, body)
	}

	wantError(t, h, "GET", "/api/v1/tasks?state=paused", 400, CodeInvalidRequest, `"paused"`)
	wantError(t, h, "GET", "/api/v1/tasks?kind=defrag", 400, CodeInvalidRequest, `"defrag"`)
	wantError(t, h, "GET", "/api/v1/tasks?target=a/b", 400, CodeInvalidRequest, `"a/b"`)
	wantError(t, h, "GET", "/api/v1/tasks?limit=ten", 400, CodeInvalidRequest, "limit")
	wantError(t, h, "GET", "/api/v1/tasks?stat=queued", 400, CodeInvalidRequest, "stat")
	wantError(t, h, "GET", "/api/v1/tasks/not-a-task", 400, CodeInvalidRequest, `"not-a-task"`)
	missing := uuid.Must(uuid.NewV7()).String()
	wantError(t, h, "GET", "/api/v1/tasks/"+missing, 404, CodeNotFound, missing)
	wantError(t, h, "GET", "/api/v1/stats?page_token=../x", 400, CodeInvalidRequest, "../x")
	wantError(t, h, "GET", "/api/v1/nope", 404, CodeNotFound, "/api/v1/nope")
	wantError(t, h, "DELETE", "/api/v1/tasks", 405, CodeMethodNotAllowed, "DELETE")
}

// A master whose etcd is gone answers 503 with the JSON error shape, not a hang
// or a 500.
func TestHTTPAnswersUnavailableWhileEtcdIsAway(t *testing.T) {
	srv := etcdtest.StartServer(t)
	client := srv.Client(t)
	ts := tasks.New(client, "/http")
	b := objstoretest.Mem(t)
	sc := scanner.New(client, ts, b, scanner.StaticLease(1), scanner.Config{})
	admin, err := NewAdminService(AdminConfig{Tasks: ts, Scanner: sc, Registry: registry.New(b), Discovery: fanout.StaticDiscovery{}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHTTPHandler(HTTPConfig{Admin: admin, Tasks: ts, Scanner: sc, Discovery: fanout.StaticDiscovery{},
		Workers:     workerhttp.New(workerhttp.Config{Discovery: fanout.StaticDiscovery{}}),
		EtcdCheck:   func(ctx context.Context) error { _, err := client.Get(ctx, "/http/health"); return err },
		CallTimeout: 300 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	wantError(t, h, "GET", "/api/v1/tasks", 503, CodeUnavailable, "etcd")
	wantError(t, h, "GET", "/api/v1/stats", 503, CodeUnavailable, "etcd")
	wantError(t, h, "GET", "/api/v1/experiments", 503, CodeUnavailable, "etcd")
	status, _, body := get(t, h, "GET", "/api/v1/health")
	if status != 503 || !strings.Contains(string(body), `"status":"etcd unreachable"`) {
		t.Errorf("health = %d %s", status, body)
	}
}
