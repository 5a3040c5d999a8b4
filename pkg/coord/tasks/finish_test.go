package tasks

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A master that lost its lease (a long GC pause, a partition) must not record an
// outcome over the run of the master that took the task over.
func TestMasterThatLostItsClaimCannotFinish(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	task := enqueue(t, s, KindMergeWAL, "r1")
	stale := grant(t, client)
	lost := claim(t, s, stale)
	revoke(t, client, stale)

	for name, check := range map[string]func() (Task, error){
		"after recovery":     func() (Task, error) { return s.Finish(ctx, lost, Result{Detail: "late"}) },
		"release":            func() (Task, error) { return s.Release(ctx, lost) },
		"with failure":       func() (Task, error) { return s.Finish(ctx, lost, Result{Err: errors.New("x")}) },
		"before any recover": func() (Task, error) { return s.Finish(ctx, lost, Result{}) },
	} {
		before, beforeRev := raw(t, client, s.keys.Task(task.ID))
		if _, err := check(); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("%s: %v, want ErrClaimLost", name, err)
		}
		if after, afterRev := raw(t, client, s.keys.Task(task.ID)); after != before || afterRev != beforeRev {
			t.Fatalf("%s: record changed from %s to %s", name, before, after)
		}
	}

	current := claim(t, s, grant(t, client)) // recovers, then claims under a new lease
	before, beforeRev := raw(t, client, s.keys.Task(task.ID))
	if _, err := s.Finish(ctx, lost, Result{Detail: "late"}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("finish of a claim taken over: %v, want ErrClaimLost", err)
	}
	if after, afterRev := raw(t, client, s.keys.Task(task.ID)); after != before || afterRev != beforeRev {
		t.Fatalf("the lost claim changed the record from %s to %s", before, after)
	}
	if v, _ := raw(t, client, s.keys.Lock("r1")); v != current.Token {
		t.Fatalf("target lock = %q, want the current claim's token", v)
	}
	if done := finish(t, s, current, nil); done.State != StateDone {
		t.Fatalf("current holder's finish: %+v", done)
	}
}

func TestFinishRecordsOutcomeAndFreesTheTarget(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	lease := grant(t, client)
	task := enqueue(t, s, KindMergeWAL, "r1")
	c := claim(t, s, lease)
	done, err := s.Finish(ctx, c, Result{Detail: "merged 12 generations across 3/3 workers"})
	if err != nil {
		t.Fatal(err)
	}
	got := get(t, s, task.ID)
	if got.State != StateDone || got.Detail != done.Detail || got.FinishedAt.IsZero() || got.StartedAt.IsZero() ||
		got.Attempts != 1 || got.ClaimToken != "" || got.FencingToken != c.FencingToken {
		t.Fatalf("finished record %+v", got)
	}
	for _, key := range []string{s.keys.Running(task.ID), s.keys.Claim(task.ID), s.keys.Lock("r1"), s.keys.Dedupe(string(KindMergeWAL), "r1"), s.keys.Queue(task.ID)} {
		if v, _ := raw(t, client, key); v != "" {
			t.Errorf("%s = %q after finish, want it gone", key, v)
		}
	}
	if _, err := s.Finish(ctx, c, Result{}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("second finish: %v, want ErrClaimLost", err)
	}
}

// A compact that fails on every try must not be retried in a tight loop against
// a throttled account: its cooldown doubles with each failure in a row.
func TestCooldownBackoffGrowsAndBlocksClaims(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	const base, maxDelay = time.Minute, 3 * time.Minute
	s, client := newStore(t, WithClock(clock), WithCooldown(base, maxDelay))
	ctx := context.Background()
	lease := grant(t, client)

	// failures in a row -> cooldown
	for i, want := range []time.Duration{base, 2 * base, maxDelay, maxDelay} {
		enqueue(t, s, KindCompact, "r1")
		finish(t, s, claim(t, s, lease), errors.New("throttled"))
		cd, ok, err := s.Cooldown(ctx, KindCompact, "r1")
		if err != nil || !ok || cd.Failures != i+1 || !cd.Until.Equal(clock.Now().Add(want)) || cd.LastError != "throttled" {
			t.Fatalf("after failure %d: %+v ok=%v err=%v; want %d failures until now+%v", i+1, cd, ok, err, i+1, want)
		}
		enqueue(t, s, KindCompact, "r1")
		noClaim(t, s, lease)
		// Other kinds and other targets are not held back.
		other := enqueue(t, s, KindVerify, "r1")
		if c := claim(t, s, lease); c.Task.ID != other.ID {
			t.Fatalf("claimed %s %s, want the verify of r1", c.Task.Kind, c.Task.Target)
		} else {
			finish(t, s, c, nil)
		}
		clock.Advance(want - time.Second)
		noClaim(t, s, lease)
		clock.Advance(time.Second)
		c := claim(t, s, lease)
		if c.Task.Kind != KindCompact {
			t.Fatalf("claimed %s after the cooldown, want the compact", c.Task.Kind)
		}
		if i < 3 {
			// Put it back for the next round's failure.
			if _, err := s.Release(ctx, c); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Cancel(ctx, c.Task.ID); err != nil {
				t.Fatal(err)
			}
		} else {
			finish(t, s, c, nil) // success ends the cooldown
		}
	}
	if _, ok, err := s.Cooldown(ctx, KindCompact, "r1"); ok || err != nil {
		t.Fatalf("cooldown after a success: ok=%v err=%v, want none", ok, err)
	}
}

// merge_wal is retried at the next sweep: pending generations must not pile up
// behind a cooldown.
func TestMergeFailuresDoNotCoolDown(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	lease := grant(t, client)
	enqueue(t, s, KindMergeWAL, "r1")
	finish(t, s, claim(t, s, lease), errors.New("too many concurrent writers"))
	if _, ok, _ := s.Cooldown(context.Background(), KindMergeWAL, "r1"); ok {
		t.Fatal("merge failure left a cooldown")
	}
	enqueue(t, s, KindMergeWAL, "r1")
	claim(t, s, lease)
}

// A merge that fails on a corrupt object fails the same way at every sweep until an
// operator repairs the object: it must cool down like any other kind instead of
// being claimed, fanned out and failed again every MERGE_WAL_INTERVAL.
func TestHaltingMergeFailureCoolsDownAndASuccessEndsIt(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, client := newStore(t, WithClock(clock), WithCooldown(time.Minute, time.Hour))
	ctx := context.Background()
	lease := grant(t, client)
	enqueue(t, s, KindMergeWAL, "r1")
	const key = "rollout/r1/_versions/00000003.json"
	corrupt := errors.New("worker w1: manifest " + key + ": corrupt table object")
	if _, err := s.Finish(ctx, claim(t, s, lease), Result{Err: corrupt, Halt: true}); err != nil {
		t.Fatal(err)
	}
	cd, ok, err := s.Cooldown(ctx, KindMergeWAL, "r1")
	if err != nil || !ok || cd.Failures != 1 || !cd.Until.Equal(clock.Now().Add(time.Minute)) || cd.LastError != corrupt.Error() {
		t.Fatalf("cooldown after a halting merge failure: %+v ok=%v err=%v, want 1 failure for a minute naming %s", cd, ok, err, key)
	}
	enqueue(t, s, KindMergeWAL, "r1") // the next sweep's
	noClaim(t, s, lease)
	clock.Advance(time.Minute)
	finish(t, s, claim(t, s, lease), nil) // repaired
	if _, ok, err := s.Cooldown(ctx, KindMergeWAL, "r1"); ok || err != nil {
		t.Fatalf("cooldown after a merge succeeded: ok=%v err=%v, want none", ok, err)
	}
}
