package pending

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// MaxStores bounds the stores one record lists. At ~100 bytes an entry it keeps a
// record under 0.5 MiB, a third of etcd's default request limit.
const MaxStores = 4096

// Entry is one store's pending generations in one worker's shard.
type Entry struct {
	// Target names the store as tasks do: a rollout store's bare name, a generic
	// store's "generic:<name>".
	Target      string `json:"target"`
	Generations int    `json:"generations"`
	Bytes       int64  `json:"bytes"`
	// OldestSealedAt is when the oldest of them was sealed (the writer's clock):
	// how long its rows have waited for a merge.
	OldestSealedAt time.Time `json:"oldest_sealed_at"`
}

// Record is P/pending/<instance>.
type Record struct {
	Instance    string    `json:"instance"`
	PublishedAt time.Time `json:"published_at"`
	// Stores are sorted by target; only stores with pending generations appear.
	Stores []Entry `json:"stores"`
	// Omitted counts the stores with pending generations left out to stay within
	// MaxStores (the least pending ones): the stats scan still sees them.
	Omitted int `json:"omitted,omitempty"`
}

// newRecord builds the record of entries: drops the ones with nothing pending,
// keeps the MaxStores most pending, and sorts them by target so equal contents
// encode alike.
func newRecord(instance string, entries []Entry, now time.Time) Record {
	kept := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if e.Generations > 0 {
			e.OldestSealedAt = e.OldestSealedAt.UTC()
			kept = append(kept, e)
		}
	}
	r := Record{Instance: instance, PublishedAt: now.UTC()}
	if len(kept) > MaxStores {
		slices.SortFunc(kept, func(a, b Entry) int {
			return cmp.Or(cmp.Compare(b.Generations, a.Generations), cmp.Compare(a.Target, b.Target))
		})
		r.Omitted = len(kept) - MaxStores
		kept = kept[:MaxStores]
	}
	slices.SortFunc(kept, func(a, b Entry) int { return cmp.Compare(a.Target, b.Target) })
	r.Stores = kept
	return r
}

// sameContents reports whether a and b list the same pending work (their
// publication times aside).
func sameContents(a, b Record) bool {
	return a.Instance == b.Instance && a.Omitted == b.Omitted && slices.EqualFunc(a.Stores, b.Stores, func(x, y Entry) bool {
		return x.Target == y.Target && x.Generations == y.Generations && x.Bytes == y.Bytes && x.OldestSealedAt.Equal(y.OldestSealedAt)
	})
}

func decode(value []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(value, &r); err != nil {
		return Record{}, fmt.Errorf("pending record: %w", err)
	}
	return r, nil
}
