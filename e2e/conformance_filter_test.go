package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestFilteredGenericListsThroughWorkerProcesses drives real worker processes
// the way the reference system's (lance-context) RemoteGenericStore lists rows
// with a SQL filter. Written from github.com/lance-format/lance-context,
// crates/lance-context-server/src/routes/generic.rs at commit
// 02969b33db66f06b13201a0d2164eb98fe6a3231 (ListRowsQuery {limit, offset,
// filter}; list_rows answers {rows}) and crates/lance-context-core/src/generic_store.rs
// at the same commit (list_filtered: the filter applies before limit and
// offset). pkg/worker's TestConformanceGenericFilter checks the semantics at the
// handler level.
//
// Rows come from two shards (each worker writes its own) and one of them is
// overwritten through the other worker: a filter through either worker tests
// every row's live version only, pages count matching rows, and a bad filter is
// a 400 INVALID_REQUEST naming the column.
func TestFilteredGenericListsThroughWorkerProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, nil)
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")
	r1 := refClient{t: t, base: w1.url() + "/api/v1"}
	r2 := refClient{t: t, base: w2.url() + "/api/v1"}

	spec := `{"columns":[["id",{"type":"string","large":false,"nullable":false}],["n",{"type":"int64","nullable":true}],` +
		`["label",{"type":"string","large":false,"nullable":true}]]}`
	r1.call(http.MethodPost, "/generic", `{"name":"gfil","schema":`+spec+`,"storage_options":null,"seal_on_add":false}`, http.StatusCreated, nil)
	// r00..r09 through w1, r10..r19 through w2; label null when n%4 == 0.
	for i, r := range []refClient{r1, r2} {
		var rows []string
		for n := i * 10; n < i*10+10; n++ {
			label := fmt.Sprintf("%q", fmt.Sprintf("item_%d", n))
			if n%4 == 0 {
				label = "null"
			}
			rows = append(rows, fmt.Sprintf(`{"id":"r%02d","n":%d,"label":%s}`, n, n, label))
		}
		r.call(http.MethodPost, "/generic/gfil/rows?flush", `{"rows":[`+strings.Join(rows, ",")+`]}`, http.StatusCreated, nil)
	}
	// w2 overwrites w1's r01 so it no longer matches n < 10. Its causal token
	// (seq), passed as ?after=, makes a read through w1 see every add before it.
	var over struct {
		Seq uint64 `json:"seq"`
	}
	r2.call(http.MethodPost, "/generic/gfil/rows?flush", `{"rows":[{"id":"r01","n":101,"label":"moved"}]}`, http.StatusCreated, &over)
	after := fmt.Sprintf("&after=%d", over.Seq)

	list := func(r refClient, predicate, extra string) []string {
		t.Helper()
		var ans struct {
			Rows []struct {
				ID string `json:"id"`
			} `json:"rows"`
		}
		r.call(http.MethodGet, "/generic/gfil/rows?filter="+url.QueryEscape(predicate)+after+extra, "", http.StatusOK, &ans)
		ids := []string{}
		for _, row := range ans.Rows {
			ids = append(ids, row.ID)
		}
		if extra == "" {
			slices.Sort(ids)
		}
		return ids
	}
	below10 := []string{"r00", "r02", "r03", "r04", "r05", "r06", "r07", "r08", "r09"}
	for _, r := range []refClient{r1, r2} {
		if got := list(r, "n < 10", ""); !slices.Equal(got, below10) {
			t.Errorf("%s: n < 10 listed %v, want %v", r.base, got, below10)
		}
		if got := list(r, "n < 10", "&limit=3&offset=2"); !slices.Equal(got, below10[2:5]) {
			t.Errorf("%s: n < 10, limit 3 offset 2 listed %v, want %v", r.base, got, below10[2:5])
		}
		// Three-valued logic: a null label is neither LIKE nor NOT LIKE.
		if got := list(r, "label NOT LIKE 'item\\_1_' AND n >= 10", ""); !slices.Equal(got, []string{"r01"}) {
			t.Errorf("%s: NOT LIKE listed %v, want r01 alone (r12 and r16 have null labels)", r.base, got)
		}
		if got := list(r, "label IS NULL OR n IN (101, NULL)", ""); !slices.Equal(got, []string{"r00", "r01", "r04", "r08", "r12", "r16"}) {
			t.Errorf("%s: IS NULL OR IN listed %v", r.base, got)
		}
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	r1.call(http.MethodGet, "/generic/gfil/rows?filter="+url.QueryEscape("missing = 1"), "", http.StatusBadRequest, &e)
	if e.Error.Code != "INVALID_REQUEST" || !strings.Contains(e.Error.Message, `"missing"`) {
		t.Errorf("unknown column: %+v, want INVALID_REQUEST naming it", e.Error)
	}
	r2.call(http.MethodGet, "/generic/gfil/rows?limit=5&filter="+url.QueryEscape("label > 3"), "", http.StatusBadRequest, &e)
	if e.Error.Code != "INVALID_REQUEST" || !strings.Contains(e.Error.Message, `column "label" has type utf8`) {
		t.Errorf("type mismatch: %+v, want INVALID_REQUEST naming the column and its type", e.Error)
	}
}
