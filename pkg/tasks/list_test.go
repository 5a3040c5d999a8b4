package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	lease := grant(t, client)
	var all []string
	for i := range 7 {
		all = append(all, enqueue(t, s, KindCompact, fmt.Sprintf("r%d", i)).ID)
	}
	merge := enqueue(t, s, KindMergeWAL, "generic:g")
	all = append(all, merge.ID)
	running := claim(t, s, lease) // r0's compact
	done := claim(t, s, lease)    // r1's compact
	finish(t, s, done, nil)

	pages := func(f ListFilter) []string {
		t.Helper()
		var ids []string
		for range 20 {
			got, next, err := s.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > max(f.Limit, 0) && f.Limit > 0 {
				t.Fatalf("page of %d with limit %d", len(got), f.Limit)
			}
			for _, task := range got {
				ids = append(ids, task.ID)
			}
			if next == "" {
				return ids
			}
			f.PageToken = next
		}
		t.Fatal("paging did not end")
		return nil
	}
	if got := pages(ListFilter{Limit: 3}); !slices.Equal(got, all) {
		t.Errorf("all tasks in pages of 3: %v, want %v", got, all)
	}
	reversed := slices.Clone(all)
	slices.Reverse(reversed)
	if got := pages(ListFilter{Limit: 3, NewestFirst: true}); !slices.Equal(got, reversed) {
		t.Errorf("newest first: %v, want %v", got, reversed)
	}
	if got := pages(ListFilter{State: StateQueued, Limit: 2}); !slices.Equal(got, append(slices.Clone(all[2:7]), merge.ID)) {
		t.Errorf("queued: %v", got)
	}
	if got := pages(ListFilter{State: StateRunning}); !slices.Equal(got, []string{running.Task.ID}) {
		t.Errorf("running: %v", got)
	}
	if got := pages(ListFilter{State: StateDone}); !slices.Equal(got, []string{done.Task.ID}) {
		t.Errorf("done: %v", got)
	}
	if got := pages(ListFilter{Kind: KindMergeWAL}); !slices.Equal(got, []string{merge.ID}) {
		t.Errorf("merge_wal: %v", got)
	}
	if got := pages(ListFilter{Target: tgt("generic:g"), Limit: 1}); !slices.Equal(got, []string{merge.ID}) {
		t.Errorf("target generic:g: %v", got)
	}
	for name, f := range map[string]ListFilter{
		"state": {State: "paused"}, "kind": {Kind: "vacuum"}, "target": {Target: registry.NewTarget(registry.KindRollout, "a/b")},
		"token": {PageToken: "../x"}, "limit": {Limit: -1},
	} {
		if _, _, err := s.List(ctx, f); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("bad %s: %v, want ErrInvalidArgument", name, err)
		}
	}
}
