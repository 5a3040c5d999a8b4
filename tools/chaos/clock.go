//go:build chaos

package chaos

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/utils/clock"
)

// Clock, in a chaos build with TIDEMARK_CHAOS_CLOCK_OFFSET set (a Go duration,
// "2s" or "-2s"), returns a clock that many seconds off the real one: the skewed
// wall clock of a VM whose time sync broke, for the campaigns that check what
// clock skew can and cannot reorder. Without the variable it is the real clock.
func Clock(log *slog.Logger) (clock.PassiveClock, error) {
	text := os.Getenv(ClockOffsetEnv)
	if text == "" {
		return clock.RealClock{}, nil
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return nil, fmt.Errorf("chaos clock offset (%s): %w", ClockOffsetEnv, err)
	}
	log.Warn("chaos build: this process's clock is skewed on purpose", "offset", d)
	return offsetClock{d: d}, nil
}

type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.d) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
