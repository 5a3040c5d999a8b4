package httpapi

// Conformance of the version routes with the reference system (lance-context).
// Written from the reference source at github.com/lance-format/lance-context:
//
//   - crates/lance-context-server/src/routes/rollouts.rs at commit
//     02969b33db66f06b13201a0d2164eb98fe6a3231 (checkout_rollout: POST
//     /rollouts/{name}/checkout with CheckoutRequest {version}, 200
//     VersionResponse {version}; get_rollout_store's version is the base table's);
//   - crates/lance-context-server/src/routes/mod.rs as stored (the router: checkout
//     on rollout stores only, none on generic stores) and routes/versions.rs at
//     commit 411694de899848f068db5ef20d2e35f4d5fd67a8 (the contexts' checkout);
//   - crates/lance-context-core/src/store_base.rs at commit
//     02969b33db66f06b13201a0d2164eb98fe6a3231 (StorageBase::checkout pins the
//     worker's shared handle to a base-table version and refuses writes and merges
//     until a refresh);
//   - crates/lance-context-client/src/lib.rs at commit
//     f6586839a56fdf362c04c71717a8dbb42600723b (RemoteRolloutStore::checkout keeps
//     the answered version as its own; RemoteGenericStore has no checkout);
//   - crates/lance-context-server/src/error.rs at commit
//     411694de899848f068db5ef20d2e35f4d5fd67a8 (a missing version is a "not found":
//     404 NOT_FOUND).
//
// Deliberate difference: checkout does not pin anything (api_checkout.go says
// why); reads at a version pass ?version=, which the reference lacks.

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/testutil/jsonshape"
)

// recordsAt lists a rollout store at path (a records route with its query) and
// returns id -> rollout_id.
func (e *apiEnv) recordsAt(path string) map[string]string {
	e.t.Helper()
	var ans struct {
		Records []struct {
			ID        string `json:"id"`
			RolloutID string `json:"rollout_id"`
		}
		Count int
	}
	e.ok(http.StatusOK, http.MethodGet, path, nil, &ans)
	out := map[string]string{}
	for _, r := range ans.Records {
		if _, dup := out[r.ID]; dup {
			e.t.Fatalf("GET %s: id %s twice", path, r.ID)
		}
		out[r.ID] = r.RolloutID
	}
	if ans.Count != len(out) {
		e.t.Fatalf("GET %s: count %d for %d records", path, ans.Count, len(out))
	}
	return out
}

// mergeVersion merges this worker's shard of a store and returns the base
// version the merge committed.
func (e *apiEnv) mergeVersion(target string) uint64 {
	e.t.Helper()
	var merged mergeAnswer
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/"+target, nil, &merged)
	if merged.Version == 0 {
		e.t.Fatalf("merge of %s committed nothing", target)
	}
	return merged.Version
}

func TestConformanceCheckoutAndReadsAtAVersion(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	var created struct{ Version uint64 }
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"ver","storage_options":null}`, &created)

	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/ver/records?flush=true",
		`{"records":[{"id":"a","rollout_id":"a1"},{"id":"b","rollout_id":"b1"}]}`, nil)
	v2 := e.mergeVersion("ver")
	// The store's version is the base table's: the one the merge committed.
	if got := e.stats("rollouts", "ver").Store.Version; got == nil || *got != v2 {
		t.Fatalf("store version %v after a merge that committed %d", got, v2)
	}
	// Sealed, not merged: newer than every version.
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/ver/records?flush=true",
		`{"records":[{"id":"a","rollout_id":"a2"},{"id":"c","rollout_id":"c1"}]}`, nil)

	base := "/api/v1/rollouts/ver/records"
	if got, want := e.recordsAt(base+"?version="+fmt.Sprint(v2)), map[string]string{"a": "a1", "b": "b1"}; !maps.Equal(got, want) {
		t.Errorf("records at version %d: %v, want the merged rows %v", v2, got, want)
	}
	if got, want := e.recordsAt(base), map[string]string{"a": "a2", "b": "b1", "c": "c1"}; !maps.Equal(got, want) {
		t.Errorf("records now: %v, want %v with the pending rows", got, want)
	}
	// ?source=wal (Tidemark's, for the master's records route): the pending rows
	// alone, newest per id.
	if got, want := e.recordsAt(base+"?source=wal"), map[string]string{"a": "a2", "c": "c1"}; !maps.Equal(got, want) {
		t.Errorf("records of source=wal: %v, want the pending rows %v", got, want)
	}
	e.fails(http.StatusBadRequest, "INVALID_REQUEST", http.MethodGet, base+"?source=disk", nil)
	e.fails(http.StatusBadRequest, "INVALID_REQUEST", http.MethodGet, fmt.Sprintf("%s?source=wal&version=%d", base, v2), nil)
	if got := e.recordsAt(fmt.Sprintf("%s?version=%d", base, created.Version)); len(got) != 0 {
		t.Errorf("records at the created version %d: %v, want none", created.Version, got)
	}
	v3 := e.mergeVersion("ver")
	if got, want := e.recordsAt(fmt.Sprintf("%s?version=%d", base, v3)), map[string]string{"a": "a2", "b": "b1", "c": "c1"}; !maps.Equal(got, want) {
		t.Errorf("records at version %d: %v, want %v", v3, got, want)
	}
	// Version v2 still reads as it did; pages at it too.
	if got, want := e.recordsAt(fmt.Sprintf("%s?version=%d", base, v2)), map[string]string{"a": "a1", "b": "b1"}; !maps.Equal(got, want) {
		t.Errorf("records at version %d after a merge: %v, want %v", v2, got, want)
	}
	if got := e.recordsAt(fmt.Sprintf("%s?version=%d&limit=1&offset=1", base, v2)); !maps.Equal(got, map[string]string{"b": "b1"}) {
		t.Errorf("second page at version %d: %v, want b", v2, got)
	}
	if got := e.recordsAt(fmt.Sprintf("%s?version=%d&filters=%s", base, v2, url.QueryEscape(`{"rollout_id":"a1"}`))); !maps.Equal(got, map[string]string{"a": "a1"}) {
		t.Errorf("filtered records at version %d: %v, want a", v2, got)
	}
	if got := e.recordsAt(fmt.Sprintf("%s?version=%d&filters=%s", base, v3, url.QueryEscape(`{"rollout_id":"a1"}`))); len(got) != 0 {
		t.Errorf("filtered records at version %d: %v, want none (a was overwritten)", v3, got)
	}
	// GET records/{id}: the record as of the version, {"record": null} where it
	// did not exist yet.
	var one struct {
		Record *struct {
			RolloutID string `json:"rollout_id"`
		}
	}
	e.ok(http.StatusOK, http.MethodGet, fmt.Sprintf("%s/a?version=%d", base, v2), nil, &one)
	if one.Record == nil || one.Record.RolloutID != "a1" {
		t.Errorf("record a at version %d: %+v, want a1", v2, one.Record)
	}
	if _, body := e.do(http.MethodGet, fmt.Sprintf("%s/c?version=%d", base, v2), nil); string(body) != "{\"record\":null}\n" {
		t.Errorf("record c at version %d: %s, want null", v2, body)
	}

	// POST checkout: 200 VersionResponse {version}, nothing else; later reads
	// without a version are unchanged (no pin).
	status, body := e.do(http.MethodPost, "/api/v1/rollouts/ver/checkout", fmt.Sprintf(`{"version":%d}`, v2))
	if status != http.StatusOK {
		t.Fatalf("checkout: %d %s", status, body)
	}
	if ans := jsonshape.Check(t, "checkout", body, map[string]string{"version": "number"}); len(ans) != 1 || string(ans["version"]) != fmt.Sprint(v2) {
		t.Errorf("checkout: %s, want {\"version\":%d}", body, v2)
	}
	if got := e.recordsAt(base); len(got) != 3 {
		t.Errorf("records after a checkout: %v, want the newest rows", got)
	}
	e.ok(http.StatusCreated, http.MethodPost, base, `{"records":[{"id":"d","rollout_id":"d1"}]}`, nil)

	// Versions that were never written, and bad requests.
	refError(t, e, http.MethodPost, "/api/v1/rollouts/ver/checkout", `{"version":99}`, 404, CodeNotFound,
		fmt.Sprintf("Version 99 of Rollout store 'ver' does not exist; the oldest readable version is %d, the newest %d", created.Version, v3))
	refError(t, e, http.MethodGet, base+"?version=99", nil, 404, CodeNotFound,
		fmt.Sprintf("Version 99 of Rollout store 'ver' does not exist; the oldest readable version is %d, the newest %d", created.Version, v3))
	refError(t, e, http.MethodGet, base+"/a?version=99", nil, 404, CodeNotFound, "")
	for _, bad := range []string{`{}`, `{"version":null}`, `{"version":0}`, `{"version":-1}`, `{"version":"2"}`, `{"version":2,"x":1}`, ``} {
		refError(t, e, http.MethodPost, "/api/v1/rollouts/ver/checkout", bad, 400, CodeInvalidRequest, "")
	}
	for _, q := range []string{"?version=", "?version=0", "?version=x", "?version=-2", fmt.Sprintf("?version=%d&after=5", v2)} {
		refError(t, e, http.MethodGet, base+q, nil, 400, CodeInvalidRequest, "")
	}
	refError(t, e, http.MethodPost, "/api/v1/rollouts/absent/checkout", `{"version":1}`, 404, CodeNotFound, "Rollout store 'absent' does not exist")
	refError(t, e, http.MethodGet, "/api/v1/rollouts/absent/records?version=1", nil, 404, CodeNotFound, "Rollout store 'absent' does not exist")

	// Retention prunes every version but the newest: a read at a pruned version
	// names the oldest readable one.
	st, release, err := e.stores.Open(context.Background(), registry.KindRollout, "ver")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := st.Table().Cleanup(context.Background(), table.Retention{KeepVersions: 1, KeepAge: time.Nanosecond, SafetyWindow: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	pruned := fmt.Sprintf("Version %d of Rollout store 'ver' is no longer retained; the oldest readable version is %d, the newest %d", v2, v3, v3)
	refError(t, e, http.MethodPost, "/api/v1/rollouts/ver/checkout", fmt.Sprintf(`{"version":%d}`, v2), 404, CodeNotFound, pruned)
	refError(t, e, http.MethodGet, fmt.Sprintf("%s?version=%d", base, v2), nil, 404, CodeNotFound, pruned)
	refError(t, e, http.MethodGet, fmt.Sprintf("%s?version=%d&limit=5", base, v2), nil, 404, CodeNotFound, pruned)
	refError(t, e, http.MethodGet, fmt.Sprintf("%s/a?version=%d", base, v2), nil, 404, CodeNotFound, pruned)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/rollouts/ver/checkout", fmt.Sprintf(`{"version":%d}`, v3), nil)
}

func TestConformanceGenericReadsAtAVersion(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"gv","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/gv/rows?flush=true", `{"rows":[{"id":"a","n":1},{"id":"b","n":1}]}`, nil)
	v := e.mergeVersion("generic:gv")
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/gv/rows?flush=true", `{"rows":[{"id":"a","n":2},{"id":"c","n":2}]}`, nil)
	e.mergeVersion("generic:gv")

	var ans struct {
		Rows []struct {
			ID string
			N  int
		}
		Count int
	}
	e.ok(http.StatusOK, http.MethodGet, fmt.Sprintf("/api/v1/generic/gv/rows?version=%d", v), nil, &ans)
	var got []string
	for _, r := range ans.Rows {
		got = append(got, fmt.Sprintf("%s=%d", r.ID, r.N))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a=1", "b=1"}) || ans.Count != 2 {
		t.Errorf("rows at version %d: %v (count %d), want a=1 b=1", v, got, ans.Count)
	}
	// ?filter= (a SQL predicate) at a version: over the rows of that version.
	e.ok(http.StatusOK, http.MethodGet, fmt.Sprintf("/api/v1/generic/gv/rows?version=%d&filter=%s", v, url.QueryEscape("n = 1 AND id <> 'b'")), nil, &ans)
	if len(ans.Rows) != 1 || ans.Rows[0].ID != "a" {
		t.Errorf("filtered rows at version %d: %+v, want a", v, ans.Rows)
	}
	_, body := e.do(http.MethodGet, fmt.Sprintf("/api/v1/generic/gv/rows/a?version=%d&columns=n", v), nil)
	if row := jsonshape.Check(t, "row at a version", body, map[string]string{"id": "string", "n": "number"}, "score"); string(row["n"]) != "1" {
		t.Errorf("row a at version %d: %s, want n 1", v, body)
	}
	refError(t, e, http.MethodGet, fmt.Sprintf("/api/v1/generic/gv/rows/c?version=%d", v), nil, 404, CodeNotFound, "Row 'c' does not exist")
	refError(t, e, http.MethodGet, "/api/v1/generic/gv/rows?version=77", nil, 404, CodeNotFound, "")
	if msg := e.fails(404, CodeNotFound, http.MethodGet, "/api/v1/generic/gv/rows/a?version=77", nil); msg == "Row 'a' does not exist" {
		t.Errorf("a read at a missing version answers as a missing row: %q", msg)
	}
	// The reference has no checkout on generic stores.
	if status, _ := e.send(http.MethodPost, "/api/v1/generic/gv/checkout", "", `{"version":1}`); status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
		t.Errorf("generic checkout: %d, want no such route", status)
	}
}
