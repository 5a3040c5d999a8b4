//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// writeSpec replaces the faults file atomically, as a campaign does.
func writeSpec(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, func() (bool, string) { return cond(), "" })
}

// TestHookFollowsTheFaultsFileWhileTheProcessRuns is the contract a campaign relies
// on: faults go on and off by rewriting the file, without restarting the process,
// and the counters it reports are written next to the file.
func TestHookFollowsTheFaultsFileWhileTheProcessRuns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "faults.json")
	t.Setenv(FaultsFileEnv, path)
	base, err := objstore.Open(ctx, "mem://", objstore.WithOpTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	b, err := WrapBucket(base, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if b == base {
		t.Fatal("WrapBucket returned the bucket unwrapped in a chaos build with the variable set")
	}
	if err := b.Put(ctx, "stuck/a", []byte("x")); err != nil {
		t.Fatalf("put with no faults file = %v", err)
	}

	writeSpec(t, path, `{"rules": [{"key_contains": "stuck/", "hang": true}]}`)
	eventually(t, "the hang rule is applied", func() bool {
		_, err := b.Get(ctx, "stuck/a")
		return errors.Is(err, context.DeadlineExceeded) && errors.Is(err, objstore.ErrInjected)
	})
	if _, err := b.Get(ctx, "free"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("get of a key no rule matches = %v, want a real not-found", err)
	}

	writeSpec(t, path, `{"error_rate": 0.1 `) // broken: the faults in force stay
	time.Sleep(3 * pollInterval)
	if _, err := b.Get(ctx, "stuck/a"); !errors.Is(err, objstore.ErrInjected) {
		t.Errorf("get after a broken file = %v, want the hang still in force", err)
	}

	writeSpec(t, path, "")
	eventually(t, "an empty file turns the faults off", func() bool {
		_, err := b.Get(ctx, "stuck/a")
		return err == nil
	})
	eventually(t, "the stats file counts the injected faults", func() bool {
		data, err := os.ReadFile(path + StatsSuffix)
		var st Stats
		return err == nil && json.Unmarshal(data, &st) == nil && st.Injected >= 2 && st.Requests >= 5
	})
}

func TestHookRefusesABrokenFileAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults.json")
	t.Setenv(FaultsFileEnv, path)
	writeSpec(t, path, `{"error_rate": "high"}`)
	base, err := objstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	if _, err := WrapBucket(base, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("WrapBucket accepted a faults file that does not parse")
	}
}
