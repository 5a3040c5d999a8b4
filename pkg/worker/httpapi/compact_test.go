package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// POST .../compact enqueues one compact task per store for the master (202, then
// deduplicated onto the live one), for a rollout and a generic store alike; a
// missing store is 404, and a worker without etcd says so with 503 instead of
// accepting work nothing would run. GET .../compact/stats shows what compaction
// looks at.
func TestCompactRouteEnqueuesATaskAndStatsDescribeTheTable(t *testing.T) {
	client, _ := etcdtest.Start(t)
	queue := tasks.New(client, "/tidemark")
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.Tasks = queue })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":{"columns":[["id",{"type":"string"}]]}}`, nil)

	var first, again compactAnswer
	e.ok(http.StatusAccepted, http.MethodPost, "/api/v1/rollouts/r/compact", nil, &first)
	e.ok(http.StatusAccepted, http.MethodPost, "/api/v1/rollouts/r/compact", nil, &again)
	if first.TaskID == "" || first.Deduplicated || again.TaskID != first.TaskID || !again.Deduplicated {
		t.Fatalf("compact answers %+v then %+v; want one task, then the same deduplicated", first, again)
	}
	var gen compactAnswer
	e.ok(http.StatusAccepted, http.MethodPost, "/api/v1/generic/g/compact", nil, &gen)
	task, err := queue.Get(context.Background(), gen.TaskID)
	if err != nil || task.Kind != tasks.KindCompact || task.Target.String() != "generic:g" || task.State != tasks.StateQueued {
		t.Fatalf("the generic store's task: %+v, %v", task, err)
	}
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodPost, "/api/v1/rollouts/nope/compact", nil)

	var stats compactStats
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/rollouts/r/compact/stats", nil, &stats)
	if stats.Version != 1 || stats.Fragments != 0 || stats.LastCompaction != nil {
		t.Fatalf("stats of a new store %+v", stats)
	}

	bare := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	bare.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	if msg := bare.fails(http.StatusServiceUnavailable, CodeTasksUnavailable, http.MethodPost, "/api/v1/rollouts/r/compact", nil); !strings.Contains(msg, "etcd") {
		t.Fatalf("without a task queue: %q, want it to name etcd", msg)
	}
}
