package pending

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Entry is one store's pending generations in one worker's shard.
type Entry struct {
	// Target names the store as tasks do: a rollout store's bare name, a generic
	// store's "generic:<name>". It is the last segment of the entry's key.
	Target      registry.Target `json:"-"`
	Generations int             `json:"generations"`
	Bytes       int64           `json:"bytes"`
	// OldestSealedAt is when the oldest of them was sealed (the writer's clock):
	// how long its rows have waited for a merge.
	OldestSealedAt time.Time `json:"oldest_sealed_at"`
}

// value is an entry as stored: the entry and when its worker wrote it (the
// worker's clock, as OldestSealedAt is), so a reader can age it without
// comparing two machines' clocks.
type value struct {
	Entry
	PublishedAt time.Time `json:"published_at"`
}

// same reports whether a and b say the same about a store.
func same(a, b Entry) bool {
	return a.Target == b.Target && a.Generations == b.Generations && a.Bytes == b.Bytes && a.OldestSealedAt.Equal(b.OldestSealedAt)
}

func encode(e Entry, now time.Time) (string, error) {
	e.OldestSealedAt = e.OldestSealedAt.UTC()
	data, err := json.Marshal(value{Entry: e, PublishedAt: now.UTC()})
	if err != nil {
		return "", fmt.Errorf("pending entry of %s: %w", e.Target, err)
	}
	return string(data), nil
}

func decode(target registry.Target, data []byte) (value, error) {
	var v value
	if err := json.Unmarshal(data, &v); err != nil {
		return value{}, fmt.Errorf("pending entry of %s: %w", target, err)
	}
	v.Target = target
	return v, nil
}
