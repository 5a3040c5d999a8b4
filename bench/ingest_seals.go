package bench

import (
	"slices"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// sealWatch measures each generation's time from seal to merged: the workers tell
// it every generation they seal, and each sample of the base table tells it every
// shard's merged watermark, which covers the generations merged by then, at the
// time of the commit that merged them (watchedStore.observe reads each version
// since the last sample): a generation counts as merged when its version
// committed, which the samples find up to one interval later.
type sealWatch struct {
	mu sync.Mutex
	// open are the sealed generations no sample has seen merged, by shard, in
	// generation order (a shard's generations are numbered upwards).
	open  map[string][]sealedGeneration
	waits durations
	// seen are the merged generations' seal and sample times, for a breakdown of
	// their waits.
	seen []seenMerged
}

// seenMerged is one generation's seal time and the sample that first saw it
// merged.
type seenMerged struct{ sealed, seen time.Time }

type sealedGeneration struct {
	generation uint64
	at         time.Time
}

func newSealWatch() *sealWatch { return &sealWatch{open: map[string][]sealedGeneration{}} }

// sealed records g, just sealed in shard. Its time is the writer's SealedAt, the
// clock MERGE_MAX_DELAY judges by.
func (w *sealWatch) sealed(shard string, g *wal.Generation) {
	at := g.SealedAt
	if at.IsZero() {
		at = time.Now()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.open[shard] = append(w.open[shard], sealedGeneration{generation: g.Generation, at: at})
}

// merged takes the watermarks a sample read at now: every open generation at or
// below its shard's watermark was merged by now.
func (w *sealWatch) merged(watermarks map[string]uint64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for shard, open := range w.open {
		n := 0
		for n < len(open) && open[n].generation <= watermarks[shard] {
			w.waits = append(w.waits, now.Sub(open[n].at))
			w.seen = append(w.seen, seenMerged{sealed: open[n].at, seen: now})
			n++
		}
		w.open[shard] = open[n:]
	}
}

// result returns the seal-to-merged times and how many sealed generations no
// sample saw merged.
func (w *sealWatch) result() (Quantiles, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	unmerged := 0
	for _, open := range w.open {
		unmerged += len(open)
	}
	return w.waits.quantiles(), unmerged
}

// oldestOpen returns how long before now the oldest generation no sample saw
// merged was sealed (zero when every one was seen merged): a wait still running
// at the end of a run, which its quantiles leave out.
func (w *sealWatch) oldestOpen(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var oldest time.Duration
	for _, open := range w.open {
		if len(open) > 0 {
			oldest = max(oldest, now.Sub(open[0].at))
		}
	}
	return oldest
}

// waitTimes returns the seal-to-merged times measured so far.
func (w *sealWatch) waitTimes() durations {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.waits)
}

// mergedTimes returns the seal and sample times of the generations seen merged.
func (w *sealWatch) mergedTimes() []seenMerged {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}
