package feed

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// movingHorizons is a store's horizon that moves the first time it is read, as
// one does when another worker publishes between a poll's steps: that read
// answers the old horizon (none yet) and closes the Changed channel handed out
// before it, waking whoever took that one.
type movingHorizons struct {
	mu      sync.Mutex
	h       uint64
	ok      bool
	to      uint64
	moved   bool
	changed chan struct{}
}

func (m *movingHorizons) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *movingHorizons) Horizon(context.Context, registry.Target) (uint64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.h, m.ok
	if !m.moved {
		m.moved, m.h, m.ok = true, m.to, true
		close(m.changed)
		m.changed = make(chan struct{})
	}
	return h, ok, nil
}

// A long poll whose store's horizon moves between the poll's read of it and its
// wait is woken by that move and answers the rows it let through: Read takes the
// Changed channel before it reads the horizon. With the two swapped, the poll
// would wait on a channel taken after the move, and sleep until its deadline
// with rows deliverable (this test then fails on the empty page). Production
// failure it guards: a consumer's long poll that lags a whole FEED_MAX_WAIT
// behind a busy store, every time a seal lands mid-poll.
func TestALongPollIsWokenByAHorizonThatMovesWhileItReads(t *testing.T) {
	s := storetest.Open(t, objstoretest.Mem(t), "w1", true)
	storetest.AppendAndSeal(t, s, "a", 1, "b", 2)
	hz := &movingHorizons{to: ^uint64(0) - 1, changed: make(chan struct{})}
	start := time.Now()
	page, err := Read(context.Background(), hz, s, Request{Wait: 30 * time.Second, Options: store.ChangesOptions{Limit: 10}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Release()
	var ids []string
	for _, c := range page.Changes {
		ids = append(ids, c.Position.ID)
	}
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("the poll answered %v after %s; want [a b] as soon as the horizon moved", ids, time.Since(start))
	}
}
