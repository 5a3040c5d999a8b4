package horizon_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/horizon"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

var target = registry.NewTarget(registry.KindGeneric, "feed")

func TestOfIsTheLowestOpenPromiseOrTheHighestOfAllClosed(t *testing.T) {
	for _, c := range []struct {
		recs []horizon.Record
		h    uint64
		ok   bool
	}{
		{nil, 0, false},
		{[]horizon.Record{{Promise: 5, Open: true}, {Promise: 3, Open: true}, {Promise: 9}}, 3, true},
		{[]horizon.Record{{Promise: 5}, {Promise: 9}}, 9, true},
		{[]horizon.Record{{Promise: 9, Open: true}, {Promise: 2}}, 9, true},
	} {
		if h, ok := horizon.Of(c.recs); h != c.h || ok != c.ok {
			t.Errorf("Of(%+v) = %d, %v; want %d, %v", c.recs, h, ok, c.h, c.ok)
		}
	}
}

func startView(t *testing.T, client *clientv3.Client) *horizon.View {
	t.Helper()
	v := horizon.NewView(client, "/h", nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return v
}

func waitHorizon(t *testing.T, v *horizon.View, want uint64) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("horizon %d", want), func() (bool, string) {
		h, ok, err := v.Horizon(context.Background(), target)
		return err == nil && ok && h == want, fmt.Sprintf("%d %v %v", h, ok, err)
	})
}

func TestOpenPublishCloseMoveTheStoresHorizon(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	v := startView(t, client)
	if _, ok, err := v.Horizon(ctx, target); ok || err != nil {
		t.Fatalf("horizon of a store without records: ok %v, %v", ok, err)
	}
	a := horizon.NewKeeper(client, "/h", "w1", nil, nil)
	b := horizon.NewKeeper(client, "/h", "w2", nil, nil)
	if floor, err := a.Open(ctx, target, "w1", 1); err != nil || floor != 0 {
		t.Fatalf("open w1: %d, %v", floor, err)
	}
	must(t, a.Publish(ctx, []horizon.Promise{{Target: target, Shard: "w1", Epoch: 1, Seq: 100}}))
	waitHorizon(t, v, 100)
	floor, err := b.Open(ctx, target, "w2", 1)
	if err != nil || floor != 100 {
		t.Fatalf("open w2: floor %d, %v; want 100 (w1's promise)", floor, err)
	}
	waitHorizon(t, v, 0) // w2 holds the store until it promises
	must(t, b.Publish(ctx, []horizon.Promise{{Target: target, Shard: "w2", Epoch: 1, Seq: 150}}))
	waitHorizon(t, v, 100)
	// A promise that does not move is not written; one that moves back is refused.
	must(t, a.Publish(ctx, []horizon.Promise{{Target: target, Shard: "w1", Epoch: 1, Seq: 90}}))
	must(t, a.Close(ctx, target, "w1", 1, 120, true))
	waitHorizon(t, v, 150) // w1 closed: w2 alone holds the store
	must(t, b.Close(ctx, target, "w2", 1, 160, false))
	waitHorizon(t, v, 160) // w2 left rows unsealed: it holds the store at its last promise
	recs := v.Records(target)
	if !recs["w2"].Open || recs["w1"].Open || recs["w1"].Promise != 120 {
		t.Fatalf("records %+v", recs)
	}
	must(t, a.DeleteStore(ctx, target))
	testwait.For(t, 10*time.Second, "records deleted", func() (bool, string) {
		_, ok, _ := v.Horizon(ctx, target)
		return !ok, ""
	})
}

// A writer fenced by a newer epoch (an adopter took its shard) must neither move
// the record nor reopen it.
func TestANewerEpochFencesTheOldWritersRecord(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	v := startView(t, client)
	old := horizon.NewKeeper(client, "/h", "w1", nil, nil)
	adopter := horizon.NewKeeper(client, "/h", "w2", nil, nil)
	if _, err := old.Open(ctx, target, "w1", 1); err != nil {
		t.Fatal(err)
	}
	must(t, old.Publish(ctx, []horizon.Promise{{Target: target, Shard: "w1", Epoch: 1, Seq: 10}}))
	if floor, err := adopter.Open(ctx, target, "w1", 2); err != nil || floor != 10 {
		t.Fatalf("adopter open: %d, %v", floor, err)
	}
	must(t, old.Publish(ctx, []horizon.Promise{{Target: target, Shard: "w1", Epoch: 1, Seq: 500}}))
	must(t, old.Close(ctx, target, "w1", 1, 600, true))
	waitHorizon(t, v, 10)
	if r := v.Records(target)["w1"]; r.Epoch != 2 || !r.Open || r.Instance != "w2" {
		t.Fatalf("record %+v; want the adopter's, open", r)
	}
	if _, err := old.Open(ctx, target, "w1", 1); !errors.Is(err, horizon.ErrFenced) {
		t.Fatalf("old writer reopened at epoch 1: %v; want ErrFenced", err)
	}
}

// The join race of the package doc: while shard w1 promises ever higher (and
// sometimes closes and reopens), writers open new shards. A horizon computed from
// any state without the new shard must be at or below the floor its Open returned,
// or the new shard's first row (numbered floor+1) could be one a feed already
// passed. Readers check every View state they see.
func TestAHorizonWithoutAJoiningShardNeverPassesItsFloor(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	v := startView(t, client)
	a := horizon.NewKeeper(client, "/h", "w1", nil, nil)
	if _, err := a.Open(ctx, target, "w1", 1); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		floors = map[string]uint64{}
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	wg.Add(2)
	go func() { // w1: promises, closes, reopens
		defer wg.Done()
		epoch, seq := uint64(1), uint64(1)
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			seq += uint64(rng.IntN(1000)) + 1
			if rng.IntN(10) == 0 {
				if err := a.Close(ctx, target, "w1", epoch, seq, true); err != nil {
					t.Error(err) // not Fatal: this is not the test's goroutine
					return
				}
				epoch++
				f, err := a.Open(ctx, target, "w1", epoch)
				if err != nil {
					t.Error(err)
					return
				}
				seq = max(seq, f)
				continue
			}
			if err := a.Publish(ctx, []horizon.Promise{{Target: target, Shard: "w1", Epoch: epoch, Seq: seq}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // readers' check
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-v.Changed():
			}
			recs := v.Records(target)
			var list []horizon.Record
			for _, r := range recs {
				list = append(list, r)
			}
			h, ok := horizon.Of(list)
			mu.Lock()
			for shard, floor := range floors {
				if _, seen := recs[shard]; !seen && ok && h > floor {
					t.Errorf("horizon %d without shard %s, whose floor was %d", h, shard, floor)
				}
			}
			mu.Unlock()
		}
	}()
	for i := range 40 {
		shard := fmt.Sprintf("j%d", i)
		k := horizon.NewKeeper(client, "/h", shard, nil, nil)
		mu.Lock()
		floors[shard] = ^uint64(0) // not opened yet: no bound to check
		mu.Unlock()
		f, err := k.Open(ctx, target, shard, 1)
		must(t, err)
		mu.Lock()
		floors[shard] = f
		mu.Unlock()
		must(t, k.Close(ctx, target, shard, 1, f, true))
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
