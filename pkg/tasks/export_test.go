package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// exportSpec is an export's spec as callers hand it to the queue: package
// exportfmt's Spec, marshaled.
func exportSpec(t *testing.T, sub string) json.RawMessage {
	return specJSON(t, map[string]any{"destination": "file://" + t.TempDir() + "?prefix=" + sub + "/", "columns": []string{"a", "b"}})
}

func specJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func enqueueExport(t *testing.T, s *Queue, target string, spec json.RawMessage, id string) (Task, bool) {
	t.Helper()
	task, existing, err := s.EnqueueExport(context.Background(), tgt(target), spec, id)
	if err != nil {
		t.Fatalf("enqueue export of %s: %v", target, err)
	}
	return task, existing
}

// Two exports of one store to two destinations are two tasks: the dedupe key of
// kind+target, which makes a second compact the first, must not make a second
// export the first (its files would go to the first's destination).
func TestExportsOfOneStoreAreNotDeduplicated(t *testing.T) {
	s, client := newStore(t)
	first, existing1 := enqueueExport(t, s, "r", exportSpec(t, "one"), "")
	second, existing2 := enqueueExport(t, s, "r", exportSpec(t, "two"), "")
	if existing1 || existing2 || first.ID == second.ID {
		t.Fatalf("enqueues answered %s (existing %v) and %s (existing %v): want two new tasks", first.ID, existing1, second.ID, existing2)
	}
	if v, _ := raw(t, client, s.Keys().Dedupe(string(KindExport), "r")); v != "" {
		t.Errorf("an export left the dedupe key %q", v)
	}
	if !strings.Contains(string(first.Export), `?prefix=one/"`) {
		t.Errorf("task's spec %s", first.Export)
	}

	// They run one at a time: both take the target's maintenance lock.
	lease := grant(t, client)
	c := claim(t, s, lease, KindExport)
	if len(c.Task.Export) == 0 {
		t.Fatalf("claimed export without its spec: %+v", c.Task)
	}
	if _, err := s.Claim(context.Background(), lease, ClaimFilter{Kinds: []Kind{KindExport, KindCompact}}); !errors.Is(err, ErrNoTask) {
		t.Fatalf("a second export of the store was claimable while the first runs: %v", err)
	}
	finish(t, s, c, nil)
	claim(t, s, lease, KindExport)

	// The generic enqueue needs the spec it cannot carry.
	if _, _, err := s.Enqueue(context.Background(), KindExport, tgt("r")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Enqueue(export) = %v; want ErrInvalidArgument", err)
	}
}

// A client that sends its POST again (a timeout, a retry of its HTTP library)
// with the id it chose gets the task of its first request, and a second export
// is not enqueued; an id that names another task is refused (a 409), never
// answered with that task.
func TestExportIsIdempotentByItsID(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	id := uuid.NewString()
	spec := exportSpec(t, "x")
	first, existing := enqueueExport(t, s, "generic:g", spec, id)
	if existing || first.ID != id {
		t.Fatalf("first enqueue = %s (existing %v); want a new task %s", first.ID, existing, id)
	}
	// The same spec, sent again with other insignificant space.
	again, existing := enqueueExport(t, s, "generic:g", json.RawMessage(" "+strings.ReplaceAll(string(spec), ",", " , ")+"\n"), id)
	if !existing || again.ID != id || again.EnqueuedAt != first.EnqueuedAt {
		t.Fatalf("second enqueue = %+v (existing %v); want the first task", again, existing)
	}
	list, _, err := s.List(ctx, ListFilter{Kind: KindExport})
	if err != nil || len(list) != 1 {
		t.Fatalf("tasks after two POSTs with one id: %d (%v); want 1", len(list), err)
	}

	for name, other := range map[string]func() (Task, bool, error){
		"another destination": func() (Task, bool, error) {
			return s.EnqueueExport(ctx, tgt("generic:g"), exportSpec(t, "y"), id)
		},
		"another target": func() (Task, bool, error) { return s.EnqueueExport(ctx, tgt("g"), spec, id) },
		"another version": func() (Task, bool, error) {
			var v map[string]any
			_ = json.Unmarshal(spec, &v)
			v["version"] = 3
			return s.EnqueueExport(ctx, tgt("generic:g"), specJSON(t, v), id)
		},
	} {
		_, _, err := other()
		if !errors.Is(err, ErrIDInUse) || errclass.Of(err) != errclass.Exists {
			t.Errorf("%s under the same id: %v; want ErrIDInUse (Exists: a 409)", name, err)
		}
	}
	compact := enqueue(t, s, KindCompact, "generic:g")
	if _, _, err := s.EnqueueExport(ctx, tgt("generic:g"), spec, compact.ID); !errors.Is(err, ErrIDInUse) {
		t.Errorf("an export under a compact task's id: %v; want ErrIDInUse", err)
	}
	if _, _, err := s.EnqueueExport(ctx, tgt("generic:g"), spec, "not-a-uuid"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("an export under a malformed id: %v; want ErrInvalidArgument", err)
	}
}

func TestExportSpecMustBeAJSONObject(t *testing.T) {
	s, _ := newStore(t)
	for _, bad := range []string{"", "null", "[1]", `"x"`, "{", `{"destination": "x"} {}`} {
		if _, _, err := s.EnqueueExport(context.Background(), tgt("r"), json.RawMessage(bad), ""); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("spec %q: %v; want ErrInvalidArgument", bad, err)
		}
	}
}

// Progress is written by the claim's holder only: a master whose lease expired
// while its worker kept streaming must not overwrite the progress of the run
// that took the task over (an operator would watch a run that is not the one
// running).
func TestProgressOfAStaleClaimIsRefused(t *testing.T) {
	s, client := newStore(t)
	ctx := context.Background()
	task, _ := enqueueExport(t, s, "r", exportSpec(t, "p"), "")
	oldLease := grant(t, client)
	stale := claim(t, s, oldLease, KindExport)

	got, err := s.UpdateProgress(ctx, stale, Progress{Rows: 10, Files: 1, Bytes: 100, Estimate: 50, Worker: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Progress == nil || got.Progress.Rows != 10 || got.Progress.UpdatedAt.IsZero() {
		t.Fatalf("progress as written: %+v", got.Progress)
	}
	if rec := get(t, s, task.ID); rec.Progress == nil || rec.Progress.Rows != 10 || rec.Progress.Worker != "w1" {
		t.Fatalf("record's progress %+v; want the update", rec.Progress)
	}

	revoke(t, client, oldLease) // the old master's session is gone
	fresh := claim(t, s, grant(t, client), KindExport)
	if _, err := s.UpdateProgress(ctx, fresh, Progress{Rows: 3, Worker: "w2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateProgress(ctx, stale, Progress{Rows: 40, Worker: "w1"}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("stale claim's progress: %v; want ErrClaimLost", err)
	}
	if rec := get(t, s, task.ID); rec.Progress.Rows != 3 || rec.Progress.Worker != "w2" {
		t.Errorf("record's progress %+v after the stale write; want the new run's", rec.Progress)
	}

	// The final progress is the run's report.
	done, err := s.Finish(ctx, fresh, Result{Report: Report{Detail: "exported", Progress: &Progress{Rows: 7, Files: 1, Bytes: 70},
		Exported: &ExportResult{Manifest: "file:///x/_manifest.json", Version: 2, Rows: 7, Files: 1, Bytes: 70}}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := get(t, s, task.ID); rec.Progress.Rows != 7 || rec.Progress.UpdatedAt.IsZero() || rec.Exported == nil || rec.Exported.Rows != 7 || done.State != StateDone {
		t.Errorf("finished record: progress %+v, exported %+v", rec.Progress, rec.Exported)
	}
}

// Cancelling a running export asks its runner to stop (a watch sees it at
// once) and keeps the request through progress writes; a running compact runs
// to its end as before.
func TestCancelOfARunningExportAsksItsRunnerToStop(t *testing.T) {
	s, client := newStore(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	task, _ := enqueueExport(t, s, "r", exportSpec(t, "c"), "")
	c := claim(t, s, grant(t, client), KindExport)
	asked := s.WatchCancel(ctx, task.ID)

	if _, err := s.UpdateProgress(ctx, c, Progress{Rows: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
		t.Fatal("the watch fired before a cancel")
	default:
	}
	got, err := s.Cancel(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateRunning || !got.CancelRequested {
		t.Fatalf("cancel answered %s, cancel_requested %v; want running with the request", got.State, got.CancelRequested)
	}
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the runner's watch did not see the cancel request")
	}
	after, err := s.UpdateProgress(ctx, c, Progress{Rows: 2})
	if err != nil || !after.CancelRequested {
		t.Fatalf("progress after the cancel request: %+v, %v; want the request kept", after, err)
	}
	if again, err := s.Cancel(ctx, task.ID); err != nil || !again.CancelRequested {
		t.Errorf("cancelling again: %+v, %v; want the same answer", again, err)
	}
	// A watch started after the request fires too (it lists before it watches).
	select {
	case <-s.WatchCancel(ctx, task.ID):
	case <-time.After(10 * time.Second):
		t.Error("a watch started after the cancel request did not fire")
	}
	failed := finish(t, s, c, fmt.Errorf("export: %w", ErrCancelled))
	if failed.State != StateFailed || !strings.Contains(failed.Error, "cancelled") {
		t.Errorf("finished as %s %q", failed.State, failed.Error)
	}

	enqueue(t, s, KindCompact, "r")
	cc := claim(t, s, grant(t, client), KindCompact)
	if _, err := s.Cancel(ctx, cc.Task.ID); !errors.Is(err, ErrNotCancellable) {
		t.Errorf("cancel of a running compact: %v; want ErrNotCancellable", err)
	}
}

// A worker that died mid-export fails the run with a retryable error: the task
// goes back to the queue and runs again, up to MaxAttempts claims; a cancel
// request is never requeued, and a run whose claim was lost requeues nothing.
func TestRetryRequeuesAnExportUpToMaxAttempts(t *testing.T) {
	s, client := newStore(t)
	ctx := context.Background()
	task, _ := enqueueExport(t, s, "r", exportSpec(t, "r"), "")
	lease := grant(t, client)
	dead := errclass.Wrap(errclass.Unavailable, errors.New("worker w1: connection reset"))
	for attempt := 1; attempt < MaxAttempts; attempt++ {
		c := claim(t, s, lease, KindExport)
		if c.Task.Attempts != attempt {
			t.Fatalf("claim %d has attempts %d", attempt, c.Task.Attempts)
		}
		if !ShouldRetry(c, dead) {
			t.Fatalf("attempt %d: ShouldRetry = false for an unavailable worker", attempt)
		}
		if _, err := s.UpdateProgress(ctx, c, Progress{Rows: int64(attempt), Worker: "w1"}); err != nil {
			t.Fatal(err)
		}
		q, requeued, err := s.Retry(ctx, c, dead)
		if err != nil || !requeued || q.State != StateQueued {
			t.Fatalf("retry %d: %+v, %v, %v", attempt, q.State, requeued, err)
		}
		rec := get(t, s, task.ID)
		if rec.Progress == nil || rec.Progress.Worker != "w1" || !strings.Contains(rec.Detail, "connection reset") {
			t.Errorf("requeued record: progress %+v, detail %q; want both kept", rec.Progress, rec.Detail)
		}
	}
	last := claim(t, s, lease, KindExport)
	if ShouldRetry(last, dead) {
		t.Errorf("attempt %d of %d: ShouldRetry = true", last.Task.Attempts, MaxAttempts)
	}
	if ShouldRetry(last, errclass.Wrap(errclass.Invalid, errors.New("bad filter"))) || ShouldRetry(last, ErrCancelled) {
		t.Error("ShouldRetry of an invalid spec or a cancel")
	}
	if _, err := s.Cancel(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	if got, requeued, err := s.Retry(ctx, last, dead); err != nil || requeued || !got.CancelRequested {
		t.Errorf("retry of a task asked to stop: requeued %v, %v; want it left for Finish", requeued, err)
	}
	revoke(t, client, lease)
	if _, _, err := s.Retry(ctx, last, dead); !errors.Is(err, ErrClaimLost) {
		t.Errorf("retry under a lost claim: %v; want ErrClaimLost", err)
	}

	// Other kinds are retried by their sweeps, not requeued.
	enqueue(t, s, KindCompact, "g")
	cc := claim(t, s, grant(t, client), KindCompact)
	if ShouldRetry(cc, dead) {
		t.Error("ShouldRetry of a compact")
	}
}
