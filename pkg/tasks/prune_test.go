package tasks

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestPruneKeepsLiveAndDependedOnTasks(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, client := newStore(t, WithClock(clock))
	ctx := context.Background()
	lease := grant(t, client)

	// Six finished tasks, one minute apart; the oldest is a dependency of a queued task.
	var finished []Task
	for i := range 6 {
		enqueue(t, s, KindMergeWAL, fmt.Sprintf("f%d", i))
		finished = append(finished, finish(t, s, claim(t, s, lease), nil))
		clock.Advance(time.Minute)
	}
	holder := enqueue(t, s, KindCompact, "f0", finished[0].ID)
	// Keep it queued: its target is locked by a running task.
	running := enqueue(t, s, KindMergeWAL, "f0")
	if c := claim(t, s, lease, KindMergeWAL); c.Task.ID != running.ID {
		t.Fatalf("claimed %s", c.Task.ID)
	}
	queued := enqueue(t, s, KindVerify, "q")

	// keep 2: deletes finished[1..3]; finished[0] is depended on.
	n, err := s.Prune(ctx, 2, 0)
	if err != nil || n != 3 {
		t.Fatalf("prune keep 2: %d, %v; want 3", n, err)
	}
	for i, f := range finished {
		_, err := s.Get(ctx, f.ID)
		gone := errors.Is(err, ErrTaskNotFound)
		if want := i >= 1 && i <= 3; gone != want {
			t.Errorf("finished[%d]: gone=%v (%v), want gone=%v", i, gone, err, want)
		}
	}
	for _, live := range []Task{holder, running, queued} {
		if _, err := s.Get(ctx, live.ID); err != nil {
			t.Errorf("live task %s: %v", live.ID, err)
		}
	}

	// By age: everything finished more than 90 s ago, except the dependency.
	n, err = s.Prune(ctx, 0, 90*time.Second)
	if err != nil || n != 1 { // finished[4] finished 2 min ago, finished[5] 1 min ago
		t.Fatalf("prune by age: %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, finished[0].ID); err != nil {
		t.Fatalf("the depended-on task was pruned: %v", err)
	}

	// Once the dependent is done, its dependency may go.
	if _, err := s.Cancel(ctx, holder.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, 1, 0); err != nil || n != 2 { // finished[0] and finished[5]; keeps the cancelled one
		t.Fatalf("prune after the dependent finished: %d, %v; want 2", n, err)
	}
	if _, err := s.Get(ctx, finished[0].ID); !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("dependency still there after its dependent finished: %v", err)
	}
	if n, err := s.Prune(ctx, 0, 0); err != nil || n != 0 {
		t.Fatalf("prune with both rules off: %d, %v", n, err)
	}
}

func TestPruneDropsLongExpiredCooldowns(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, client := newStore(t, WithClock(clock), WithCooldown(time.Minute, time.Minute))
	ctx := context.Background()
	enqueue(t, s, KindCompact, "r1")
	finish(t, s, claim(t, s, grant(t, client)), errors.New("boom"))
	clock.Advance(time.Hour)
	if _, err := s.Prune(ctx, 0, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Cooldown(ctx, KindCompact, tgt("r1")); !ok {
		t.Fatal("cooldown pruned before maxAge")
	}
	clock.Advance(2 * time.Hour)
	if _, err := s.Prune(ctx, 0, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Cooldown(ctx, KindCompact, tgt("r1")); ok {
		t.Fatal("cooldown that expired more than maxAge ago survived Prune")
	}
}
