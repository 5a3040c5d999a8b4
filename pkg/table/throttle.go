package table

import (
	"context"
	"errors"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"github.com/tidemark-io/tidemark/pkg/objstore"
)

// throttleRetry spaces the resends of a request the store throttled
// (objstore.ErrThrottled, a 503 SlowDown): it was refused, not performed, so it is
// sent again, as object-store SDKs do, after 50 ms doubling to 2 s, with jitter.
var throttleRetry = backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}

// RetryThrottled runs op until it returns anything but an error wrapping
// objstore.ErrThrottled, the context ends, or the next attempt would start more
// than limit after the first; it returns op's last error. op must be safe to repeat
// after a throttling error (a throttled request was not performed).
func RetryThrottled(ctx context.Context, clk clock.Clock, limit time.Duration, op func() error) error {
	deadline := clk.Now().Add(limit)
	b := throttleRetry.Start()
	for {
		err := op()
		if !errors.Is(err, objstore.ErrThrottled) {
			return err
		}
		wait := b.Next()
		if clk.Now().Add(wait).After(deadline) {
			return err
		}
		if backoff.Sleep(ctx, clk, wait) != nil {
			return err
		}
	}
}

// retryThrottled is RetryThrottled for the table's requests, for at most its
// RetryTimeout.
func (t *Table) retryThrottled(ctx context.Context, op func() error) error {
	return RetryThrottled(ctx, t.opts.Clock, t.opts.RetryTimeout, op)
}
