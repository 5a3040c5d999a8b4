package master

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/pending"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// skewedShard is one worker's shard of every store: what is sealed and not yet
// merged, per store. A merge of a store takes all of it, as a real merge takes
// what the worker had sealed when it was called.
type skewedShard struct {
	mu      sync.Mutex
	pending map[string][]time.Time // seal times by target
	pub     *pending.Publisher
}

func (s *skewedShard) seal(target string, at time.Time) {
	s.mu.Lock()
	s.pending[target] = append(s.pending[target], at)
	s.mu.Unlock()
	s.pub.Notify()
}

// merge takes target's pending generations and returns their seal times.
func (s *skewedShard) merge(target string) []time.Time {
	s.mu.Lock()
	taken := s.pending[target]
	delete(s.pending, target)
	s.mu.Unlock()
	s.pub.Notify()
	return taken
}

func (s *skewedShard) entries() []pending.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pending.Entry
	for target, seals := range s.pending {
		out = append(out, pending.Entry{Target: registry.MustParseTarget(target), Generations: len(seals), Bytes: int64(len(seals)), OldestSealedAt: seals[0]})
	}
	return out
}

// TestMergesOnDemandDoNotStarveQuietStores: one hot store takes 90% of the seals
// and 50 quiet stores share the rest, through the real pending records, merges on
// demand, task queue and scheduler (the merges themselves are simulated: a run
// takes what the shard has sealed). The invariant it guards is fairness: the hot
// store, due again the moment each of its merges ends, must not keep the quiet
// stores' merges waiting. The queue is FIFO with one live merge per store, so a
// quiet store's merge, once enqueued, waits for at most the hot store's merge
// already queued before it: the test checks that count, and that every quiet
// generation is merged within MERGE_MAX_DELAY plus a bound for the record's and
// the queue's lags (loose: a loaded CI machine).
func TestMergesOnDemandDoNotStarveQuietStores(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const (
		prefix   = "/fair"
		quiet    = 50
		maxDelay = time.Second
		sealing  = 5 * time.Second
		slack    = 10 * time.Second
	)
	log := slog.New(slog.DiscardHandler)
	ts := tasks.New(client, prefix, tasks.WithLogger(log))
	lease, err := client.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	shard := &skewedShard{pending: map[string][]time.Time{}}
	shard.pub = pending.NewPublisher(client, shard.entries, func() clientv3.LeaseID { return lease.ID },
		pending.PublisherConfig{Prefix: prefix, Instance: "w1", MinInterval: 50 * time.Millisecond})

	var mu sync.Mutex
	var hotStarts []time.Time
	late := map[string]time.Duration{} // quiet target: worst seal-to-merge
	hotAhead := map[string]int{}       // quiet target: most hot merges started between its enqueue and its start
	runner := RunnerFunc(func(ctx context.Context, c *tasks.Claim) (tasks.Report, error) {
		start := time.Now()
		time.Sleep(20 * time.Millisecond) // a merge's time
		sealed := shard.merge(c.Task.Target.String())
		mu.Lock()
		defer mu.Unlock()
		if c.Task.Target.String() == "hot" {
			hotStarts = append(hotStarts, start)
			return tasks.Report{}, nil
		}
		ahead := 0
		for _, h := range hotStarts {
			if h.After(c.Task.EnqueuedAt) {
				ahead++
			}
		}
		hotAhead[c.Task.Target.String()] = max(hotAhead[c.Task.Target.String()], ahead)
		for _, s := range sealed {
			late[c.Task.Target.String()] = max(late[c.Task.Target.String()], start.Sub(s))
		}
		return tasks.Report{}, nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { shard.pub.Run(ctx) })
	sched := NewScheduler(SchedulerConfig{Tasks: ts, Lease: func() clientv3.LeaseID { return lease.ID },
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: runner}, MergeConcurrency: 2, PollInterval: 10 * time.Millisecond})
	wg.Go(func() { sched.Run(ctx, time.Second) })
	demand := scanner.NewMergeDemand(client, ts, scanner.StaticLease(lease.ID), scanner.DemandConfig{
		MinGenerations: 8, MaxDelay: maxDelay, Logger: log})
	wg.Go(func() { demand.Run(ctx) })

	// Seal: nine of every ten generations into the hot store.
	rng := rand.New(rand.NewPCG(1, 2))
	sealedQuiet := map[string]bool{}
	for end := time.Now().Add(sealing); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		target := "hot"
		if rng.IntN(10) == 0 {
			target = fmt.Sprintf("quiet-%02d", rng.IntN(quiet))
			sealedQuiet[target] = true
		}
		shard.seal(target, time.Now())
	}
	testwait.For(t, 60*time.Second, "every store merged", func() (bool, string) {
		left := shard.entries()
		return len(left) == 0, fmt.Sprintf("pending: %+v", left)
	})

	mu.Lock()
	defer mu.Unlock()
	if len(hotStarts) < 3 {
		t.Fatalf("the hot store was merged %d times in %s: merges on demand did not keep it going", len(hotStarts), sealing)
	}
	for target := range sealedQuiet {
		if n := hotAhead[target]; n > 2 {
			t.Errorf("%s waited behind %d merges of the hot store after it was enqueued, want at most 2", target, n)
		}
		if d := late[target]; d > maxDelay+slack {
			t.Errorf("%s: a generation waited %s for its merge, want at most MERGE_MAX_DELAY %s + %s", target, d, maxDelay, slack)
		}
	}
	t.Logf("%d quiet stores sealed into, %d hot merges; worst quiet seal-to-merge %s",
		len(sealedQuiet), len(hotStarts), func() time.Duration {
			var w time.Duration
			for _, d := range late {
				w = max(w, d)
			}
			return w
		}())
}
