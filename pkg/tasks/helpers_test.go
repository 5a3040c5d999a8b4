package tasks

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newStore starts an embedded etcd for the test and returns a store on it, under a
// prefix of its own, logging to the test's output.
func newStore(t *testing.T, opts ...Option) (*Queue, *clientv3.Client) {
	t.Helper()
	client, _ := etcdtest.Start(t)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts = append([]Option{WithLogger(logger), WithHolder("test")}, opts...)
	return New(client, "/test/"+t.Name(), opts...), client
}

// grant returns a fresh lease, standing for one master's session.
func grant(t *testing.T, client *clientv3.Client) clientv3.LeaseID {
	t.Helper()
	resp, err := client.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

func revoke(t *testing.T, client *clientv3.Client, lease clientv3.LeaseID) {
	t.Helper()
	if _, err := client.Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
}

// tgt is the target of a test's text, which must be valid.
func tgt(text string) registry.Target {
	target, err := registry.ParseTarget(text)
	if err != nil {
		panic(err)
	}
	return target
}

func enqueue(t *testing.T, s *Queue, kind Kind, target string, deps ...string) Task {
	t.Helper()
	task, dedup, err := s.Enqueue(context.Background(), kind, tgt(target), deps...)
	if err != nil {
		t.Fatalf("enqueue %s %s: %v", kind, target, err)
	}
	if dedup {
		t.Fatalf("enqueue %s %s: deduplicated onto %s, want a new task", kind, target, task.ID)
	}
	return task
}

func claim(t *testing.T, s *Queue, lease clientv3.LeaseID, kinds ...Kind) *Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), lease, ClaimFilter{Kinds: kinds})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

func noClaim(t *testing.T, s *Queue, lease clientv3.LeaseID) {
	t.Helper()
	c, err := s.Claim(context.Background(), lease, ClaimFilter{})
	if !errors.Is(err, ErrNoTask) {
		if c != nil {
			t.Fatalf("claimed %s (%s %s), want ErrNoTask", c.Task.ID, c.Task.Kind, c.Task.Target)
		}
		t.Fatalf("claim: %v, want ErrNoTask", err)
	}
}

func finish(t *testing.T, s *Queue, c *Claim, runErr error) Task {
	t.Helper()
	done, err := s.Finish(context.Background(), c, Result{Err: runErr})
	if err != nil {
		t.Fatalf("finish %s: %v", c.Task.ID, err)
	}
	return done
}

func get(t *testing.T, s *Queue, id string) Task {
	t.Helper()
	task, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return task
}

// raw returns a key's value and mod revision (0 when absent).
func raw(t *testing.T, client *clientv3.Client, key string) (string, int64) {
	t.Helper()
	resp, err := client.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}
