package api

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// TaskProto converts a task record.
func TaskProto(t tasks.Task) *tidemarkv1.Task {
	out := &tidemarkv1.Task{
		Id:              t.ID,
		Kind:            string(t.Kind),
		Target:          t.Target.String(),
		State:           string(t.State),
		Error:           t.Error,
		Detail:          t.Detail,
		EnqueuedAt:      timestamp(t.EnqueuedAt),
		DueAt:           timestamp(t.DueAt),
		StartedAt:       timestamp(t.StartedAt),
		FinishedAt:      timestamp(t.FinishedAt),
		DependsOn:       t.DependsOn,
		Attempts:        int32(t.Attempts),
		ClaimToken:      t.ClaimToken,
		FencingToken:    t.FencingToken,
		Stats:           TaskStatsProto(t.Stats),
		CancelRequested: t.CancelRequested,
		Progress:        TaskProgressProto(t.Progress),
		Exported:        ExportResultProto(t.Exported),
	}
	if spec, err := fanout.TaskExportSpec(t); err == nil {
		out.Export = fanout.ExportSpecProto(spec)
	}
	return out
}

// TaskProgressProto converts a task's progress; nil stays nil (not reported).
func TaskProgressProto(p *tasks.Progress) *tidemarkv1.TaskProgress {
	if p == nil {
		return nil
	}
	return &tidemarkv1.TaskProgress{Rows: p.Rows, Files: p.Files, Bytes: p.Bytes, Estimate: p.Estimate,
		Worker: p.Worker, UpdatedAt: timestamp(p.UpdatedAt)}
}

// ExportResultProto converts a done export's summary; nil stays nil.
func ExportResultProto(r *tasks.ExportResult) *tidemarkv1.ExportResult {
	if r == nil {
		return nil
	}
	return &tidemarkv1.ExportResult{Manifest: r.Manifest, Version: r.Version, Rows: r.Rows, Files: r.Files,
		Bytes: r.Bytes, FeedCursor: r.FeedCursor}
}

// TaskStatsProto converts a task's stats; a task without any converts to a
// message of zeros, so every task answers the same shape.
func TaskStatsProto(s tasks.Stats) *tidemarkv1.TaskStats {
	return &tidemarkv1.TaskStats{
		Workers:            s.Workers,
		WorkersMerged:      s.WorkersMerged,
		WorkersSkipped:     s.WorkersSkipped,
		WorkersFailed:      s.WorkersFailed,
		GenerationsMerged:  s.GenerationsMerged,
		RowsMerged:         s.RowsMerged,
		ShardsAdopted:      s.ShardsAdopted,
		FragmentsCompacted: s.FragmentsCompacted,
		FragmentsWritten:   s.FragmentsWritten,
		RowsRewritten:      s.RowsRewritten,
		DeletedRowsDropped: s.DeletedRowsDropped,
		VersionsDeleted:    s.VersionsDeleted,
		FilesDeleted:       s.FilesDeleted,
		BytesReclaimed:     s.BytesReclaimed,
		ObjectsChecked:     s.ObjectsChecked,
		ProblemsFound:      s.ProblemsFound,
		FragmentsDropped:   s.FragmentsDropped,
		RowsDropped:        s.RowsDropped,
		BaseVersion:        s.BaseVersion,
		Level0Fragments:    s.Level0Fragments,
	}
}

// StatsProto converts a stats row.
func StatsProto(r stats.Row) *tidemarkv1.StatsRow {
	out := &tidemarkv1.StatsRow{
		Target:                r.Target.String(),
		Version:               r.Version,
		RowCount:              r.RowCount,
		FragmentCount:         int64(r.FragmentCount),
		PendingWalGenerations: int64(r.PendingWALGenerations),
		LastUpdated:           timestamp(r.LastUpdated),
		ScannedAt:             timestamp(r.ScannedAt),
		Shards:                int64(r.Shards),
		ActiveShards:          r.ActiveShards,
	}
	if len(r.PendingByShard) > 0 {
		out.PendingByShard = make(map[string]int64, len(r.PendingByShard))
		for shard, n := range r.PendingByShard {
			out.PendingByShard[shard] = int64(n)
		}
	}
	return out
}

// WorkerProto converts a worker entry; a worker without a start time (a static
// one) has none.
func WorkerProto(w WorkerEntry) *tidemarkv1.WorkerInfo {
	out := &tidemarkv1.WorkerInfo{
		InstanceId: w.InstanceID,
		GrpcAddr:   w.GRPCAddr,
		HttpAddr:   w.HTTPAddr,
		Version:    w.Version,
		Source:     w.Source,
		StartedAt:  timestamp(w.StartedAt),
	}
	return out
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// missingShardProto converts a missing shard.
func missingShardProto(m fanout.MissingShard) *tidemarkv1.MissingShard {
	return &tidemarkv1.MissingShard{
		Shard:        m.Shard,
		MissingSince: timestamp(m.Since),
		OrphanedAt:   timestamp(m.OrphanedAt),
		Orphaned:     m.Orphaned,
	}
}
