package tasks

import (
	"context"
	"errors"
	"testing"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	lease := grant(t, client)

	running := enqueue(t, s, KindCompact, "r1")
	claim(t, s, lease)
	queued := enqueue(t, s, KindCompact, "r2")
	finished := enqueue(t, s, KindVerify, "r3")
	c := claim(t, s, lease, KindVerify)
	finish(t, s, c, nil)

	got, err := s.Cancel(ctx, queued.ID)
	if err != nil || got.State != StateFailed || got.Error != "cancelled" {
		t.Fatalf("cancel queued: %+v, %v", got, err)
	}
	if got := get(t, s, queued.ID); got.State != StateFailed || got.Error != "cancelled" || got.FinishedAt.IsZero() {
		t.Fatalf("cancelled record %+v", got)
	}
	if v, _ := raw(t, client, s.keys.Queue(queued.ID)); v != "" {
		t.Fatal("cancelled task still in the queue")
	}
	enqueue(t, s, KindCompact, "r2") // the kind+target is free again

	for name, id := range map[string]string{"running": running.ID, "finished": finished.ID, "cancelled": queued.ID} {
		before, _ := raw(t, client, s.keys.Task(id))
		if _, err := s.Cancel(ctx, id); !errors.Is(err, ErrNotCancellable) {
			t.Errorf("cancel %s: %v, want ErrNotCancellable", name, err)
		}
		if after, _ := raw(t, client, s.keys.Task(id)); after != before {
			t.Errorf("cancel %s changed the record", name)
		}
	}
	if _, err := s.Cancel(ctx, "0190a4c2-0000-7000-8000-000000000002"); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("cancel missing: %v, want ErrTaskNotFound", err)
	}
	if _, err := s.Cancel(ctx, "../x"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("cancel bad id: %v, want ErrInvalidArgument", err)
	}
}
