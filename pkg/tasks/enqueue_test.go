package tasks

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// The commit storm of the reference system began with every worker merging its
// own shard on its own timer; the master's answer is one deduplicated merge_wal
// task per target, however many sweeps or replicas ask for it at once.
func TestConcurrentEnqueueOfOneKindAndTargetMakesOneTask(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	const callers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
	)
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			task, dedup, err := s.Enqueue(context.Background(), KindMergeWAL, tgt("generic:gs"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[task.ID]++
			if !dedup {
				created++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d callers got tasks %v with %d created, want one task created once and %d deduplicated", callers, ids, created, callers-1)
	}
	if n, err := s.QueueDepth(context.Background()); err != nil || n != 1 {
		t.Fatalf("queue depth %d, %v; want 1", n, err)
	}
}

func TestEnqueueOfRunningKindAndTargetReturnsTheRunningTask(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	first := enqueue(t, s, KindCompact, "r1")
	c := claim(t, s, grant(t, client))
	again, dedup, err := s.Enqueue(context.Background(), KindCompact, tgt("r1"))
	if err != nil || !dedup || again.ID != first.ID || again.State != StateRunning {
		t.Fatalf("enqueue during run: %+v dedup=%v err=%v; want the running task %s", again, dedup, err, c.Task.ID)
	}
	// Another kind on the same target is a different task.
	other := enqueue(t, s, KindVerify, "r1")
	if other.ID == first.ID {
		t.Fatal("verify deduplicated onto compact")
	}
}

func TestEnqueueAfterFinishMakesANewTask(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	lease := grant(t, client)
	for _, outcome := range []error{nil, errors.New("boom")} {
		first := enqueue(t, s, KindMergeWAL, "r1")
		finish(t, s, claim(t, s, lease), outcome)
		second, dedup, err := s.Enqueue(context.Background(), KindMergeWAL, tgt("r1"))
		if err != nil || dedup || second.ID == first.ID {
			t.Fatalf("enqueue after finish (%v): %+v dedup=%v err=%v; want a new task", outcome, second, dedup, err)
		}
		finish(t, s, claim(t, s, lease), nil)
	}
}

// A dedupe key left pointing at a finished or vanished task (an operator's edit,
// or a bug in an older version) must not block the kind+target forever.
func TestEnqueueReplacesStaleDedupeKey(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	done := enqueue(t, s, KindCompact, "r1")
	finish(t, s, claim(t, s, grant(t, client)), nil)

	for _, stale := range []string{done.ID, "0190a4c2-0000-7000-8000-000000000000"} {
		if _, err := client.Put(ctx, s.keys.Dedupe(string(KindCompact), "r1"), stale); err != nil {
			t.Fatal(err)
		}
		fresh, dedup, err := s.Enqueue(ctx, KindCompact, tgt("r1"))
		if err != nil || dedup || fresh.ID == stale {
			t.Fatalf("enqueue over stale dedupe %s: %+v dedup=%v err=%v", stale, fresh, dedup, err)
		}
		if v, _ := raw(t, client, s.keys.Dedupe(string(KindCompact), "r1")); v != fresh.ID {
			t.Fatalf("dedupe key = %q, want %s", v, fresh.ID)
		}
		if _, err := s.Cancel(ctx, fresh.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEnqueueRejectsBadKindAndTargets(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	_, _, err := s.Enqueue(ctx, Kind("vacuum"), tgt("r1"))
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `"vacuum"`) {
		t.Errorf("unknown kind: %v; want ErrInvalidArgument naming it", err)
	}
	for target, problem := range map[string]string{
		"generic:":     "empty",
		"a/b":          `'/' not allowed`,
		"generic:../x": "must start with",
		"":             "empty",
		"_registry":    "reserved",
	} {
		// A target made without parsing (registry.NewTarget) is checked as its text is.
		kind, name := registry.KindRollout, target
		if rest, ok := strings.CutPrefix(target, "generic:"); ok {
			kind, name = registry.KindGeneric, rest
		}
		_, _, err := s.Enqueue(ctx, KindMergeWAL, registry.NewTarget(kind, name))
		if !errors.Is(err, ErrInvalidArgument) || !errors.Is(err, registry.ErrInvalidName) ||
			!strings.Contains(err.Error(), problem) || !strings.Contains(err.Error(), `"`+target+`"`) {
			t.Errorf("target %q: %v; want ErrInvalidArgument and registry.ErrInvalidName naming %q", target, err, problem)
		}
	}
	if _, _, err := s.Enqueue(ctx, KindMergeWAL, tgt("r1"), "not-a-uuid"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad dependency id: %v; want ErrInvalidArgument", err)
	}
	resp, err := client.Get(ctx, s.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("rejected enqueues wrote %d keys (%v)", resp.Count, err)
	}
}

func TestEnqueueWithMissingDependencyFails(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	missing := "0190a4c2-0000-7000-8000-000000000001"
	_, _, err := s.Enqueue(context.Background(), KindCompact, tgt("r1"), missing)
	if !errors.Is(err, ErrTaskNotFound) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("enqueue with missing dependency: %v; want ErrTaskNotFound naming %s", err, missing)
	}
	if n, _ := s.QueueDepth(context.Background()); n != 0 {
		t.Fatalf("queue depth %d after a refused enqueue", n)
	}
}

// Operators read the store with etcdctl: keys and values must be what the design
// handbook says.
func TestKeyLayoutIsReadable(t *testing.T) {
	t.Parallel()
	client, _ := etcdtest.Start(t)
	s := New(client, "/tidemark/", WithHolder("m1"))
	ctx := context.Background()
	task, _, err := s.Enqueue(ctx, KindMergeWAL, tgt("generic:gs"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/tidemark/tasks/" + task.ID:            `"state":"queued"`,
		"/tidemark/queue/" + task.ID:            `"target":"generic:gs"`,
		"/tidemark/dedupe/merge_wal/generic:gs": task.ID,
	}
	for key, part := range want {
		if v, _ := raw(t, client, key); !strings.Contains(v, part) {
			t.Errorf("%s = %q, want it to contain %q", key, v, part)
		}
	}
	lease := grant(t, client)
	c, err := s.Claim(ctx, lease, ClaimFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"/tidemark/claims/" + task.ID, "/tidemark/target-locks/generic:gs"} {
		resp, err := client.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != c.Token || resp.Kvs[0].Lease != int64(lease) {
			t.Errorf("%s: %v %v; want the token under the claimer's lease", key, resp, err)
		}
	}
	if !strings.HasPrefix(c.Token, "m1/") {
		t.Errorf("token %q does not name the holder", c.Token)
	}
	if v, _ := raw(t, client, "/tidemark/running/"+task.ID); !strings.Contains(v, `"state":"running"`) {
		t.Errorf("running index = %q", v)
	}
}
