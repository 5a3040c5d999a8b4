package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// watchLog runs d.Watch until the test ends and records the instance ids of each
// list it reports.
type watchLog struct {
	mu    sync.Mutex
	lists [][]string
}

func startWatch(t *testing.T, d *Discovery) *watchLog {
	t.Helper()
	l := &watchLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Watch(ctx, func(ws []Worker) {
			ids := []string{}
			for _, w := range ws {
				ids = append(ids, w.InstanceID)
			}
			l.mu.Lock()
			l.lists = append(l.lists, ids)
			l.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(registrationLiveness):
			t.Error("Watch did not return after its context was cancelled")
		}
	})
	return l
}

// reported waits until the last list reported is want.
func (l *watchLog) reported(t *testing.T, want ...string) {
	t.Helper()
	testwait.For(t, registrationLiveness, "the watch to report the members", func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.lists) == 0 {
			return false, "nothing reported"
		}
		last := l.lists[len(l.lists)-1]
		return slices.Equal(last, want), fmt.Sprintf("last list %v, want %v", last, want)
	})
}

// The master closes a worker's connection when the worker leaves: Watch must
// report a deregistration (the lease revoked, or expired) without waiting for
// anything else to happen.
func TestWatchReportsRegistrationsAndDeregistrations(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	w2 := testRecord()
	w2.InstanceID = "w2"
	if _, err := client.Put(ctx, "/wt/workers/w2", string(mustJSON(t, w2))); err != nil {
		t.Fatal(err)
	}
	l := startWatch(t, &Discovery{Client: client, Prefix: "/wt"})
	l.reported(t, "w2")

	stop := runRegistration(t, client, "/wt")
	l.reported(t, "w1", "w2")

	stop() // revokes the lease
	l.reported(t, "w2")

	lease, err := client.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, "/wt/workers/w2", string(mustJSON(t, w2)), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	l.reported(t) // w2's lease was not kept alive and expired
}

func mustJSON(t *testing.T, w Worker) []byte {
	t.Helper()
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
