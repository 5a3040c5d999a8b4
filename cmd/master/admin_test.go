package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// fakeAdmin answers stats and adopt with fixed rows, so the rendering of shards
// can be checked without a cluster whose workers come and go.
type fakeAdmin struct {
	tidemarkv1.UnimplementedAdminServiceServer
	mu    sync.Mutex
	adopt []*tidemarkv1.ForceAdoptRequest
}

var (
	fakeSince = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	fakeGrace = time.Minute
)

func (f *fakeAdmin) ListStats(context.Context, *tidemarkv1.ListStatsRequest) (*tidemarkv1.ListStatsResponse, error) {
	return &tidemarkv1.ListStatsResponse{Stats: []*tidemarkv1.StatsRow{
		{Target: "generic:g1", Version: 3, Shards: 3, ActiveShards: []string{"w1"}},
		{Target: "r1", Version: 1, Shards: 3, ActiveShards: []string{"w1", "w2", "w3"},
			PendingByShard: map[string]int64{"w2": 4},
			MissingShards: []*tidemarkv1.MissingShard{
				{Shard: "w2", MissingSince: timestamppb.New(fakeSince), OrphanedAt: timestamppb.New(fakeSince.Add(fakeGrace)), Orphaned: true},
				{Shard: "w3", MissingSince: timestamppb.New(fakeSince.Add(fakeGrace)), OrphanedAt: timestamppb.New(fakeSince.Add(2 * fakeGrace))},
			}},
	}}, nil
}

func (f *fakeAdmin) ForceAdopt(_ context.Context, req *tidemarkv1.ForceAdoptRequest) (*tidemarkv1.ForceAdoptResponse, error) {
	f.mu.Lock()
	f.adopt = append(f.adopt, req)
	f.mu.Unlock()
	if req.GetShard() == "w1" {
		return nil, status.Error(codes.FailedPrecondition, "adopt shard w1 of r1: its worker is registered: worker w1 at 10.0.0.1:9090")
	}
	state := "queued"
	if req.GetShard() == "w4" {
		state = "running" // a merge of the target was running already
	}
	return &tidemarkv1.ForceAdoptResponse{
		Task: &tidemarkv1.Task{Id: "0192-task", Kind: "merge_wal", Target: req.GetTarget(), State: state,
			EnqueuedAt: timestamppb.New(fakeSince)},
		Deduplicated: state == "running",
		Shard: &tidemarkv1.MissingShard{Shard: req.GetShard(), MissingSince: timestamppb.New(fakeSince),
			OrphanedAt: timestamppb.New(fakeSince.Add(time.Second)), Orphaned: true},
	}, nil
}

// fakeMerge is a finished merge_wal task with stats; fakeQueued one without.
var (
	fakeMerge = &tidemarkv1.Task{Id: "0192-merge", Kind: "merge_wal", Target: "r1", State: "done",
		Detail: "merged 12 generations across 3/3 workers", EnqueuedAt: timestamppb.New(fakeSince),
		Stats: &tidemarkv1.TaskStats{Workers: 3, WorkersMerged: 3, GenerationsMerged: 12, RowsMerged: 4096, BaseVersion: 7}}
	fakeQueued = &tidemarkv1.Task{Id: "0192-queued", Kind: "compact", Target: "r1", State: "queued",
		EnqueuedAt: timestamppb.New(fakeSince), Stats: &tidemarkv1.TaskStats{}}
)

func (f *fakeAdmin) GetTask(context.Context, *tidemarkv1.GetTaskRequest) (*tidemarkv1.GetTaskResponse, error) {
	return &tidemarkv1.GetTaskResponse{Task: fakeMerge}, nil
}

func (f *fakeAdmin) ListTasks(context.Context, *tidemarkv1.ListTasksRequest) (*tidemarkv1.ListTasksResponse, error) {
	return &tidemarkv1.ListTasksResponse{Tasks: []*tidemarkv1.Task{fakeMerge, fakeQueued}}, nil
}

func (f *fakeAdmin) requests() []*tidemarkv1.ForceAdoptRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*tidemarkv1.ForceAdoptRequest(nil), f.adopt...)
}

func serveFakeAdmin(t *testing.T) (string, *fakeAdmin) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAdmin{}
	gs := grpc.NewServer()
	tidemarkv1.RegisterAdminServiceServer(gs, f)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String(), f
}

func TestAdminStatsShowsActiveAndMissingShards(t *testing.T) {
	addr, _ := serveFakeAdmin(t)
	out, _, err := run(t, "admin", "--addr", addr, "--timeout", "10s", "stats")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "ACTIVE_SHARDS") || !strings.Contains(lines[0], "MISSING") {
		t.Fatalf("stats table:\n%s", out)
	}
	for _, want := range []string{"w1,w2,w3", "w2 since 2025-01-02T03:04:05Z, orphaned;", "w3 since 2025-01-02T03:05:05Z, orphaned at 2025-01-02T03:06:05Z"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("r1's line does not show %q:\n%s", want, lines[2])
		}
	}
	// Two of g1's three shards were adopted and retired.
	if !strings.Contains(lines[1], "w1 +2 retired") {
		t.Errorf("generic:g1's line does not count its retired shards:\n%s", lines[1])
	}

	out, _, err = run(t, "admin", "--addr", addr, "--timeout", "10s", "-o", "json", "stats")
	if err != nil {
		t.Fatal(err)
	}
	var resp tidemarkv1.ListStatsResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("stats -o json: %v\n%s", err, out)
	}
	if ms := resp.Stats[1].GetMissingShards(); len(ms) != 2 || !ms[0].Orphaned || ms[1].Orphaned {
		t.Errorf("stats -o json: r1's missing shards %v", ms)
	}
	for _, field := range []string{`"active_shards"`, `"missing_shards"`, `"missing_since"`, `"orphaned_at"`} {
		if !strings.Contains(out, field) {
			t.Errorf("stats -o json has no %s:\n%s", field, out)
		}
	}
}

func TestAdminAdoptPrintsTheShardAndTheTask(t *testing.T) {
	addr, f := serveFakeAdmin(t)
	admin := func(args ...string) (string, string, error) {
		t.Helper()
		return run(t, append([]string{"admin", "--addr", addr, "--timeout", "10s"}, args...)...)
	}
	out, stderr, err := admin("adopt", "generic:g1", "w3")
	if err != nil {
		t.Fatal(err)
	}
	if fieldOf(out, "shard") != "w3" || fieldOf(out, "missing_since") != "2025-01-02T03:04:05Z" ||
		fieldOf(out, "id") != "0192-task" || fieldOf(out, "kind") != "merge_wal" || fieldOf(out, "target") != "generic:g1" ||
		fieldOf(out, "deduplicated") != "false" || stderr != "" {
		t.Errorf("adopt printed:\n%s\nstderr %q", out, stderr)
	}
	if reqs := f.requests(); len(reqs) != 1 || reqs[0].GetTarget() != "generic:g1" || reqs[0].GetShard() != "w3" {
		t.Errorf("the master was asked %v", reqs)
	}

	_, stderr, err = admin("adopt", "r1", "w4")
	if err != nil || !strings.Contains(stderr, "already running") || !strings.Contains(stderr, "next merge sweep") {
		t.Errorf("adopt into a running merge (%v): stderr %q, want a note that the next sweep adopts it", err, stderr)
	}

	_, _, err = admin("adopt", "r1", "w1")
	if err == nil || !strings.Contains(err.Error(), "FailedPrecondition") || !strings.Contains(err.Error(), "worker w1 at 10.0.0.1:9090") {
		t.Errorf("adopt of a registered worker's shard: err = %v, want FailedPrecondition naming it", err)
	}

	out, _, err = admin("-o", "json", "adopt", "r1", "w3")
	if err != nil {
		t.Fatal(err)
	}
	var resp tidemarkv1.ForceAdoptResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || resp.GetShard().GetShard() != "w3" || !resp.GetShard().GetOrphaned() {
		t.Errorf("adopt -o json (%v):\n%s", err, out)
	}

	if _, _, err := admin("adopt", "r1"); err == nil || !strings.Contains(err.Error(), "2 arg") {
		t.Errorf("adopt with one argument: err = %v, want a usage error", err)
	}
}

// A task's stats are shown as fields, with the names of the etcd record and of
// -o json, in the single task's lines and in a column of the task list.
func TestAdminTasksShowTheirStats(t *testing.T) {
	addr, _ := serveFakeAdmin(t)
	admin := func(args ...string) string {
		t.Helper()
		out, _, err := run(t, append([]string{"admin", "--addr", addr, "--timeout", "10s"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const stats = "workers=3 workers_merged=3 generations_merged=12 rows_merged=4096 base_version=7"
	if out := admin("get", "0192-merge"); fieldOf(out, "stats") != stats {
		t.Errorf("get printed stats %q, want %q:\n%s", fieldOf(out, "stats"), stats, out)
	}
	lines := strings.Split(strings.TrimSpace(admin("list")), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "STATS") || !strings.Contains(lines[1], stats) || !strings.Contains(lines[2], " - ") {
		t.Errorf("list: want a STATS column with the merge's stats and - for the queued task:\n%s", strings.Join(lines, "\n"))
	}
	out := admin("-o", "json", "list")
	var resp tidemarkv1.ListTasksResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || resp.GetTasks()[0].GetStats().GetGenerationsMerged() != 12 {
		t.Errorf("list -o json (%v):\n%s", err, out)
	}
	// Every stat is there, a zero one too: one shape for scripts.
	var shape struct {
		Tasks []struct {
			Stats map[string]any `json:"stats"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &shape); err != nil || len(shape.Tasks) != 2 ||
		shape.Tasks[0].Stats["generations_merged"] != "12" || shape.Tasks[1].Stats["shards_adopted"] != "0" {
		t.Errorf("list -o json (%v): want every task's stats by name, zeros included:\n%s", err, out)
	}
}
