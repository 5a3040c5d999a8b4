package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestConformanceOfAMasterProcessWithTheReferenceAPI drives real master and
// worker processes the way the reference system's (lance-context) master UI and
// clients do, and decodes every answer into the reference's DTOs: fields the
// reference requires must be there, with their types. Written from
// github.com/lance-format/lance-context, crates/lance-context-master/src/routes.rs
// at commit 1e6f4c0756c2cd58252139cb6ca215276d17c0e0 (the routes, 202 on enqueue,
// {"scanned":n}, the 404 wordings), crates/lance-context-api/src/lib.rs at commit
// 989a248ebd2da4d0376c44830c456184d331f05e (TaskRecord, TaskListResponse,
// ExperimentSummary, ExperimentListResponse, ExperimentRecordsResponse) and
// crates/lance-context-master/ui/src/api.ts at commit
// 0b03cbb3bf17f1a5e37754385d5d9a8d7f2e1112 (the query parameters the UI sends).
// pkg/master's TestConformance* check every route at the handler level.
func TestConformanceOfAMasterProcessWithTheReferenceAPI(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, nil)
	w := c.startWorker("w1")
	m := c.startMaster("m1", map[string]string{"MERGE_WAL_MIN_GENERATIONS": "1000", "MERGE_MAX_DELAY": "1h"})
	data := refClient{t: t, base: w.url() + "/api/v1"}
	ref := refClient{t: t, base: c.base(m.httpAddr) + "/api/v1"}

	data.call(http.MethodPost, "/rollouts", `{"name":"exp","storage_options":null}`, http.StatusCreated, nil)
	data.call(http.MethodPost, "/rollouts/exp/records?flush", `{"records":[`+
		`{"id":"a","rollout_id":"r1","sequence_order":0,"role":"user","content":"2+2?"},`+
		`{"id":"b","rollout_id":"r1","sequence_order":1,"content":"4","include_in_training":true},`+
		`{"id":"c","rollout_id":"r2","sequence_order":0,"content":"hi"}]}`, http.StatusCreated, nil)

	// Records through the master: all of them with source=all, none merged yet.
	var recs struct {
		Records []rolloutRecordDto `json:"records"`
		HasMore *bool              `json:"has_more"`
		Limit   *int               `json:"limit"`
		Offset  *int               `json:"offset"`
		Source  *string            `json:"source"`
	}
	ref.call(http.MethodGet, "/experiments/exp/records?limit=2&offset=0&source=all", "", http.StatusOK, &recs)
	if len(recs.Records) != 2 || recs.HasMore == nil || !*recs.HasMore || recs.Limit == nil || *recs.Limit != 2 ||
		recs.Offset == nil || recs.Source == nil || *recs.Source != "all" {
		t.Fatalf("records?limit=2&source=all answered %+v", recs)
	}
	for _, r := range recs.Records {
		r.check(t)
	}
	recs.Records = nil
	ref.call(http.MethodGet, "/experiments/exp/records?source=all&rollout_id=r1&include_in_training=true", "", http.StatusOK, &recs)
	if len(recs.Records) != 1 || *recs.Records[0].ID != "b" {
		t.Errorf("filtered records answered %+v", recs.Records)
	}

	// POST /tasks enqueues a merge (202, the reference's TaskRecord); GET /tasks/{id}
	// follows it to done, with Unix-millisecond timestamps.
	type taskRecord struct {
		ID         *string `json:"id"`
		Kind       *string `json:"kind"`
		Target     *string `json:"target"`
		State      *string `json:"state"`
		EnqueuedAt *int64  `json:"enqueued_at"`
		StartedAt  *int64  `json:"started_at"`
		FinishedAt *int64  `json:"finished_at"`
		Detail     *string `json:"detail"`
	}
	var task taskRecord
	ref.call(http.MethodPost, "/tasks", `{"kind":"merge_wal","target":"exp"}`, http.StatusAccepted, &task)
	if task.ID == nil || task.Kind == nil || *task.Kind != "merge_wal" || task.Target == nil || *task.Target != "exp" ||
		task.State == nil || task.EnqueuedAt == nil || task.FinishedAt != nil {
		t.Fatalf("enqueue answered %+v", task)
	}
	if now := time.Now().UnixMilli(); *task.EnqueuedAt < now-time.Minute.Milliseconds() || *task.EnqueuedAt > now+time.Minute.Milliseconds() {
		t.Errorf("enqueued_at %d is not a Unix millisecond time near %d", *task.EnqueuedAt, now)
	}
	id := *task.ID
	testwait.ForEvery(c.t, time.Minute, poll, "the merge task is done", func() (bool, string) {
		task = taskRecord{}
		a, err := send(&http.Client{Timeout: 10 * time.Second}, http.MethodGet, ref.base+"/tasks/"+id, "")
		if err != nil || a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &task) != nil || task.State == nil {
			return false, a.body
		}
		return *task.State == "done", a.body
	})
	if task.StartedAt == nil || task.FinishedAt == nil || *task.FinishedAt < *task.StartedAt || *task.StartedAt < *task.EnqueuedAt {
		t.Errorf("a done task's timestamps: %+v", task)
	}
	ref.refError(http.MethodGet, "/tasks/0190b5a4-0000-7000-8000-000000000000", http.StatusNotFound, "NOT_FOUND",
		"task '0190b5a4-0000-7000-8000-000000000000' not found")

	// The default source, fragments, reads the merged base table.
	recs.Records = nil
	ref.call(http.MethodGet, "/experiments/exp/records", "", http.StatusOK, &recs)
	var got []string
	for _, r := range recs.Records {
		got = append(got, *r.ID)
	}
	slices.Sort(got)
	if strings.Join(got, ",") != "a,b,c" || *recs.Source != "fragments" || *recs.HasMore {
		t.Errorf("records after the merge = %v %+v, want a, b and c from the base table", got, recs)
	}

	// GET /tasks: {tasks,total,limit,offset}, newest first.
	var list struct {
		Tasks  []taskRecord `json:"tasks"`
		Total  *int         `json:"total"`
		Limit  *int         `json:"limit"`
		Offset *int         `json:"offset"`
	}
	ref.call(http.MethodGet, "/tasks?limit=50&offset=0", "", http.StatusOK, &list)
	if list.Total == nil || *list.Total < 1 || list.Limit == nil || *list.Limit != 50 || list.Offset == nil || len(list.Tasks) < 1 {
		t.Fatalf("tasks answered %+v", list)
	}

	// POST /rescan, then the experiment's stats.
	var scan struct {
		Scanned *int `json:"scanned"`
	}
	ref.call(http.MethodPost, "/rescan", "", http.StatusOK, &scan)
	if scan.Scanned == nil || *scan.Scanned != 1 {
		t.Errorf("rescan answered %+v, want 1 store scanned", scan)
	}
	type summary struct {
		Name                  *string `json:"name"`
		URI                   *string `json:"uri"`
		RowCount              *int64  `json:"row_count"`
		FragmentCount         *int64  `json:"fragment_count"`
		LastUpdated           *int64  `json:"last_updated"`
		PendingWALGenerations *int64  `json:"pending_wal_generations"`
		TotalCompactions      *int64  `json:"total_compactions"`
		ScannedAt             *int64  `json:"scanned_at"`
	}
	check := func(what string, s summary) {
		t.Helper()
		if s.Name == nil || *s.Name != "exp" || s.URI == nil || !strings.HasPrefix(*s.URI, c.dataURL) || s.RowCount == nil || *s.RowCount != 3 ||
			s.FragmentCount == nil || s.LastUpdated == nil || s.PendingWALGenerations == nil || *s.PendingWALGenerations != 0 ||
			s.TotalCompactions == nil || s.ScannedAt == nil {
			t.Errorf("%s answered %+v", what, s)
		}
	}
	var exps struct {
		Experiments []summary `json:"experiments"`
		Total       *int64    `json:"total"`
	}
	ref.call(http.MethodGet, "/experiments?search=ex&limit=50&offset=0", "", http.StatusOK, &exps)
	if exps.Total == nil || *exps.Total != 1 || len(exps.Experiments) != 1 {
		t.Fatalf("experiments answered %+v", exps)
	}
	check("experiments", exps.Experiments[0])
	var one summary
	ref.call(http.MethodGet, "/experiments/exp?fresh=true", "", http.StatusOK, &one)
	check("experiment exp", one)
	ref.refError(http.MethodGet, "/experiments/nope", http.StatusNotFound, "NOT_FOUND", "experiment 'nope' not found in stats")
	ref.refError(http.MethodGet, "/experiments/nope/records", http.StatusNotFound, "NOT_FOUND", "experiment 'nope' does not exist")

	// Every route but health needs the cluster's credential.
	for _, route := range [][2]string{{http.MethodPost, "/tasks"}, {http.MethodPost, "/rescan"}, {http.MethodGet, "/experiments"}} {
		req, _ := http.NewRequest(route[0], ref.base+route[1], nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: %d, want 401", route[0], route[1], resp.StatusCode)
		}
	}
}
