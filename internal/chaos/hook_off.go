//go:build !chaos

package chaos

import (
	"log/slog"

	"github.com/tidemark-io/tidemark/pkg/objstore"
)

// WrapBucket returns b untouched: this binary was built without -tags chaos, so it
// injects no faults whatever the environment says.
func WrapBucket(b *objstore.Bucket, _ *slog.Logger) (*objstore.Bucket, error) {
	return b, nil
}
