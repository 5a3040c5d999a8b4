//go:build !chaos

package chaos

import (
	"log/slog"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// WrapBucket returns b untouched: this binary was built without -tags chaos, so it
// injects no faults whatever the environment says.
func WrapBucket(b *objstore.Bucket, _ *slog.Logger) (*objstore.Bucket, error) {
	return b, nil
}

// Clock returns the real clock: this binary was built without -tags chaos, so its
// clock cannot be skewed by the environment.
func Clock(_ *slog.Logger) (clock.PassiveClock, error) { return clock.RealClock{}, nil }
