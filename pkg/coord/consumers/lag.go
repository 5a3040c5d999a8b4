package consumers

import (
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// Lag is how far the committed cursor is behind the store's horizon h, in the
// wall time the two _seqs carry (wal.SeqTime): the lag metric, the add
// backpressure of max_consumer_lag and the dashboard all measure it here. ok is
// false for a consumer that committed the zero cursor (nothing read): there is
// no wall time to measure from. A cursor at or past the horizon lags 0.
func (r Record) Lag(h uint64) (lag time.Duration, ok bool) {
	if r.Cursor.Seq == 0 {
		return 0, false
	}
	return max(wal.SeqTime(h).Sub(wal.SeqTime(r.Cursor.Seq)), 0), true
}
