package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// max_consumer_lag is kept in the registry object as a duration an operator
// reads ("10m0s"), comes back from Get as it was created, and an object written
// before the option existed reads as off: the stores created before it must
// not start refusing adds.
func TestMaxConsumerLagIsKeptReadablyAndOffWhenAbsent(t *testing.T) {
	ctx := context.Background()
	bucket := objstoretest.Mem(t)
	r := New(bucket)
	if _, err := r.Create(ctx, Entry{Name: "r", Kind: KindRollout, MaxConsumerLag: Duration(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	raw, err := bucket.GetMax(ctx, key(KindRollout, "r"), maxEntryBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"max_consumer_lag":"10m0s"`) {
		t.Errorf("registry object %s; want max_consumer_lag as \"10m0s\"", raw)
	}
	got, err := r.Get(ctx, KindRollout, "r")
	if err != nil || time.Duration(got.MaxConsumerLag) != 10*time.Minute {
		t.Fatalf("Get: %+v, %v; want max_consumer_lag 10m", got, err)
	}

	old := `{"name":"old","kind":"rollout","uri":"rollout/old","created_at":"2026-01-01T00:00:00Z"}`
	if err := bucket.PutIfAbsent(ctx, key(KindRollout, "old"), []byte(old)); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Get(ctx, KindRollout, "old"); err != nil || got.MaxConsumerLag != 0 {
		t.Fatalf("an object without the option: %+v, %v; want it off", got, err)
	}
	if _, err := r.Create(ctx, Entry{Name: "off", Kind: KindRollout}); err != nil {
		t.Fatal(err)
	}
	if raw, _ := bucket.GetMax(ctx, key(KindRollout, "off"), maxEntryBytes); strings.Contains(string(raw), "max_consumer_lag") {
		t.Errorf("a store without the option writes it anyway: %s", raw)
	}
	if _, err := r.Create(ctx, Entry{Name: "neg", Kind: KindRollout, MaxConsumerLag: Duration(-time.Second)}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("negative max_consumer_lag: %v, want ErrInvalidOption", err)
	}
}

func TestParseMaxConsumerLagNamesABadValue(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "0": 0, "10m": 10 * time.Minute, "1h30m": 90 * time.Minute} {
		if got, err := ParseMaxConsumerLag(in); err != nil || got != want {
			t.Errorf("ParseMaxConsumerLag(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"ten minutes", "10", "-5m"} {
		_, err := ParseMaxConsumerLag(bad)
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseMaxConsumerLag(%q) = %v; want ErrInvalidOption naming the value", bad, err)
		}
	}
}
