package consumers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

func pos(seq uint64, id string) rowkey.Position { return rowkey.Position{Seq: seq, ID: id} }

// st, st2 and gst are stores whose keys share a text prefix ("s", "s.2",
// "generic:s"): an operation on one must not reach the others.
var (
	st  = registry.MustParseTarget("s")
	st2 = registry.MustParseTarget("s.2")
	gst = registry.MustParseTarget("generic:s")
)

func TestCommitMovesForwardOnlyAndAnEqualCommitWritesNothing(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	c := New(client, "/consumers-order", WithClock(clk))

	if _, err := c.Get(ctx, st, "trainer"); !errors.Is(err, ErrNotFound) || errclass.Of(err) != errclass.Gone {
		t.Fatalf("Get before any commit: %v, want ErrNotFound (gone)", err)
	}
	first, err := c.Commit(ctx, st, "trainer", pos(100, "b"))
	if err != nil || first.Cursor != pos(100, "b") || !first.CommittedAt.Equal(t0) || first.Revision == 0 {
		t.Fatalf("first commit = %+v, %v", first, err)
	}
	clk.SetTime(t0.Add(time.Minute))
	// The same page committed again: a success, nothing written.
	again, err := c.Commit(ctx, st, "trainer", pos(100, "b"))
	if err != nil || again.Revision != first.Revision || !again.CommittedAt.Equal(t0) {
		t.Fatalf("equal commit = %+v, %v; want the stored record unchanged (revision %d)", again, err, first.Revision)
	}
	// Behind, by _seq and by id at the same _seq: refused, naming the committed cursor.
	for _, behind := range []rowkey.Position{pos(99, "z"), pos(100, "a"), {}} {
		_, err := c.Commit(ctx, st, "trainer", behind)
		var be *BehindError
		if !errors.As(err, &be) || !errors.Is(err, ErrBehind) || be.Committed.Cursor != pos(100, "b") || be.Cursor != behind {
			t.Fatalf("commit of %+v behind (100, b): %v, want a BehindError naming the committed cursor", behind, err)
		}
		if !strings.Contains(err.Error(), pos(100, "b").Cursor()) || errclass.Of(err) != errclass.Precondition {
			t.Fatalf("%v (class %s): want the committed cursor named, class precondition", err, errclass.Of(err))
		}
	}
	ahead, err := c.Commit(ctx, st, "trainer", pos(100, "c"))
	if err != nil || ahead.Cursor != pos(100, "c") || !ahead.CommittedAt.Equal(t0.Add(time.Minute)) || ahead.Revision <= first.Revision {
		t.Fatalf("commit ahead = %+v, %v", ahead, err)
	}
	got, err := c.Get(ctx, st, "trainer")
	if err != nil || got != ahead {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, ahead)
	}
	// The value is readable JSON for an operator.
	resp, err := client.Get(ctx, "/consumers-order/consumers/s/trainer")
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"cursor":"`+pos(100, "c").Cursor()+`"`) {
		t.Fatalf("stored value %v, %v", resp.Kvs, err)
	}
}

// Two instances of one consumer (a trainer restarted while its old pod still
// runs) commit at once: the cursor must end at the larger of what they
// committed, and must never be seen going back on the way.
func TestConcurrentCommitsOfOneConsumerNeverMoveItBackAndEndAtTheMax(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	c := New(client, "/consumers-race")
	const key = "/consumers-race/consumers/generic:s/trainer"

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	// The watch starts at the revision before the first commit: it sees every write.
	start, err := client.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	watch := client.Watch(wctx, key, clientv3.WithRev(start.Header.Revision+1))

	const instances, commits = 2, 200
	maxes := make([]rowkey.Position, instances)
	var wg sync.WaitGroup
	for i := range instances {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for k := range uint64(commits) {
				// Both move forward at about the same pace, each a little ahead
				// of the other by turns: many writes, many lost races.
				p := pos(k*4+rng.Uint64N(12), fmt.Sprintf("id%02d", rng.IntN(20)))
				if maxes[i].Less(p) {
					maxes[i] = p
				}
				_, err := c.Commit(ctx, gst, "trainer", p)
				if err != nil && !errors.Is(err, ErrBehind) {
					t.Errorf("instance %d: commit %+v: %v", i, p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	want := maxes[0]
	if want.Less(maxes[1]) {
		want = maxes[1]
	}
	got, err := c.Get(ctx, gst, "trainer")
	if err != nil || got.Cursor != want {
		t.Fatalf("final cursor %+v, %v; want the max of every commit, %+v", got.Cursor, err, want)
	}

	// Every write the key saw moved it forward.
	var last rowkey.Position
	writes := 0
	for writes == 0 || last != want {
		select {
		case wr := <-watch:
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range wr.Events {
				r, err := decode(key, gst, "trainer", ev.Kv.Value, ev.Kv.ModRevision)
				if err != nil {
					t.Fatal(err)
				}
				if writes > 0 && !last.Less(r.Cursor) {
					t.Fatalf("write %d moved the cursor from %+v to %+v: not forward", writes, last, r.Cursor)
				}
				last = r.Cursor
				writes++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch: %d writes seen, last %+v; never reached the final %+v", writes, last, want)
		}
	}
	t.Logf("%d commits by %d instances, %d writes", instances*commits, instances, writes)
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"trainer", "t", "_x", "ppo-run.3", "A_b-9", strings.Repeat("a", MaxNameLen)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "-x", ".hidden", "a/b", "a b", "é", "a:b", "a%2F", strings.Repeat("a", MaxNameLen+1)} {
		err := ValidateName(bad)
		if !errors.Is(err, ErrInvalidName) || errclass.Of(err) != errclass.Invalid {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName (invalid)", bad, err)
		}
	}
	c := New(nil, "")
	if _, err := c.Commit(context.Background(), st, "a/b", pos(1, "x")); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("Commit with a bad name: %v, want ErrInvalidName before any etcd call", err)
	}
}

// One store's consumers are listed and deleted without touching those of a
// store whose name extends it, or of the other kind's store of that name.
func TestListAndDeleteStoreKeepToTheirStore(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	c := New(client, "/consumers-list")
	commit := func(target registry.Target, consumer string) {
		t.Helper()
		if _, err := c.Commit(ctx, target, consumer, pos(5, consumer)); err != nil {
			t.Fatal(err)
		}
	}
	for _, cons := range []string{"b", "a", "c"} {
		commit(st, cons)
	}
	commit(st2, "a")
	commit(gst, "a")

	recs, more, err := c.List(ctx, st, 0)
	if err != nil || more || len(recs) != 3 || recs[0].Consumer != "a" || recs[2].Consumer != "c" || recs[1].Target != st {
		t.Fatalf("List(s) = %+v, %v, %v", recs, more, err)
	}
	if recs, more, err := c.List(ctx, st, 2); err != nil || !more || len(recs) != 2 {
		t.Fatalf("List(s, 2) = %+v, %v, %v; want 2 and more", recs, more, err)
	}
	many, more, err := c.ListMany(ctx, []registry.Target{st, st2, gst, registry.MustParseTarget("none")}, 0)
	if err != nil || more || len(many[st]) != 3 || len(many[st2]) != 1 || len(many[gst]) != 1 || len(many) != 3 {
		t.Fatalf("ListMany = %+v, %v, %v", many, more, err)
	}
	if many, more, err := c.ListMany(ctx, []registry.Target{st, st2, gst}, 4); err != nil || !more || len(many[st])+len(many[st2])+len(many[gst]) != 4 {
		t.Fatalf("ListMany(limit 4) = %+v, %v, %v; want 4 records and more", many, more, err)
	}

	n, err := c.DeleteStore(ctx, st)
	if err != nil || n != 3 {
		t.Fatalf("DeleteStore(s) = %d, %v; want 3", n, err)
	}
	if _, err := c.Get(ctx, st, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after DeleteStore: %v", err)
	}
	for _, target := range []registry.Target{st2, gst} {
		if _, err := c.Get(ctx, target, "a"); err != nil {
			t.Fatalf("DeleteStore(s) took %s's consumer: %v", target, err)
		}
	}
	// A store created again under the name starts over: a first commit is taken whatever its cursor.
	if r, err := c.Commit(ctx, st, "a", pos(1, "a")); err != nil || r.Cursor != pos(1, "a") {
		t.Fatalf("commit after the delete = %+v, %v", r, err)
	}
}

func TestACorruptRecordIsAHaltNamingItsKey(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	c := New(client, "/consumers-corrupt")
	const key = "/consumers-corrupt/consumers/s/trainer"
	for _, v := range []string{"{", `{"cursor":"x1.zz"}`} {
		if _, err := client.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
		for name, err := range map[string]error{
			"get":    func() error { _, err := c.Get(ctx, st, "trainer"); return err }(),
			"commit": func() error { _, err := c.Commit(ctx, st, "trainer", pos(1, "a")); return err }(),
		} {
			if !errors.Is(err, ErrCorrupt) || errclass.Of(err) != errclass.Halt || !strings.Contains(err.Error(), key) {
				t.Fatalf("%s of %q: %v, want ErrCorrupt (halt) naming %s", name, v, err, key)
			}
		}
	}
}
