package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestReadsAtAVersionThroughWorkerProcesses drives real worker processes the way
// the reference system's (lance-context) RemoteRolloutStore checks out a version,
// and reads at that version with ?version=. Written from
// github.com/lance-format/lance-context, crates/lance-context-server/src/routes/rollouts.rs
// at commit 02969b33db66f06b13201a0d2164eb98fe6a3231 (checkout_rollout:
// CheckoutRequest {version} -> VersionResponse {version}) and
// crates/lance-context-client/src/lib.rs at commit
// f6586839a56fdf362c04c71717a8dbb42600723b (RemoteRolloutStore::checkout).
// pkg/worker's TestConformanceCheckoutAndReadsAtAVersion checks every answer at
// the handler level.
//
// A read at version v is the base table at v: through either worker, the same
// merged rows before and after the other worker's merge commits newer versions,
// without the rows still in WAL generations; once the master's compact task has
// its cleanup prune v, a read at v is a 404 naming the oldest readable version.
func TestReadsAtAVersionThroughWorkerProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]string{
		"VERSION_RETENTION_COUNT": "1",
		"VERSION_RETENTION_AGE":   "1ms",
		"GC_SAFETY_WINDOW":        "1s",
	}, nil)
	c.startMaster("m1", nil)
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")
	r1 := refClient{t: t, base: w1.url() + "/api/v1"}
	r2 := refClient{t: t, base: w2.url() + "/api/v1"}

	r1.call(http.MethodPost, "/rollouts", `{"name":"ver","storage_options":null}`, http.StatusCreated, nil)
	r1.call(http.MethodPost, "/rollouts/ver/records?flush", `{"records":[{"id":"a","rollout_id":"a1"},{"id":"b","rollout_id":"b1"}]}`, http.StatusCreated, nil)
	var merged struct{ Version uint64 }
	r1.call(http.MethodPost, "/internal/merge-wal/ver", "", http.StatusOK, &merged)
	v := merged.Version
	var info struct{ Version uint64 }
	r2.call(http.MethodGet, "/rollouts/ver", "", http.StatusOK, &info)
	if info.Version != v {
		t.Fatalf("store version through w2 %d, the merge committed %d", info.Version, v)
	}
	// Sealed by w2, not merged: in no version yet.
	var added struct{ Seq uint64 }
	r2.call(http.MethodPost, "/rollouts/ver/records?flush", `{"records":[{"id":"a","rollout_id":"a2"},{"id":"c","rollout_id":"c1"}]}`, http.StatusCreated, &added)

	// RemoteRolloutStore::checkout: POST {version}, keep the answered version.
	var checkedOut struct {
		Version *uint64 `json:"version"`
	}
	r2.call(http.MethodPost, "/rollouts/ver/checkout", fmt.Sprintf(`{"version":%d}`, v), http.StatusOK, &checkedOut)
	if checkedOut.Version == nil || *checkedOut.Version != v {
		t.Fatalf("checkout answered %+v, want version %d", checkedOut, v)
	}
	atV := map[string]string{"a": "a1", "b": "b1"}
	for _, r := range []refClient{r1, r2} {
		if got := recordsOf(r, fmt.Sprintf("/rollouts/ver/records?version=%d", v)); !maps.Equal(got, atV) {
			t.Fatalf("records at version %d through %s: %v, want %v", v, r.base, got, atV)
		}
	}
	r2.call(http.MethodPost, "/internal/merge-wal/ver", "", http.StatusOK, &merged)
	if merged.Version <= v {
		t.Fatalf("w2's merge committed version %d, not after %d", merged.Version, v)
	}
	for _, r := range []refClient{r1, r2} {
		if got := recordsOf(r, fmt.Sprintf("/rollouts/ver/records?version=%d", v)); !maps.Equal(got, atV) {
			t.Fatalf("records at version %d through %s after a newer merge: %v, want %v", v, r.base, got, atV)
		}
		// Now, with the causal token of w2's add (w1's snapshot may be a second old).
		if got, want := recordsOf(r, fmt.Sprintf("/rollouts/ver/records?after=%d", added.Seq)), map[string]string{"a": "a2", "b": "b1", "c": "c1"}; !maps.Equal(got, want) {
			t.Fatalf("records now through %s: %v, want %v", r.base, got, want)
		}
	}

	// Retention: one version, no age. A compact task's cleanup prunes v (once it
	// is older than the safety window, so the wait is for that, with a deadline).
	prefix := fmt.Sprintf("Version %d of Rollout store 'ver' is no longer retained; the oldest readable version is ", v)
	testwait.ForEvery(c.t, 60*time.Second, poll, "a compact task's cleanup pruned version "+fmt.Sprint(v), func() (bool, string) {
		a, err := send(http.DefaultClient, http.MethodGet, fmt.Sprintf("%s/rollouts/ver/records?version=%d", r1.base, v), "")
		if err != nil {
			return false, err.Error()
		}
		if a.status == http.StatusNotFound {
			return true, ""
		}
		if a.status != http.StatusOK {
			t.Fatalf("read at version %d while cleanups run: %d %s", v, a.status, a.body)
		}
		c.awaitNoLiveTask()
		if a, err := send(http.DefaultClient, http.MethodPost, r1.base+"/rollouts/ver/compact", "{}"); err != nil || a.status != http.StatusAccepted {
			return false, fmt.Sprintf("enqueue compact: %+v %v", a, err)
		}
		return false, "version still readable"
	})
	r1.call(http.MethodGet, "/rollouts/ver", "", http.StatusOK, &info)
	for _, r := range []refClient{r1, r2} {
		for _, q := range []struct{ method, path, body string }{
			{http.MethodGet, fmt.Sprintf("/rollouts/ver/records?version=%d", v), ""},
			{http.MethodGet, fmt.Sprintf("/rollouts/ver/records/a?version=%d", v), ""},
			{http.MethodPost, "/rollouts/ver/checkout", fmt.Sprintf(`{"version":%d}`, v)},
		} {
			a, err := send(http.DefaultClient, q.method, r.base+q.path, q.body)
			if err != nil {
				t.Fatal(err)
			}
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if a.status != http.StatusNotFound || json.Unmarshal([]byte(a.body), &e) != nil || e.Error.Code != "NOT_FOUND" ||
				!strings.HasPrefix(e.Error.Message, prefix) {
				t.Fatalf("%s %s%s after the prune: %d %s, want 404 %q...", q.method, r.base, q.path, a.status, a.body, prefix)
			}
			// The oldest readable version is one the store can be read at.
			var oldest, newest uint64
			if _, err := fmt.Sscanf(strings.TrimPrefix(e.Error.Message, prefix), "%d, the newest %d", &oldest, &newest); err != nil || oldest <= v || newest < info.Version {
				t.Fatalf("%q: oldest %d newest %d (%v), the store is at %d", e.Error.Message, oldest, newest, err, info.Version)
			}
			r.call(http.MethodPost, "/rollouts/ver/checkout", fmt.Sprintf(`{"version":%d}`, oldest), http.StatusOK, nil)
		}
	}
}

// recordsOf lists a rollout store through r: id -> rollout_id.
func recordsOf(r refClient, path string) map[string]string {
	r.t.Helper()
	var list struct {
		Records []rolloutRecordDto `json:"records"`
	}
	r.call(http.MethodGet, path, "", http.StatusOK, &list)
	out := map[string]string{}
	for _, rec := range list.Records {
		rec.check(r.t)
		if _, dup := out[*rec.ID]; dup {
			r.t.Fatalf("GET %s: id %s twice", path, *rec.ID)
		}
		out[*rec.ID] = *rec.RolloutID
	}
	return out
}
