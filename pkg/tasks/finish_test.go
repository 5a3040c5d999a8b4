package tasks

import (
	"context"
	"errors"
	"strings"
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
		"after recovery":     func() (Task, error) { return s.Finish(ctx, lost, Result{Report: Report{Detail: "late"}}) },
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
	if _, err := s.Finish(ctx, lost, Result{Report: Report{Detail: "late"}}); !errors.Is(err, ErrClaimLost) {
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
	done, err := s.Finish(ctx, c, Result{Report: Report{Detail: "merged 12 generations across 3/3 workers"}})
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

// A finished task keeps its run's stats beside its detail, a failed one its
// partial progress, and a task with nothing to count has no "stats" key. A record
// written before stats existed (none of that key) still decodes, every count
// zero: dashboards and metrics read it as a run that counted nothing, not as a
// corrupt record.
func TestTaskRecordKeepsStatsBesideDetail(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	lease := grant(t, client)

	merged := enqueue(t, s, KindMergeWAL, "r1")
	stats := Stats{Workers: 3, WorkersMerged: 3, GenerationsMerged: 12, RowsMerged: 4096, BaseVersion: 7}
	report := Report{Detail: "merged 12 generations across 3/3 workers", Stats: stats}
	if _, err := s.Finish(ctx, claim(t, s, lease), Result{Report: report}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, merged.ID); got.Stats != stats || got.Detail != report.Detail {
		t.Errorf("finished record: detail %q, stats %+v; want %q, %+v", got.Detail, got.Stats, report.Detail, stats)
	}
	const want = `"stats":{"workers":3,"workers_merged":3,"generations_merged":12,"rows_merged":4096,"base_version":7}`
	if v, _ := raw(t, client, s.keys.Task(merged.ID)); !strings.Contains(v, want) {
		t.Errorf("record %s: want %s", v, want)
	}

	partial := Stats{Workers: 2, WorkersMerged: 1, WorkersSkipped: 1, GenerationsMerged: 4}
	failed := enqueue(t, s, KindMergeWAL, "r2")
	if _, err := s.Finish(ctx, claim(t, s, lease), Result{Err: errors.New("unavailable: w2"), Report: Report{Stats: partial}}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, failed.ID); got.State != StateFailed || got.Stats != partial {
		t.Errorf("failed record: %s, stats %+v; want failed, %+v", got.State, got.Stats, partial)
	}

	empty := enqueue(t, s, KindVerify, "r3")
	finish(t, s, claim(t, s, lease), nil)
	if v, _ := raw(t, client, s.keys.Task(empty.ID)); strings.Contains(v, `"stats"`) {
		t.Errorf("record of a run that counted nothing: %s, want no stats key", v)
	}

	const id = "0190b5a4-0000-7000-8000-000000000001"
	old := `{"id":"` + id + `","kind":"merge_wal","target":"r4","state":"done",` +
		`"detail":"merged 2 generations across 1/1 worker","enqueued_at":"2025-01-02T03:04:05Z","attempts":1}`
	if _, err := client.Put(ctx, s.keys.Task(id), old); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, id); got.Stats != (Stats{}) || got.Detail != "merged 2 generations across 1/1 worker" || got.State != StateDone {
		t.Errorf("record without stats decoded as %+v", got)
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
		cd, ok, err := s.Cooldown(ctx, KindCompact, tgt("r1"))
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
	if _, ok, err := s.Cooldown(ctx, KindCompact, tgt("r1")); ok || err != nil {
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
	if _, ok, _ := s.Cooldown(context.Background(), KindMergeWAL, tgt("r1")); ok {
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
	cd, ok, err := s.Cooldown(ctx, KindMergeWAL, tgt("r1"))
	if err != nil || !ok || cd.Failures != 1 || !cd.Until.Equal(clock.Now().Add(time.Minute)) || cd.LastError != corrupt.Error() {
		t.Fatalf("cooldown after a halting merge failure: %+v ok=%v err=%v, want 1 failure for a minute naming %s", cd, ok, err, key)
	}
	enqueue(t, s, KindMergeWAL, "r1") // the next sweep's
	noClaim(t, s, lease)
	clock.Advance(time.Minute)
	finish(t, s, claim(t, s, lease), nil) // repaired
	if _, ok, err := s.Cooldown(ctx, KindMergeWAL, tgt("r1")); ok || err != nil {
		t.Fatalf("cooldown after a merge succeeded: ok=%v err=%v, want none", ok, err)
	}
}
