package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// The reference system's metric names, scraped from a live worker and master:
// each series Tidemark implements under the reference's name has its type and
// label names (docs/METRICS.md lists them all). Written from lance-format/
// lance-context: crates/lance-context-metrics/src/lib.rs (0b18cfb4),
// crates/lance-context-core/src/metrics.rs (04a7a244),
// crates/lance-context-server/src/sweeper.rs (60d45d13),
// crates/lance-context-master/src/scheduler.rs (02969b33), scanner.rs (02caf751),
// merge_execution.rs (1fcdafd8).

// refSeries is one reference series: its type and its label names (le of
// histograms left out).
type refSeries struct {
	typ    string
	labels []string
}

var workerRefSeries = map[string]refSeries{
	"http_requests_total":                        {"counter", []string{"method", "path", "status"}},
	"http_request_duration_seconds":              {"histogram", []string{"method", "path", "status"}},
	"rollout_wal_flush_total":                    {"counter", []string{"kind", "result"}},
	"rollout_wal_cleanup_total":                  {"counter", []string{"kind", "result"}},
	"rollout_wal_generations_reclaimed_total":    {"counter", []string{"kind"}},
	"rollout_wal_pending_generations":            {"histogram", nil},
	"rollout_add_duration_seconds":               {"histogram", nil},
	"rollout_add_errors_total":                   {"counter", nil},
	"rollout_add_request_duration_seconds":       {"histogram", []string{"flush"}},
	"rollout_flush_duration_seconds":             {"histogram", []string{"outcome"}},
	"rollout_flush_errors_total":                 {"counter", nil},
	"rollout_wal_merge_request_duration_seconds": {"histogram", nil},
	"rollout_wal_merge_errors_total":             {"counter", []string{"phase"}},
}

var masterRefSeries = map[string]refSeries{
	"http_requests_total":                          {"counter", []string{"method", "path", "status"}},
	"http_request_duration_seconds":                {"histogram", []string{"method", "path", "status"}},
	"master_task_enqueued_total":                   {"counter", []string{"kind"}},
	"master_tasks_total":                           {"counter", []string{"kind", "result"}},
	"master_task_duration_seconds":                 {"histogram", []string{"kind"}},
	"master_task_phase_duration_seconds":           {"histogram", []string{"kind", "phase"}},
	"master_task_queue_depth":                      {"gauge", nil},
	"master_merge_wal_worker_duration_seconds":     {"histogram", nil},
	"master_merge_wal_workers_total":               {"counter", []string{"result"}},
	"master_merge_wal_generations_reclaimed_total": {"counter", nil},
	"master_merge_sweep_deduped":                   {"gauge", nil},
	"master_scan_duration_seconds":                 {"histogram", nil},
	"master_scan_experiments_skipped":              {"gauge", nil},
	"master_scan_experiments_observed":             {"gauge", nil},
	"master_experiments":                           {"gauge", nil},
	"master_rollout_rows":                          {"gauge", nil},
	"master_rollout_fragments":                     {"gauge", nil},
	"master_wal_pending_generations_total":         {"gauge", nil},
	"master_wal_pending_generations_max":           {"gauge", nil},
}

// Label values the reference spells that a scrape must show once the work ran.
var workerRefSamples = []string{
	`rollout_wal_flush_total{kind="rollout",result="ok"}`,
	`rollout_wal_cleanup_total{kind="rollout",result="merged"}`,
	`rollout_add_request_duration_seconds_count{flush="true"}`,
	`rollout_flush_duration_seconds_count{outcome="sealed"}`,
	`http_requests_total{method="POST",path="/api/v1/rollouts/{name}/records",status="201"}`,
}

var masterRefSamples = []string{
	`master_tasks_total{kind="merge_wal",result="success"}`,
	`master_task_phase_duration_seconds_count{kind="merge_wal",phase="claim"}`,
	`master_task_phase_duration_seconds_count{kind="merge_wal",phase="commit"}`,
	`master_merge_wal_workers_total{result="ok"}`,
	`http_requests_total{method="GET",path="/api/v1/health",status="200"}`,
}

func TestMetricsCarryTheReferenceSystemsNames(t *testing.T) {
	t.Parallel()
	// In a cluster the master alone decides merges: the worker's sweeps never merge
	// (rollout_wal_cleanup_total shows at zero), and the master's sweep does not
	// either here, so the merge it runs is the one requeued below.
	c := newCluster(t, nil, nil)
	m := c.startMaster("m1", map[string]string{"MERGE_WAL_MIN_GENERATIONS": "100000"})
	w := c.startWorker("w1")

	if code, body, err := postWith(http.DefaultClient, w.url()+"/api/v1/rollouts", "", `{"name":"metrics"}`); err != nil || code != http.StatusCreated {
		t.Fatalf("create store: %d %s %v", code, body, err)
	}
	for i := range 2 {
		rec := fmt.Sprintf(`{"records":[{"id":"r%d","rollout_id":"r"}]}`, i)
		if code, body, err := postWith(http.DefaultClient, w.url()+"/api/v1/rollouts/metrics/records?flush=true", "", rec); err != nil || code != http.StatusCreated {
			t.Fatalf("add: %d %s %v", code, body, err)
		}
	}
	if code, body, err := c.get(w.url() + "/api/v1/rollouts/metrics/records"); err != nil || code != http.StatusOK {
		t.Fatalf("list: %d %s %v", code, body, err)
	}
	id := c.requeueMerge(m, "metrics")
	testwait.ForEvery(c.t, 30*time.Second, poll, "the requeued merge ran", func() (bool, string) {
		_, body, err := c.get(c.base(m.httpAddr) + "/metrics")
		return err == nil && bytes.Contains(body, []byte(`master_tasks_total{kind="merge_wal",result="success"} 1`)), id + "\n" + string(body)
	})

	for _, p := range []struct {
		what    string
		url     string
		series  map[string]refSeries
		samples []string
	}{
		{"worker", w.url() + "/metrics", workerRefSeries, workerRefSamples},
		{"master", c.base(m.httpAddr) + "/metrics", masterRefSeries, masterRefSamples},
	} {
		code, body, err := c.get(p.url)
		if err != nil || code != http.StatusOK {
			t.Fatalf("scrape %s: %d %v", p.what, code, err)
		}
		types, labels := parseExposition(body)
		for name, want := range p.series {
			if types[name] != want.typ {
				t.Errorf("%s: %s has type %q, want the reference's %s", p.what, name, types[name], want.typ)
				continue
			}
			got, ok := labels[name]
			if !ok {
				t.Errorf("%s: %s has no sample", p.what, name)
				continue
			}
			if !slices.Equal(got, want.labels) {
				t.Errorf("%s: %s has labels %v, want the reference's %v", p.what, name, got, want.labels)
			}
		}
		for _, s := range p.samples {
			if !bytes.Contains(body, []byte(s+" ")) {
				t.Errorf("%s: no sample %s", p.what, s)
			}
		}
	}
}

// parseExposition reads Prometheus text: each family's type, and the sorted label
// names of one of its samples (a histogram's from its _count sample).
func parseExposition(body []byte) (types map[string]string, labels map[string][]string) {
	types, labels = map[string]string{}, map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, typ, ok := strings.Cut(rest, " "); ok {
				types[name] = typ
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, _, _ := strings.Cut(line, " ")
		name, lbls, _ := strings.Cut(series, "{")
		family := name
		if types[name] == "" {
			if base, ok := strings.CutSuffix(name, "_count"); ok && types[base] == "histogram" {
				family = base
			} else {
				continue
			}
		}
		if _, seen := labels[family]; seen {
			continue
		}
		var names []string
		for _, kv := range strings.Split(strings.TrimSuffix(lbls, "}"), ",") {
			if k, _, ok := strings.Cut(kv, "="); ok && k != "le" {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		labels[family] = names
	}
	return types, labels
}
