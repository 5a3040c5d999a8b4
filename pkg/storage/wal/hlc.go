package wal

import (
	"time"

	"k8s.io/utils/clock"
)

// logicalBits is the width of the logical counter below the millisecond wall time in
// a _seq: 65,536 sequence numbers per millisecond before the counter spills into the
// next millisecond (which keeps it monotonic, only slightly ahead of the wall clock).
const logicalBits = 16

// hlc is a hybrid logical clock: seq = max(wall_ms << 16, last + 1), and a received
// timestamp moves last forward (observe). It strictly increases for its writer
// whatever the wall clock does (a clock that steps back only makes the logical part
// count up), and it tracks wall time, so sequences of different writers roughly
// follow real time. On its own, last-write-wins across shards therefore means "the
// later write" only within clock skew; what crosses between writers closes the gap:
// a causal token (Writer.AppendAfter) orders a client's next write after its last
// one, and the _seqs a worker reads (Writer.Observe) order its writes after what it
// has shown.
//
// It is not safe for concurrent use: the Writer guards it with its mu, so that a
// promise (Writer.Promise) and the committer's sequence numbers are ordered.
type hlc struct {
	clock clock.PassiveClock
	last  uint64
}

// observe makes every later sequence greater than seq: a writer seeds its clock with
// every _seq already in its shard (the manifest's max_seq and replayed entries).
func (h *hlc) observe(seq uint64) {
	h.last = max(h.last, seq)
}

// now moves the clock to the present (if it is behind) and returns its last
// sequence number: every later next() is above it.
func (h *hlc) now() uint64 {
	if ms := h.clock.Now().UnixMilli(); ms > 0 {
		h.last = max(h.last, uint64(ms)<<logicalBits)
	}
	return h.last
}

// next returns the next sequence number.
func (h *hlc) next() uint64 { return h.nextN(1) }

// nextN returns the first of the next n sequence numbers (n > 0), which are
// consecutive: next() n times, with the wall clock read once (as if the n calls
// fell within one millisecond, which they may anyway), for a batch's rows.
func (h *hlc) nextN(n int) uint64 {
	var wall uint64
	if ms := h.clock.Now().UnixMilli(); ms > 0 {
		wall = uint64(ms) << logicalBits
	}
	first := max(wall, h.last+1)
	h.last = first + uint64(n) - 1
	return first
}

// SeqTime is the wall time a _seq carries: its writer's clock, to the
// millisecond, when it wrote the row (later by the logical counter's spill when
// the writer wrote more than 65,536 rows in a millisecond, or had observed a
// _seq from a clock ahead of its own). The change feed's lag is measured with it.
func SeqTime(seq uint64) time.Time { return time.UnixMilli(int64(seq >> logicalBits)) }
