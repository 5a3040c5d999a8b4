package table

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// FormatVersion is the manifest format this build writes and the newest it reads.
// Version 2 added sorted fragments with key indexes (Fragment.Sorted, Index,
// SeqMin); a version-1 reader would not know that a sorted fragment's shards are in
// its index, and a version-1 manifest reads as one whose fragments are all
// unsorted. Version 3 added deletion vectors packed into one object per commit
// (DeletionRef.Offset and Bytes); a version-2 reader would read a packed object
// whole as one vector, so every manifest this build writes says 3, and a ref of a
// version-2 manifest is a whole object.
const FormatVersion = 3

// packedFormat is the first format whose deletion refs may name a part of an
// object.
const packedFormat = 3

var (
	// ErrCorrupt means an object of the table could not be decoded. It is a halt
	// condition: retrying will not help and a human must look at the named object.
	ErrCorrupt = errclass.New(errclass.Halt, "corrupt table object")
	// ErrUnsupportedFormat means a manifest was written by a newer Tidemark: a halt
	// condition too, until this build is upgraded.
	ErrUnsupportedFormat = errclass.New(errclass.Halt, "unsupported table format version")
)

// Manifest is one immutable version of a table. Manifests are values: a commit builds
// a new one and never mutates a loaded one, so readers can share them freely.
type Manifest struct {
	FormatVersion int    `json:"format_version"`
	Version       uint64 `json:"version"`
	// Schema is the Arrow schema of every fragment, including the hidden _seq column,
	// as a base64 Arrow IPC schema message (exact, including nested types).
	Schema     schemaJSON `json:"schema"`
	PrimaryKey string     `json:"primary_key"`
	Fragments  []Fragment `json:"fragments"`
	// MergedGenerations is the watermark: for each WAL shard, the highest generation
	// whose rows are in this version.
	MergedGenerations map[string]uint64 `json:"merged_generations"`
	// TxnID names the transaction that produced this version, so a committer whose
	// manifest write returned an error can tell whether it landed anyway.
	TxnID     string    `json:"txn_id"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// LastCompaction describes the newest compaction in this version's history; nil
	// before the first. Every later commit carries it forward unchanged (next copies
	// the pointer; the value is never modified).
	LastCompaction *CompactionInfo `json:"last_compaction,omitempty"`
}

// CompactionInfo records a compaction: the version it committed, when, and how many
// fragments it rewrote into how many.
type CompactionInfo struct {
	Version uint64    `json:"version"`
	At      time.Time `json:"at"`
	Sources int       `json:"sources"`
	Outputs int       `json:"outputs"`
}

// Fragment is one immutable Parquet data file and what is needed to skip it.
type Fragment struct {
	Path  string `json:"path"` // relative to the table directory
	Rows  int64  `json:"rows"` // rows in the file, deleted ones included
	Bytes int64  `json:"bytes"`
	// IDMin and IDMax bound the ids in the file (byte-wise string order).
	IDMin string `json:"id_min"`
	IDMax string `json:"id_max"`
	// SeqMax is the highest _seq in the file.
	SeqMax uint64 `json:"seq_max"`
	// Shard is the WAL shard whose rows the file holds (a merge commits one shard's
	// generations): with _seq it is each row's rowkey.Version, which breaks ties
	// between shards the same way everywhere. Empty in files committed before it
	// was recorded, by appends that name no shard, and when ShardRuns is set.
	Shard string `json:"shard,omitempty"`
	// ShardRuns, when set, gives the shard of each row of a file that mixes shards
	// (a compaction's output): its rows in file order are consecutive runs, each of
	// one shard. Shard is then empty and the runs' Rows sum to Rows. Read it through
	// ShardAt.
	ShardRuns []ShardRun `json:"shard_runs,omitempty"`
	// Sorted says the rows are in strictly increasing id order (byte order) and
	// Index is their key index: every merge and compaction writes fragments so
	// since format version 2. The shard of each row of a sorted fragment is in its
	// index; ShardRuns is then empty, and Shard names the one shard of all its rows
	// unless MixedShards says they come from several.
	// Fragments without it are read through an index built in memory from their id
	// column until a compaction rewrites them.
	Sorted bool `json:"sorted,omitempty"`
	// SeqMin is the lowest _seq in the file (0 in fragments without it).
	SeqMin uint64 `json:"seq_min,omitempty"`
	// Index is the key index of a sorted fragment.
	Index *IndexRef `json:"index,omitempty"`
	// MixedShards says a sorted fragment's rows come from several shards (a
	// compaction's output): each row's shard is then in the key index only.
	MixedShards bool `json:"mixed_shards,omitempty"`
	// Level is the fragment's level (compact_plan.go): 0 for what merges write,
	// whose id ranges overlap; fragments of one level n >= 1 have disjoint ranges.
	Level int `json:"level,omitempty"`
	// Bloom is the path of the fragment's id bloom filter.
	Bloom string `json:"bloom"`
	// Deletions is nil when no row of the fragment is deleted.
	Deletions *DeletionRef `json:"deletions,omitempty"`
}

// ShardRun is a run of consecutive rows of a fragment written by one shard.
type ShardRun struct {
	Shard string `json:"shard"`
	Rows  int64  `json:"rows"`
}

// ShardAt returns the shard that wrote the row at offset: Shard, or the shard of
// the run holding offset ("" past the last run). Runs are one per shard of a
// compaction's sources, a handful, so a linear walk costs less than building the
// cumulative counts a binary search would need (a Fragment is a value copied into
// every manifest; it carries no precomputed index).
func (f Fragment) ShardAt(offset uint32) string {
	if len(f.ShardRuns) == 0 {
		return f.Shard
	}
	end := int64(0)
	for _, r := range f.ShardRuns {
		end += r.Rows
		if int64(offset) < end {
			return r.Shard
		}
	}
	return ""
}

// runs returns the fragment's shard runs: ShardRuns, or one run of Shard over
// every row.
func (f Fragment) runs() []ShardRun {
	if len(f.ShardRuns) == 0 {
		return []ShardRun{{Shard: f.Shard, Rows: f.Rows}}
	}
	return f.ShardRuns
}

// IndexRef points at the key index of a sorted fragment (keyindex.go): Top is the
// offset of its top, so a reader fetches the top in one ranged read.
type IndexRef struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Top   int64  `json:"top"`
}

// DeletionRef points at an immutable deletion vector: the whole object at Path
// when Bytes is 0 (every ref of a manifest before format 3), otherwise the Bytes
// bytes at Offset of an object that holds the vectors of every fragment one commit
// deleted from (deletion.go), each in its own envelope. Count is how many rows the
// vector deletes.
type DeletionRef struct {
	Path   string `json:"path"`
	Count  int64  `json:"count"`
	Offset int64  `json:"offset,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
}

// packed reports whether r names a part of its object.
func (r DeletionRef) packed() bool { return r.Bytes > 0 }

// LiveRows is the number of rows of the fragment that are not deleted.
func (f Fragment) LiveRows() int64 {
	if f.Deletions == nil {
		return f.Rows
	}
	return f.Rows - f.Deletions.Count
}

// ArrowSchema returns the table's Arrow schema.
func (m *Manifest) ArrowSchema() *arrow.Schema { return m.Schema.s }

// Stats is the summary a scanner needs, derived from one manifest.
type Stats struct {
	Version           uint64            `json:"version"`
	Rows              int64             `json:"row_count"`
	Fragments         int               `json:"fragment_count"`
	Bytes             int64             `json:"bytes"`
	DeletedRows       int64             `json:"deleted_rows"`
	MergedGenerations map[string]uint64 `json:"merged_generations"`
	UpdatedAt         time.Time         `json:"updated_at"`
	// LevelStats says how far the table is from its compacted shape.
	LevelStats
}

// Stats summarizes the manifest without any I/O.
func (m *Manifest) Stats() Stats {
	s := Stats{Version: m.Version, Fragments: len(m.Fragments), UpdatedAt: m.UpdatedAt,
		MergedGenerations: make(map[string]uint64, len(m.MergedGenerations)), LevelStats: m.Levels()}
	for _, f := range m.Fragments {
		s.Rows += f.LiveRows()
		s.Bytes += f.Bytes
		if f.Deletions != nil {
			s.DeletedRows += f.Deletions.Count
		}
	}
	for k, v := range m.MergedGenerations {
		s.MergedGenerations[k] = v
	}
	return s
}

// Watermark returns the highest merged generation of shard (0 when none).
func (m *Manifest) Watermark(shard string) uint64 { return m.MergedGenerations[shard] }

// next returns a copy of m as the starting point of version m.Version+1.
func (m *Manifest) next(txnID string, now time.Time) *Manifest {
	n := *m
	n.FormatVersion = FormatVersion
	n.Version = m.Version + 1
	n.TxnID = txnID
	n.UpdatedAt = now
	n.Fragments = append([]Fragment(nil), m.Fragments...)
	n.MergedGenerations = make(map[string]uint64, len(m.MergedGenerations)+1)
	for k, v := range m.MergedGenerations {
		n.MergedGenerations[k] = v
	}
	return &n
}

// encodeManifest writes m as compact JSON: every retained version holds a manifest
// listing every fragment, and indentation made up about a third of its bytes (jq
// prints one readably).
func encodeManifest(m *Manifest) ([]byte, error) {
	return json.Marshal(m)
}

// decodeManifest parses and validates a manifest read from key.
func decodeManifest(key string, data []byte) (*Manifest, error) {
	return decodeManifestUpTo(key, data, FormatVersion)
}

// decodeManifestUpTo is decodeManifest for a reader of formats up to newest: a
// manifest of a newer format is refused before anything else of it is read.
func decodeManifestUpTo(key string, data []byte, newest int) (*Manifest, error) {
	var probe struct {
		FormatVersion int `json:"format_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("manifest %s: %w: %v", key, ErrCorrupt, err)
	}
	if probe.FormatVersion > newest {
		return nil, fmt.Errorf("manifest %s: %w: format version %d, this build reads up to %d; upgrade Tidemark",
			key, ErrUnsupportedFormat, probe.FormatVersion, newest)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w: %v", key, ErrCorrupt, err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest %s: %w: %v", key, ErrCorrupt, err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	switch {
	case m.FormatVersion < 1:
		return fmt.Errorf("format_version %d", m.FormatVersion)
	case m.Version < 1:
		return fmt.Errorf("version %d", m.Version)
	case m.Schema.s == nil:
		return errors.New("no schema")
	case m.PrimaryKey != rowkey.IDColumn:
		return fmt.Errorf("primary_key %q, want %q", m.PrimaryKey, rowkey.IDColumn)
	}
	if err := checkSchema(m.Schema.s); err != nil {
		return err
	}
	seen := make(map[string]bool, len(m.Fragments))
	for _, f := range m.Fragments {
		switch {
		case f.Path == "" || f.Bloom == "":
			return fmt.Errorf("fragment %q without path or bloom", f.Path)
		case seen[f.Path]:
			return fmt.Errorf("fragment %s listed twice", f.Path)
		case f.Rows < 0 || f.Bytes < 0:
			return fmt.Errorf("fragment %s: negative size", f.Path)
		}
		if err := f.validateDeletions(m.FormatVersion); err != nil {
			return fmt.Errorf("fragment %s: %w", f.Path, err)
		}
		if err := f.validateRuns(); err != nil {
			return fmt.Errorf("fragment %s: %w", f.Path, err)
		}
		if err := f.validateIndex(); err != nil {
			return fmt.Errorf("fragment %s: %w", f.Path, err)
		}
		if err := f.validateLevel(); err != nil {
			return fmt.Errorf("fragment %s: %w", f.Path, err)
		}
		seen[f.Path] = true
	}
	if c := m.LastCompaction; c != nil && (c.Version < 1 || c.Version > m.Version || c.Sources < 0 || c.Outputs < 0) {
		return fmt.Errorf("last_compaction %+v in version %d", *c, m.Version)
	}
	return nil
}

// validateDeletions checks a fragment's deletion vector reference: a count within
// the fragment's rows, and a part of an object only in a manifest of a format that
// has them, holding at least an envelope.
func (f Fragment) validateDeletions(format int) error {
	d := f.Deletions
	switch {
	case d == nil:
		return nil
	case d.Count < 0 || d.Count > f.Rows || d.Path == "":
		return fmt.Errorf("bad deletion vector reference %+v", *d)
	case d.Offset < 0 || d.Bytes < 0 || (d.Offset > 0 && d.Bytes == 0):
		return fmt.Errorf("deletion vector reference %+v: bad offset or bytes", *d)
	case d.packed() && format < packedFormat:
		return fmt.Errorf("deletion vector reference %+v names a part of an object in a format-%d manifest", *d, format)
	case d.packed() && d.Bytes < envelopeHeader:
		return fmt.Errorf("deletion vector reference %+v: %d bytes cannot hold an envelope", *d, d.Bytes)
	}
	return nil
}

// validateIndex checks that a fragment is sorted exactly when it has a key index,
// and that the index reference is in range.
func (f Fragment) validateIndex() error {
	switch x := f.Index; {
	case f.MixedShards && !f.Sorted:
		return errors.New("mixed shards in an unsorted fragment (its shard runs say which)")
	case f.Sorted != (x != nil):
		return fmt.Errorf("sorted %v with index %v", f.Sorted, x != nil)
	case x == nil:
		return nil
	case x.Path == "" || x.Top < 0 || x.Bytes < x.Top+indexTrailerBytes:
		return fmt.Errorf("bad key index reference %+v", *x)
	case len(f.ShardRuns) > 0:
		return errors.New("shard runs in a sorted fragment (its index holds each row's shard)")
	case f.MixedShards && f.Shard != "":
		return fmt.Errorf("shard %q and mixed shards", f.Shard)
	case f.Rows > 0 && f.SeqMin > f.SeqMax:
		return fmt.Errorf("seq_min %d above seq_max %d", f.SeqMin, f.SeqMax)
	}
	return nil
}

// validateLevel checks a fragment's level: unsorted fragments are all at level 0,
// and every deeper level is a sorted run.
func (f Fragment) validateLevel() error {
	switch {
	case f.Level < 0 || f.Level > MaxLevel:
		return fmt.Errorf("level %d out of [0, %d]", f.Level, MaxLevel)
	case f.Level > 0 && !f.Sorted:
		return fmt.Errorf("unsorted fragment at level %d", f.Level)
	}
	return nil
}

// validateRuns checks shard runs: every run has rows, they add up to the fragment's
// rows, and Shard is then empty (a row has one shard).
func (f Fragment) validateRuns() error {
	if len(f.ShardRuns) == 0 {
		return nil
	}
	if f.Shard != "" {
		return fmt.Errorf("both shard %q and shard_runs", f.Shard)
	}
	left := f.Rows
	for i, r := range f.ShardRuns {
		if r.Rows <= 0 || r.Rows > left { // compared with what is left: a sum cannot overflow
			return fmt.Errorf("shard run %d (%q) of %d rows: runs do not add up to the fragment's %d rows", i, r.Shard, r.Rows, f.Rows)
		}
		left -= r.Rows
	}
	if left != 0 {
		return fmt.Errorf("shard runs cover %d of the fragment's %d rows", f.Rows-left, f.Rows)
	}
	return nil
}
