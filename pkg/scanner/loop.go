package scanner

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// every runs round at once and then every d, measured from the start of each
// round, until ctx is done. A round that takes longer than d is followed by the
// next at once; rounds never overlap and never pile up.
func every(ctx context.Context, clk clock.Clock, d time.Duration, round func(context.Context)) {
	for ctx.Err() == nil {
		start := clk.Now()
		round(ctx)
		t := clk.NewTimer(max(d-clk.Since(start), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}
