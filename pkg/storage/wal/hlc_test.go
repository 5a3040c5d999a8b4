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

// A batch's rows take consecutive sequence numbers with one reading of the
// clock: the same numbers as one next() per row within a millisecond, above
// everything before them even when the clock steps back.
func TestHLCNextNIsNextNTimesWithinAMillisecond(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(at)
	one, many := hlc{clock: clk}, hlc{clock: clk}
	var want []uint64
	for range 5 {
		want = append(want, one.next())
	}
	first := many.nextN(5)
	for i, w := range want {
		if got := first + uint64(i); got != w {
			t.Fatalf("row %d: %d, want %d", i, got, w)
		}
	}
	if one.last != many.last {
		t.Fatalf("last %d after nextN, %d after next", many.last, one.last)
	}
	clk.SetTime(at.Add(-time.Hour))
	if got := many.nextN(3); got != want[4]+1 {
		t.Fatalf("after the clock stepped back: %d, want %d", got, want[4]+1)
	}
	clk.SetTime(at.Add(time.Second))
	if got, wall := many.nextN(2), uint64(at.Add(time.Second).UnixMilli())<<logicalBits; got != wall {
		t.Fatalf("after the clock moved on: %d, want its millisecond %d", got, wall)
	}
}
