package table

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/tidemark-io/tidemark/pkg/objstore"
)

// Backoff of a request the store throttled (objstore.ErrThrottled, a 503 SlowDown):
// it was refused, not performed, so it is sent again, as object-store SDKs do, after
// an exponentially growing pause with jitter, for at most the table's RetryTimeout.
const (
	throttleFirstBackoff = 50 * time.Millisecond
	throttleMaxBackoff   = 2 * time.Second
)

// retryThrottled runs op until it returns anything but a throttling error, the
// context ends, or RetryTimeout has passed since the first attempt; it returns op's
// last error.
func (t *Table) retryThrottled(ctx context.Context, op func() error) error {
	clk := t.opts.Clock
	deadline := clk.Now().Add(t.opts.RetryTimeout)
	backoff := throttleFirstBackoff
	for {
		err := op()
		if !errors.Is(err, objstore.ErrThrottled) {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if clk.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-clk.After(wait):
		}
		backoff = min(2*backoff, throttleMaxBackoff)
	}
}
