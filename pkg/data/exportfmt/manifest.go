package exportfmt

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// Format is the format version a manifest names; a reader refuses another.
const Format = "tidemark-export/1"

// ManifestName is the manifest's key under the destination: written last, it is
// the export's commit point.
const ManifestName = "_manifest.json"

// ErrManifest means a _manifest.json that is not an export manifest of this
// format: a human must look at it.
var ErrManifest = errclass.New(errclass.Halt, "unreadable export manifest")

// Manifest is an export's _manifest.json: what it holds, from which store and
// version, and where a consumer of the change feed goes on from. docs/API.md
// ("Exports") documents each field for readers.
type Manifest struct {
	Format string `json:"format"` // Format
	Store  string `json:"store"`  // the store's name
	Kind   string `json:"kind"`   // "rollout" or "generic"
	Target string `json:"target"` // the store's target: name, or generic:name
	TaskID string `json:"task_id"`
	// Version is the base-table version read. Pinned says the export asked for it
	// (Spec.Version): the files hold exactly the store as of Version. Unpinned,
	// they hold the merged rows of Version and the rows pending at CreatedAt.
	Version   uint64    `json:"version"`
	Pinned    bool      `json:"pinned"`
	CreatedAt time.Time `json:"created_at"`
	// Schema is the files' columns, in order: id first, _seq last.
	Schema []Column `json:"schema"`
	// Columns and Filter are the spec's: the columns asked for (empty: all) and
	// the filter applied (empty: none).
	Columns []string `json:"columns"`
	Filter  string   `json:"filter"`
	Rows    int64    `json:"rows"`  // the sum of Files' rows
	Bytes   int64    `json:"bytes"` // the sum of Files' bytes
	Files   []File   `json:"files"`
	// FeedCursor is the change-feed cursor to tail from: every change after the
	// snapshot comes after it (some rows already in the files may come again,
	// none is missed). Empty when the caller had none to record.
	FeedCursor string `json:"feed_cursor"`
}

// Column is one column of an export's files.
type Column struct {
	Name string `json:"name"`
	// Type is the Arrow type, as Arrow prints it ("utf8", "int64", "uint64",
	// "timestamp[us, tz=UTC]", "list<item: float, nullable>", ...); the files
	// store the Arrow schema too, so Arrow readers get it back exactly.
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// File is one Parquet file of an export.
type File struct {
	Path  string `json:"path"` // the key under the destination
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// Progress is how far a running export got.
type Progress struct {
	Rows  int64 `json:"rows"`  // rows written
	Files int64 `json:"files"` // files begun (the last may be in progress)
	Bytes int64 `json:"bytes"` // bytes written
	// Estimate bounds the rows the export will write from above (before its
	// filter), for a fraction done.
	Estimate int64 `json:"estimate"`
}

// SchemaOf lists the columns of s.
func SchemaOf(s *arrow.Schema) []Column {
	out := make([]Column, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = Column{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable}
	}
	return out
}

// ParseManifest decodes a _manifest.json, refusing another format and counts
// that disagree with the files listed (ErrManifest).
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %w", ErrManifest, err)
	}
	if m.Format != Format {
		return Manifest{}, fmt.Errorf("%w: format %q, want %q", ErrManifest, m.Format, Format)
	}
	var rows, bytes int64
	for _, f := range m.Files {
		rows += f.Rows
		bytes += f.Bytes
	}
	if rows != m.Rows || bytes != m.Bytes {
		return Manifest{}, fmt.Errorf("%w: %d rows and %d bytes, but its files hold %d and %d", ErrManifest, m.Rows, m.Bytes, rows, bytes)
	}
	return m, nil
}
