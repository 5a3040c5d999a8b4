package wal

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// The wall time of a _seq is its writer's clock when it wrote, to the
// millisecond, whatever its logical counter says: the feed's lag is measured
// with it.
func TestSeqTimeIsTheWritersMillisecond(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 30, 0, 123_456_789, time.UTC)
	h := hlc{clock: clocktesting.NewFakePassiveClock(at)}
	first, second := h.next(), h.next()
	for _, seq := range []uint64{first, second} {
		if got := SeqTime(seq); !got.Equal(at.Truncate(time.Millisecond)) {
			t.Fatalf("SeqTime(%d) = %s, want %s", seq, got.UTC(), at.Truncate(time.Millisecond))
		}
	}
}
