//go:build !chaos

package chaos

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// TestNormalBuildIgnoresTheFaultsFile guards production binaries: without -tags
// chaos the environment variable must not be able to turn faults on.
func TestNormalBuildIgnoresTheFaultsFile(t *testing.T) {
	t.Setenv(FaultsFileEnv, filepath.Join(t.TempDir(), "faults.json"))
	base, err := objstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	b, err := WrapBucket(base, slog.New(slog.DiscardHandler))
	if err != nil || b != base {
		t.Errorf("WrapBucket = %v, %v; want the bucket itself", b, err)
	}
}

// TestNormalBuildIgnoresTheClockOffset guards production binaries: without -tags
// chaos the environment must not be able to skew the clock _seq is stamped with.
func TestNormalBuildIgnoresTheClockOffset(t *testing.T) {
	t.Setenv(ClockOffsetEnv, "-2s")
	c, err := Clock(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(clock.RealClock); !ok {
		t.Errorf("Clock = %T; want the real clock", c)
	}
}
