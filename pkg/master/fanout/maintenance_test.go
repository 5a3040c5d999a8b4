package fanout

import (
	"context"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// The stats of a maintenance answer are the worker's typed counts, never its
// summary's words; a worker that answers only the deleted objects' sum (one
// older than the split into versions and files) has them counted as files.
func TestMaintainStatsComeFromTheWorkersCounts(t *testing.T) {
	resp := &tidemarkv1.MaintainResponse{Summary: "reworded", BaseVersion: 812, CompactedFragments: 40, WrittenFragments: 2,
		RewrittenRows: 9000, DroppedDeletedRows: 12, DeletedObjects: 126, DeletedVersions: 31, DeletedFiles: 95, DeletedBytes: 13002342,
		CheckedObjects: 7, Problems: []string{"data/a.parquet: missing"}, DroppedFragments: 1, DroppedRows: 100}
	want := tasks.Stats{FragmentsCompacted: 40, FragmentsWritten: 2, RowsRewritten: 9000, DeletedRowsDropped: 12,
		VersionsDeleted: 31, FilesDeleted: 95, BytesReclaimed: 13002342, ObjectsChecked: 7, ProblemsFound: 1,
		FragmentsDropped: 1, RowsDropped: 100, BaseVersion: 812}
	if got := maintainStats(resp); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	old := &tidemarkv1.MaintainResponse{DeletedObjects: 126, DeletedBytes: 4096}
	if got := maintainStats(old); got.FilesDeleted != 126 || got.VersionsDeleted != 0 || got.BytesReclaimed != 4096 {
		t.Errorf("an older worker's answer: stats %+v, want 126 files deleted", got)
	}
}

// maintainFunc adapts a function to maintainCaller.
type maintainFunc func(w Worker) (MaintainResult, error)

func (f maintainFunc) Maintain(_ context.Context, w Worker, _ tasks.Kind, _ registry.Target, _ int64) (MaintainResult, error) {
	return f(w)
}

// A maintenance task reports the worker's stats beside its summary, a verify
// that found problems too (its task fails with them).
func TestMaintenanceReportsTheWorkersStats(t *testing.T) {
	stats := tasks.Stats{ObjectsChecked: 7, ProblemsFound: 1}
	m := &Maintenance{Discovery: StaticDiscovery{{InstanceID: "w1", GRPCAddr: "127.0.0.1:1"}},
		Caller: maintainFunc(func(Worker) (MaintainResult, error) {
			return MaintainResult{Summary: "verified version 3", Stats: stats, Problems: []string{"data/a.parquet: missing"}}, nil
		})}
	c := &tasks.Claim{Task: tasks.Task{ID: "t1", Kind: tasks.KindVerify, Target: tgt("s")}, FencingToken: 7}
	report, err := m.Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "data/a.parquet: missing") {
		t.Errorf("verify with a problem: %v, want the task failed naming it", err)
	}
	if report.Stats != stats || report.Detail != "verified version 3 (on w1)" {
		t.Errorf("report %+v, want the worker's stats and its summary on w1", report)
	}
}
