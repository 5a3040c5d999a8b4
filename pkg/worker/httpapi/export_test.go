package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// POST .../export checks the request against the store before it enqueues
// anything: a 400 names the bad field (destination, a column the schema lacks,
// a filter that does not compile), a version the store cannot be read at is the
// 404 of reads at a version. A good one is a 202 with the task; the same id and
// request again is a 200 with the same task and nothing enqueued; the id with
// another request is a 409. GET .../export/{id} answers the task for polls.
func TestExportRouteChecksTheRequestAndEnqueuesOneTaskPerID(t *testing.T) {
	client, _ := etcdtest.Start(t)
	queue := tasks.New(client, "/tidemark")
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.Tasks = queue })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	dest := "file://" + t.TempDir() + "?prefix=nightly/"
	const path = "/api/v1/generic/g/export"

	for _, tc := range []struct {
		body any
		want string
	}{
		{`{}`, "destination"},
		{`{"destination":"ftp://host/x"}`, "ftp"},
		{`{"destination":"mem://"}`, "mem://"},
		{`{"destination":"` + dest + `","columns":["score","nope"]}`, `"nope"`},
		{`{"destination":"` + dest + `","columns":["_seq"]}`, `"_seq"`},
		{`{"destination":"` + dest + `","filter":"nope > 1"}`, "nope"},
		{`{"destination":"` + dest + `","filter":"score >"}`, "filter"},
		{`{"destination":"` + dest + `","id":"not-a-uuid"}`, "not-a-uuid"},
		{`{"destination":"` + dest + `","colums":["score"]}`, "colums"},
	} {
		if msg := e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodPost, path, tc.body); !strings.Contains(msg, tc.want) {
			t.Errorf("POST %s: message %q does not name %q", tc.body, msg, tc.want)
		}
	}
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodPost, path, `{"destination":"`+dest+`","version":99}`)
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodPost, "/api/v1/generic/nope/export", `{"destination":"`+dest+`"}`)
	e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodPost, "/api/v1/rollouts/r/export", `{"destination":"`+dest+`","filters":{"role":"user"}}`)
	if list, _, _ := queue.List(context.Background(), tasks.ListFilter{Kind: tasks.KindExport}); len(list) != 0 {
		t.Fatalf("refused requests enqueued %d tasks", len(list))
	}

	id := uuid.NewString()
	body := `{"destination":"` + dest + `","columns":["score"],"filter":"score > 0.5","id":"` + id + `"}`
	var first, again, polled exportTask
	e.ok(http.StatusAccepted, http.MethodPost, path, body, &first)
	e.ok(http.StatusOK, http.MethodPost, path, body, &again)
	if first.ID != id || first.Kind != tasks.KindExport || first.Target.String() != "generic:g" || first.State != tasks.StateQueued ||
		first.Export.Destination != dest || first.Export.Filter != "score > 0.5" || again.ID != id || !again.EnqueuedAt.Equal(first.EnqueuedAt) {
		t.Fatalf("answers %+v then %+v", first, again)
	}
	if msg := e.fails(http.StatusConflict, CodeAlreadyExists, http.MethodPost, path, `{"destination":"`+dest+`","id":"`+id+`"}`); !strings.Contains(msg, id) {
		t.Errorf("the id with another request: %q", msg)
	}
	e.ok(http.StatusOK, http.MethodGet, path+"/"+id, nil, &polled)
	if polled.ID != id || polled.State != tasks.StateQueued || polled.Export.Columns[0] != "score" {
		t.Errorf("poll answered %+v", polled)
	}
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/rollouts/r/export/"+id, nil)
	e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, path+"/"+uuid.NewString(), nil)
	e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, path+"/x", nil)

	// Rollout stores take the filters JSON object.
	var rollout exportTask
	e.ok(http.StatusAccepted, http.MethodPost, "/api/v1/rollouts/r/export", `{"destination":"`+dest+`","filter":"{\"role\":\"user\"}"}`, &rollout)
	if rollout.Target.String() != "r" {
		t.Errorf("rollout export %+v", rollout)
	}

	bare := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	bare.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	if msg := bare.fails(http.StatusServiceUnavailable, CodeTasksUnavailable, http.MethodPost, "/api/v1/rollouts/r/export", `{"destination":"`+dest+`"}`); !strings.Contains(msg, "etcd") {
		t.Fatalf("without a task queue: %q, want it to name etcd", msg)
	}
}
