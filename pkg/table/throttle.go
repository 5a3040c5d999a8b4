package table

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/objstore"
)

// Backoff of a request the store throttled (objstore.ErrThrottled, a 503 SlowDown):
// it was refused, not performed, so it is sent again, as object-store SDKs do, after
// an exponentially growing pause with jitter.
const (
	throttleFirstBackoff = 50 * time.Millisecond
	throttleMaxBackoff   = 2 * time.Second
)

// RetryThrottled runs op until it returns anything but an error wrapping
// objstore.ErrThrottled, the context ends, or the next attempt would start more
// than limit after the first; it returns op's last error. op must be safe to repeat
// after a throttling error (a throttled request was not performed).
func RetryThrottled(ctx context.Context, clk clock.Clock, limit time.Duration, op func() error) error {
	deadline := clk.Now().Add(limit)
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

// retryThrottled is RetryThrottled for the table's requests, for at most its
// RetryTimeout.
func (t *Table) retryThrottled(ctx context.Context, op func() error) error {
	return RetryThrottled(ctx, t.opts.Clock, t.opts.RetryTimeout, op)
}
