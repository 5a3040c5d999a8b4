// Package stats is the stats row of each store in etcd (P/stats/<target>): what the
// master's last scan observed of the store's base table and WAL shards. The scanner
// writes rows; the merge and compaction sweeps, the fan-out, the admin API and the
// dashboard read them.
//
// Invariants:
//
//   - A row is written only conditionally on the mod revision its writer read
//     (PutIf, DeleteIf), so a slower observation never overwrites a newer one.
//   - All reads every row from one etcd revision: a sweep decides on one
//     consistent snapshot of P/stats/, never on a mix of two.
//   - A row is rewritten only when its content changes (Row.SameObservation), so an
//     idle cluster writes nothing to etcd.
package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ErrRowNotFound means P/stats/<target> does not exist: the target was never
// scanned, or its store is gone.
var ErrRowNotFound = errclass.New(errclass.Gone, "stats row not found")

// Page limits of Stats.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// Row is one store's stats row, the JSON value of P/stats/<target>.
type Row struct {
	Target registry.Target `json:"target"` // stored as its text
	Kind   registry.Kind   `json:"kind"`
	Name   string          `json:"name"`
	// Version, RowCount, FragmentCount and Bytes describe the base table's latest
	// manifest (RowCount counts live rows).
	Version       uint64 `json:"version"`
	RowCount      int64  `json:"row_count"`
	FragmentCount int    `json:"fragment_count"`
	Bytes         int64  `json:"bytes"`
	// DeletedRows counts rows of the fragments that deletion vectors hide: what a
	// compaction would drop (the compaction sweep compares it with RowCount).
	DeletedRows int64 `json:"deleted_rows"`
	// Level0Fragments counts the base table's level-0 fragments (what merges write,
	// and every fragment written before sorted fragments, UnsortedFragments of
	// them): each may hold any id, so a point read probes every one.
	// SpillingLevels counts the deeper levels holding more rows than their
	// targets (table.LevelStats). Both are what the compaction sweep compares with its thresholds.
	Level0Fragments   int `json:"level0_fragments"`
	UnsortedFragments int `json:"unsorted_fragments,omitempty"`
	SpillingLevels    int `json:"spilling_levels,omitempty"`
	// Shards is the number of WAL shards (one per worker that ever wrote the store).
	Shards int `json:"shards"`
	// PendingWALGenerations counts the sealed generations above each shard's
	// merged watermark, summed over shards: the fan-out of a read, and what the
	// merge sweep compares with MERGE_WAL_MIN_GENERATIONS. PendingWALRows and
	// PendingWALBytes add up those generations.
	PendingWALGenerations int   `json:"pending_wal_generations"`
	PendingWALRows        int64 `json:"pending_wal_rows"`
	PendingWALBytes       int64 `json:"pending_wal_bytes"`
	// PendingByShard is the pending generation count of every shard that has any,
	// so an orphaned shard (its worker gone) shows by name.
	PendingByShard map[string]int `json:"pending_by_shard,omitempty"`
	// ActiveShards are the shards that need an owner, sorted: all but the retired
	// ones (drained by an adopter after their worker was gone), and those retired
	// shards whose drained files are due for deletion (RetiredFilesAfter). One whose worker is not
	// registered for ORPHAN_GRACE is orphaned, and the master has it adopted.
	ActiveShards []string `json:"active_shards,omitempty"`
	// LastUpdated is the base manifest's updated_at: when the table last changed.
	LastUpdated time.Time `json:"last_updated"`
	// ScannedAt is when the observation in this row was made. A row is rewritten
	// only when its content changes, so an unchanged store keeps an older
	// scanned_at; the scan rounds themselves are in the master's metrics.
	ScannedAt time.Time `json:"scanned_at"`
}

// SameObservation reports whether r and o say the same about their store: every
// field but ScannedAt is equal. A scan writes a row only when this is false.
func (r Row) SameObservation(o Row) bool {
	return r.Target == o.Target && r.Kind == o.Kind && r.Name == o.Name &&
		r.Version == o.Version && r.RowCount == o.RowCount &&
		r.FragmentCount == o.FragmentCount && r.Bytes == o.Bytes && r.Shards == o.Shards &&
		r.Level0Fragments == o.Level0Fragments && r.UnsortedFragments == o.UnsortedFragments &&
		r.SpillingLevels == o.SpillingLevels &&
		r.PendingWALGenerations == o.PendingWALGenerations &&
		r.PendingWALRows == o.PendingWALRows && r.PendingWALBytes == o.PendingWALBytes &&
		maps.Equal(r.PendingByShard, o.PendingByShard) && // nil and empty are equal
		slices.Equal(r.ActiveShards, o.ActiveShards) &&
		r.LastUpdated.Equal(o.LastUpdated)
}

// Encode is r as the JSON value of its key.
func Encode(r Row) string {
	data, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("stats: encode stats row %s: %v", r.Target, err)) // only plain fields
	}
	return string(data)
}

func decodeRow(key string, value []byte) (Row, error) {
	var r Row
	if err := json.Unmarshal(value, &r); err != nil {
		return Row{}, fmt.Errorf("stats row %s: corrupt: %w", key, err)
	}
	return r, nil
}

// Stored is a row as read from etcd, with the mod revision a conditional write
// compares against. Err is set for a value that does not decode.
type Stored struct {
	Row    Row
	ModRev int64
	Err    error
}

// Rows reads and writes P/stats/. It holds no state besides its location.
type Rows struct {
	client *clientv3.Client
	prefix string // P/stats/
}

// NewRows returns the stats rows under k.
func NewRows(client *clientv3.Client, k keys.Schema) Rows {
	return Rows{client: client, prefix: k.StatsPrefix()}
}

// Key is P/stats/<target>.
func (rs Rows) Key(target registry.Target) string { return rs.prefix + target.String() }

// Get returns the row of target and its mod revision (0, found false, when absent).
func (rs Rows) Get(ctx context.Context, target registry.Target) (Stored, bool, error) {
	key := rs.Key(target)
	resp, err := rs.client.Get(ctx, key)
	if err != nil {
		return Stored{}, false, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Stored{}, false, nil
	}
	kv := resp.Kvs[0]
	r, derr := decodeRow(key, kv.Value)
	return Stored{Row: r, ModRev: kv.ModRevision, Err: derr}, true, nil
}

// StoredKV is a Stored row with the target its key names.
type StoredKV struct {
	// Key is the key's text after P/stats/: where the next page starts.
	Key string
	// Target is Key parsed; zero, with Err set, for a key that names no target.
	Target registry.Target
	Stored
}

// Page reads up to limit rows with targets after `after` (a target's text, a page
// token; "" from the start), at
// revision rev (0: the latest; the response's revision is returned so a caller can
// read further pages of the same snapshot). more says whether keys remain.
func (rs Rows) Page(ctx context.Context, after string, limit int, rev int64) (rows []StoredKV, more bool, atRev int64, err error) {
	start := rs.prefix
	if after != "" {
		start = rs.prefix + after + "\x00"
	}
	opts := []clientv3.OpOption{
		clientv3.WithRange(clientv3.GetPrefixRangeEnd(rs.prefix)),
		clientv3.WithLimit(int64(limit)),
	}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := rs.client.Get(ctx, start, opts...)
	if err != nil {
		return nil, false, 0, fmt.Errorf("list %s: %w", rs.prefix, err)
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		text := strings.TrimPrefix(key, rs.prefix)
		// The key is where a target's text enters: parsed here, once.
		target, err := registry.ParseTarget(text)
		var r Row
		if err == nil {
			r, err = decodeRow(key, kv.Value)
		} else {
			err = fmt.Errorf("stats row %s: corrupt: %w", key, err)
		}
		rows = append(rows, StoredKV{Key: text, Target: target, Stored: Stored{Row: r, ModRev: kv.ModRevision, Err: err}})
	}
	return rows, resp.More, resp.Header.Revision, nil
}

// All reads every row, page by page from one revision, so the result is one
// consistent snapshot of P/stats/, keyed by target.
func (rs Rows) All(ctx context.Context) (map[registry.Target]Stored, error) {
	out := map[registry.Target]Stored{}
	after, rev := "", int64(0)
	for {
		rows, more, atRev, err := rs.Page(ctx, after, MaxPageLimit, rev)
		if err != nil {
			return nil, err
		}
		rev = atRev
		for _, r := range rows {
			// Only the scanner writes P/stats/, under registered targets: a key that
			// names no target was not written by Tidemark, and is left out.
			if !r.Target.IsZero() {
				out[r.Target] = r.Stored
			}
			after = r.Key
		}
		if !more || len(rows) == 0 {
			return out, nil
		}
	}
}

// PutIf writes row if its key's mod revision is still modRev (0: absent).
func (rs Rows) PutIf(ctx context.Context, row Row, modRev int64) (bool, error) {
	key := rs.Key(row.Target)
	// Rescan write transaction:
	//   if   mod_revision(P/stats/<target>) == the revision read   nobody wrote the row since we read it
	//   then put P/stats/<target> = row                            our newer observation
	resp, err := rs.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", modRev),
	).Then(clientv3.OpPut(key, Encode(row))).Commit()
	if err != nil {
		return false, fmt.Errorf("put %s: %w", key, err)
	}
	return resp.Succeeded, nil
}

// DeleteIf deletes the row of target if its mod revision is still modRev.
func (rs Rows) DeleteIf(ctx context.Context, target registry.Target, modRev int64) (bool, error) {
	key := rs.Key(target)
	// Rescan delete transaction:
	//   if   mod_revision(P/stats/<target>) == the revision read   the row we saw, not a newer one
	//   then delete P/stats/<target>
	resp, err := rs.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", modRev),
	).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("delete %s: %w", key, err)
	}
	return resp.Succeeded, nil
}
