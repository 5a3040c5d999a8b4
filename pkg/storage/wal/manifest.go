package wal

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// FormatVersion is the WAL format (shard manifests, entries, generations) this build
// writes and the newest it reads.
const FormatVersion = 1

var (
	// ErrCorrupt means a WAL object (manifest, entry or generation) could not be
	// decoded, or the shard breaks an invariant (a missing entry above
	// replay_after). It is a halt condition: retrying will not help and a human must
	// look at the named object.
	ErrCorrupt = errclass.New(errclass.Halt, "corrupt WAL object")
	// ErrUnsupportedFormat means an object was written by a newer Tidemark: a halt
	// condition too, until this build is upgraded.
	ErrUnsupportedFormat = errclass.New(errclass.Halt, "unsupported WAL format version")
)

// Manifest is one immutable version of a shard manifest. Manifests are values: an
// edit builds a new one from a clone and never mutates a loaded one, so readers may
// share them.
type Manifest struct {
	FormatVersion int    `json:"format_version"`
	Version       uint64 `json:"version"`
	Shard         string `json:"shard"`
	// WriterEpoch is the epoch of the shard's current writer; opening a writer
	// creates the next version with WriterEpoch+1.
	WriterEpoch uint64 `json:"writer_epoch"`
	// CurrentGeneration is the highest generation number ever sealed (drains do not
	// lower it), so generation numbers are never reused.
	CurrentGeneration uint64 `json:"current_generation"`
	// ReplayAfter: entries at positions <= it are in generations (or were empty) and
	// are never replayed; they may still exist until the sealing writer deletes them.
	ReplayAfter uint64 `json:"replay_after_wal_entry_position"`
	// MaxSeq is the highest _seq sealed into any generation of this shard, ever.
	MaxSeq uint64 `json:"max_seq"`
	// Generations are the sealed generations not yet drained, by generation number.
	Generations []Generation `json:"generations"`
	// DeferredDeletes are generation files drained from the manifest whose deletion
	// waits until readers with older snapshots are done with them.
	DeferredDeletes []DeferredDelete `json:"deferred_deletes,omitempty"`
	// KeptEntries are entry positions that seals never delete, one range per writer
	// epoch after the first whose open completed: from the highest position holding
	// rows that the epoch's writer found at open (replay_after+1 if none) to its
	// highest fence. The last earlier writer whose open completed, if it is still
	// alive, can next write only inside that range (fence.go, rule 4); were the range
	// deleted, its put-if-absent would succeed there, below replay_after, and an
	// acknowledged row would be replayed by no one.
	// Seals merge the ranges below what they have cleaned into one (mergeKept), so
	// the list stays short.
	KeptEntries []EntryRange `json:"kept_entries,omitempty"`
	// Retired is set when an adopter drained the shard of a worker that did not
	// come back (Writer.Retire): nothing of it is pending and no writer holds it.
	// The next writer to open the shard (its worker, returning) clears it.
	Retired *Retirement `json:"retired,omitempty"`
	// TxnID names the edit that wrote this version ("open-…", "seal-…", "drain-…"),
	// so an editor whose write returned an error can tell whether it landed.
	TxnID     string    `json:"txn_id"`
	UpdatedAt time.Time `json:"updated_at"`
}

// EntryRange is the inclusive range of entry positions an epoch keeps.
type EntryRange struct {
	Epoch uint64 `json:"epoch"`
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
}

// keeps reports whether position pos is in a kept range.
func (m *Manifest) keeps(pos uint64) bool {
	for _, r := range m.KeptEntries {
		if pos >= r.From && pos <= r.To {
			return true
		}
	}
	return false
}

// mergeKept bounds kept_entries: it merges every range that lies entirely at or
// below clean into one range from the lowest of them to the highest, with the newest
// epoch among them, and leaves the others as they are. clean must be a position up
// to which a seal deleted every entry outside the kept ranges (deleteEntries
// succeeded), so the gaps between the merged ranges hold no entry and never will:
// nothing writes below replay_after but a stale writer, and a stale writer writes
// only at its next position, inside the range kept by the first open after it that
// completed (fence.go, rule 4). Keeping those empty gaps therefore keeps nothing; no
// kept position is ever given up, so every stale writer stays fenced (fence.go),
// while the list stays a few ranges long instead of growing by one per open.
//
// Ranges are never dropped: the writer a range holds may be a paused process that
// wakes at any time and writes its next position inside that range;
// nothing in storage records that it has stopped, so no range ever stops mattering.
func mergeKept(ranges []EntryRange, clean uint64) []EntryRange {
	var (
		merged EntryRange
		n      int
		rest   []EntryRange
	)
	for _, r := range ranges {
		if r.To > clean {
			rest = append(rest, r)
			continue
		}
		if n == 0 {
			merged = r
		} else {
			merged.From = min(merged.From, r.From)
			merged.To = max(merged.To, r.To)
			merged.Epoch = max(merged.Epoch, r.Epoch)
		}
		n++
	}
	if n < 2 {
		return ranges
	}
	return append([]EntryRange{merged}, rest...)
}

// Retirement records who drained an orphaned shard, and when.
type Retirement struct {
	// By is the instance id of the adopting worker.
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// Generation is one sealed, immutable generation file.
type Generation struct {
	Generation uint64 `json:"generation"`
	// Path is relative to the store directory (GenerationKey makes the object key).
	Path  string `json:"path"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	// SeqMin and SeqMax bound the _seq of the generation's rows.
	SeqMin uint64 `json:"seq_min"`
	SeqMax uint64 `json:"seq_max"`
	// LastEntryPosition is the highest entry position whose rows are in this
	// generation (replay_after of the version that added it).
	LastEntryPosition uint64    `json:"last_entry_position"`
	SealedAt          time.Time `json:"sealed_at"`
}

// DeferredDelete is a drained generation file waiting to be deleted.
type DeferredDelete struct {
	Path      string    `json:"path"` // relative to the store directory
	DrainedAt time.Time `json:"drained_at"`
}

// Generation returns generation n, if the manifest lists it.
func (m *Manifest) Generation(n uint64) (Generation, bool) {
	i, ok := slices.BinarySearchFunc(m.Generations, n, func(g Generation, n uint64) int {
		switch {
		case g.Generation < n:
			return -1
		case g.Generation > n:
			return 1
		}
		return 0
	})
	if !ok {
		return Generation{}, false
	}
	return m.Generations[i], true
}

// Pending returns the generations above watermark (the base table's
// merged_generations for this shard), oldest first. The slice is shared; do not
// modify it.
func (m *Manifest) Pending(watermark uint64) []Generation {
	i := len(m.Generations)
	for i > 0 && m.Generations[i-1].Generation > watermark {
		i--
	}
	return m.Generations[i:]
}

// clone returns a deep copy to edit into the next version.
func (m *Manifest) clone() *Manifest {
	n := *m
	n.Generations = slices.Clone(m.Generations)
	n.DeferredDeletes = slices.Clone(m.DeferredDeletes)
	n.KeptEntries = slices.Clone(m.KeptEntries)
	if m.Retired != nil {
		r := *m.Retired
		n.Retired = &r
	}
	return &n
}

func encodeManifest(m *Manifest) ([]byte, error) {
	if m.Generations == nil {
		m.Generations = []Generation{} // "generations": [] reads better than null
	}
	return json.MarshalIndent(m, "", "  ")
}

// decodeManifest parses and validates the manifest stored at key, which must be
// version v of shard.
func decodeManifest(key, shard string, v uint64, data []byte) (*Manifest, error) {
	var probe struct {
		FormatVersion int `json:"format_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("shard manifest %s: %w: %v", key, ErrCorrupt, err)
	}
	if probe.FormatVersion > FormatVersion {
		return nil, fmt.Errorf("shard manifest %s: %w: format version %d, this build reads up to %d; upgrade Tidemark",
			key, ErrUnsupportedFormat, probe.FormatVersion, FormatVersion)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("shard manifest %s: %w: %v", key, ErrCorrupt, err)
	}
	if err := m.validate(shard, v); err != nil {
		return nil, fmt.Errorf("shard manifest %s: %w: %v", key, ErrCorrupt, err)
	}
	return &m, nil
}

func (m *Manifest) validate(shard string, v uint64) error {
	switch {
	case m.FormatVersion < 1:
		return fmt.Errorf("format_version %d", m.FormatVersion)
	case m.Version != v:
		return fmt.Errorf("version %d stored as version %d", m.Version, v)
	case m.Shard != shard:
		return fmt.Errorf("shard %q stored under shard %q", m.Shard, shard)
	case m.WriterEpoch < 1:
		return fmt.Errorf("writer_epoch %d", m.WriterEpoch)
	}
	var prev uint64
	for _, g := range m.Generations {
		switch {
		case g.Generation <= prev:
			return fmt.Errorf("generation %d listed after %d: generations must be ascending and unique", g.Generation, prev)
		case g.Generation > m.CurrentGeneration:
			return fmt.Errorf("generation %d above current_generation %d", g.Generation, m.CurrentGeneration)
		case g.Path == "":
			return fmt.Errorf("generation %d has no path", g.Generation)
		case g.Rows < 0 || g.Bytes < 0:
			return fmt.Errorf("generation %d: negative size", g.Generation)
		case g.LastEntryPosition > m.ReplayAfter:
			return fmt.Errorf("generation %d: last_entry_position %d above replay_after %d",
				g.Generation, g.LastEntryPosition, m.ReplayAfter)
		case g.SeqMax > m.MaxSeq:
			return fmt.Errorf("generation %d: seq_max %d above max_seq %d", g.Generation, g.SeqMax, m.MaxSeq)
		}
		prev = g.Generation
	}
	for _, r := range m.KeptEntries {
		if r.From == 0 || r.From > r.To {
			return fmt.Errorf("kept_entries range [%d, %d] of epoch %d", r.From, r.To, r.Epoch)
		}
	}
	for _, d := range m.DeferredDeletes {
		if d.Path == "" {
			return errors.New("deferred delete without path")
		}
	}
	return nil
}
