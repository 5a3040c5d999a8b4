package tasks

// Report is what a run of a task did, as its record keeps it: Detail in words for
// people, Stats in numbers for programs. Metrics, dashboards and scripts read
// Stats only, so rewording a Detail changes what people read and nothing else.
type Report struct {
	// Detail summarizes the run, e.g. "merged 12 generations across 3/3 workers".
	Detail string
	// Stats counts what the run did.
	Stats Stats
	// Progress, if set, is how far the run got (an export's rows, files and
	// bytes): the record keeps it as Task.Progress.
	Progress *Progress
	// Exported is a done export's manifest in brief (Task.Exported).
	Exported *ExportResult
}

// Stats counts what a run of a task did, the numbers its Detail says in words.
// Each kind's runner fills the fields it knows and leaves the others zero; zero
// fields are left out of the JSON record, and a record written before Stats
// existed decodes with all of them zero.
//
// A merge_wal task fills the Workers*, GenerationsMerged, RowsMerged and
// ShardsAdopted fields; a compact task the fragment, row, version and file
// fields; verify and repair ObjectsChecked, ProblemsFound and the Dropped fields.
type Stats struct {
	// Workers is how many workers a merge_wal fan-out set out to call (the live
	// workers discovery listed); WorkersMerged answered with their merge,
	// WorkersSkipped could not be reached before they admitted a call (nothing of
	// theirs was touched), WorkersFailed answered with an error or failed to
	// prepare.
	Workers        int64 `json:"workers,omitempty"`
	WorkersMerged  int64 `json:"workers_merged,omitempty"`
	WorkersSkipped int64 `json:"workers_skipped,omitempty"`
	WorkersFailed  int64 `json:"workers_failed,omitempty"`
	// GenerationsMerged and RowsMerged are what the workers' merges of their own
	// shards folded into the base table (adoptions not included).
	GenerationsMerged int64 `json:"generations_merged,omitempty"`
	RowsMerged        int64 `json:"rows_merged,omitempty"`
	// ShardsAdopted counts orphaned shards a live worker adopted.
	ShardsAdopted int64 `json:"shards_adopted,omitempty"`

	// FragmentsCompacted were rewritten into FragmentsWritten, carrying
	// RowsRewritten live rows over and dropping DeletedRowsDropped deleted ones.
	FragmentsCompacted int64 `json:"fragments_compacted,omitempty"`
	FragmentsWritten   int64 `json:"fragments_written,omitempty"`
	RowsRewritten      int64 `json:"rows_rewritten,omitempty"`
	DeletedRowsDropped int64 `json:"deleted_rows_dropped,omitempty"`
	// VersionsDeleted are base table versions (manifests) retention let go;
	// FilesDeleted every other object no kept version referenced (fragments,
	// deletion vectors, indexes, and WAL shard manifests and files);
	// BytesReclaimed the bytes of both.
	VersionsDeleted int64 `json:"versions_deleted,omitempty"`
	FilesDeleted    int64 `json:"files_deleted,omitempty"`
	BytesReclaimed  int64 `json:"bytes_reclaimed,omitempty"`

	// ObjectsChecked by a verify or repair, ProblemsFound among them (missing or
	// damaged), and what a repair dropped for them.
	ObjectsChecked   int64 `json:"objects_checked,omitempty"`
	ProblemsFound    int64 `json:"problems_found,omitempty"`
	FragmentsDropped int64 `json:"fragments_dropped,omitempty"`
	RowsDropped      int64 `json:"rows_dropped,omitempty"`

	// BaseVersion is the base table version the task's last commit created; 0 if
	// it committed nothing.
	BaseVersion uint64 `json:"base_version,omitempty"`
	// Level0Fragments, of a merge_wal that merged a whole store (the gather
	// fan-out), counts the base table's level-0 fragments its commit left: the
	// master compacts the store once they reach MIN_FRAGMENTS.
	Level0Fragments int64 `json:"level0_fragments,omitempty"`
}
