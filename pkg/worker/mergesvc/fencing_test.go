package mergesvc

import (
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Concurrent admissions keep the newest token per target and lane; every refusal
// is of a token older than one admitted before it in the same lane, and the
// lanes fence apart: a maintenance claim taken while a merge runs does not make
// the merge's later calls stale.
func TestFencingTokensKeepTheNewestUnderConcurrency(t *testing.T) {
	// Two stores of one name and two kinds: each target is fenced apart.
	rolloutA, genericA := registry.NewTarget(registry.KindRollout, "a"), registry.NewTarget(registry.KindGeneric, "a")
	f := fencingTokens{newest: map[fenced]int64{}}
	lanes := []tasks.Lane{tasks.LaneMerge, tasks.LaneMaintenance}
	var wg sync.WaitGroup
	for _, target := range []registry.Target{rolloutA, genericA} {
		for l, lane := range lanes {
			for tok := int64(1); tok <= 200; tok++ {
				wg.Go(func() {
					// Each lane's tokens interleave with the other's, as etcd revisions do.
					tok := 2*tok + int64(l)
					if err := f.admit(target, lane, tok); err != nil && !strings.Contains(err.Error(), ErrStaleFencingToken.Error()) {
						t.Errorf("admit(%s, %s, %d): %v", target, lane, tok, err)
					}
				})
			}
		}
	}
	wg.Wait()
	for _, target := range []registry.Target{rolloutA, genericA} {
		for l, lane := range lanes {
			if got, want := f.newest[fenced{target, lane}], 400+int64(l); got != want {
				t.Errorf("newest[%s, %s] = %d, want %d", target, lane, got, want)
			}
		}
	}
	if err := f.admit(rolloutA, tasks.LaneMerge, 390); err == nil {
		t.Error("a merge token of 390 admitted after 400")
	}
	if err := f.admit(rolloutA, tasks.LaneMaintenance, 500); err != nil {
		t.Fatal(err)
	}
	if err := f.admit(rolloutA, tasks.LaneMerge, 401); err != nil {
		t.Errorf("a merge token of 401 after a maintenance token of 500: %v, want it admitted (its own lane's newest is 400)", err)
	}
}
