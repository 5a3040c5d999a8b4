package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/coord/pending"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestWorkerPublishesItsPendingGenerations: a worker's seals show in its pending
// record within moments (the master merges on it), a merge empties it, and it
// goes with the worker. What it guards: the record woken by every new snapshot
// of a store, counting only this worker's shard above the merged watermark, and
// put under the registration's lease.
func TestWorkerPublishesItsPendingGenerations(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/wp"
	key := keys.Under(prefix).Pending("w1", "generic:g")
	base, stop := runWorker(t, Config{InstanceID: "w1", HTTPListener: listen(t), GRPCListener: listen(t),
		Etcd: client, Prefix: prefix, LeaseTTL: 5 * time.Second, Store: store.Config{Bucket: objstoretest.Mem(t)}})

	record := func() (pending.Entry, bool) {
		resp, err := client.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return pending.Entry{}, false
		}
		var e pending.Entry
		if err := json.Unmarshal(resp.Kvs[0].Value, &e); err != nil {
			t.Fatalf("entry %s: %v", resp.Kvs[0].Value, err)
		}
		if resp.Kvs[0].Lease == 0 {
			t.Fatal("the pending entry is not under a lease: it would outlive its worker")
		}
		return e, true
	}

	if code := postJSON(t, base+"/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`); code/100 != 2 {
		t.Fatalf("create store: %d", code)
	}
	before := time.Now().UTC()
	for i := range 3 {
		if code := postJSON(t, base+"/api/v1/generic/g/rows?flush=true", fmt.Sprintf(`{"rows":[{"id":"r%d","n":%d}]}`, i, i)); code != http.StatusCreated {
			t.Fatalf("add %d: %d", i, code)
		}
	}
	testwait.For(t, 10*time.Second, "three pending generations in the entry", func() (bool, string) {
		e, ok := record()
		return ok && e.Generations == 3 && e.Bytes > 0 && !e.OldestSealedAt.Before(before.Add(-time.Second)), fmt.Sprintf("%+v (found %v)", e, ok)
	})

	if code := postJSON(t, base+"/api/v1/generic/g/merge-wal", ``); code/100 != 2 {
		t.Fatalf("merge: %d", code)
	}
	testwait.For(t, 10*time.Second, "the entry deleted once nothing is pending", func() (bool, string) {
		r, ok := record()
		return !ok, fmt.Sprintf("%+v", r)
	})

	if code := postJSON(t, base+"/api/v1/generic/g/rows?flush=true", `{"rows":[{"id":"z","n":1}]}`); code != http.StatusCreated {
		t.Fatalf("add: %d", code)
	}
	testwait.Until(t, 10*time.Second, "the entry back", func() bool { _, ok := record(); return ok })
	stop()
	if r, ok := record(); ok {
		t.Fatalf("entry left after the worker stopped: %+v", r)
	}
}
