package httpapi

// Conformance of a generic list's ?filter= with the reference system
// (lance-context). Written from the reference source at
// github.com/lance-format/lance-context:
//
//   - crates/lance-context-server/src/routes/generic.rs at commit
//     02969b33db66f06b13201a0d2164eb98fe6a3231 (ListRowsQuery: limit, offset and
//     filter, "SQL predicate over the store's own columns"; list_rows answers
//     {rows}, and a filter goes to list_filtered);
//   - crates/lance-context-core/src/generic_store.rs at commit
//     02969b33db66f06b13201a0d2164eb98fe6a3231 (list_filtered: the predicate is
//     the scanner's filter, applied before its limit and offset, so a page holds
//     matching rows);
//   - crates/lance-context-server/src/error.rs at commit
//     15e81d9373de671b2a2481284eb642af08928943 (an invalid input is 400
//     INVALID_REQUEST in {"error":{"code","message"}}).
//
// The reference hands the predicate to DataFusion; Tidemark evaluates it with
// package rowfilter (see its doc for the dialect). These tests check the
// semantics a client relies on: SQL three-valued logic, filtering before
// paging, the live version of a row only, and 400s that name the problem.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// filterIDs lists /generic/{name}/rows with ?filter=predicate and the extra
// query (e.g. "&limit=3"), and returns the ids in the answer, sorted unless
// the list was paged (a page is in id order already).
func filterIDs(t *testing.T, e *apiEnv, name, predicate, extra string) []string {
	t.Helper()
	var ans struct {
		Rows  []map[string]json.RawMessage
		Count int
	}
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/"+name+"/rows?filter="+url.QueryEscape(predicate)+extra, nil, &ans)
	ids := make([]string, len(ans.Rows))
	for i, r := range ans.Rows {
		if err := json.Unmarshal(r["id"], &ids[i]); err != nil {
			t.Fatalf("row %s: %v", r["id"], err)
		}
	}
	if ans.Count != len(ids) {
		t.Errorf("filter %q: count %d for %d rows", predicate, ans.Count, len(ids))
	}
	if !strings.Contains(extra, "limit") {
		slices.Sort(ids)
	}
	return ids
}

func idRange(from, to int) []string {
	ids := []string{}
	for i := from; i < to; i++ {
		ids = append(ids, fmt.Sprintf("f%02d", i))
	}
	return ids
}

func TestConformanceGenericFilter(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	spec := `{"columns":[["id",{"type":"string"}],["n",{"type":"int64"}],["score",{"type":"float32"}],` +
		`["name",{"type":"string"}],["ok",{"type":"bool"}],["at",{"type":"timestamp"}],["v",{"type":"vector","dim":2}]]}`
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"gf","schema":`+spec+`}`, nil)

	// f00..f29: n = i, score = i/10, name "name_i" (null when i%5 == 0), ok when
	// i is even, at = i seconds after 2024-05-01. f00..f19 are merged into the
	// base table, the rest pending; then f03 is overwritten so it no longer
	// matches n < 10, and f25 so that it does.
	var rows []string
	for i := range 30 {
		name := fmt.Sprintf("%q", fmt.Sprintf("name_%d", i))
		if i%5 == 0 {
			name = "null"
		}
		rows = append(rows, fmt.Sprintf(`{"id":"f%02d","n":%d,"score":%g,"name":%s,"ok":%v,"at":"2024-05-01T00:00:%02dZ","v":[1,2]}`,
			i, i, float64(i)/10, name, i%2 == 0, i))
		if i == 19 {
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/gf/rows?flush", `{"rows":[`+strings.Join(rows, ",")+`]}`, nil)
			e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/gf/merge-wal", nil, nil)
			rows = nil
		}
	}
	rows = append(rows, `{"id":"f03","n":103,"name":"over"}`, `{"id":"f25","n":5,"name":"name_25"}`)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/gf/rows?flush", `{"rows":[`+strings.Join(rows, ",")+`]}`, nil)

	lessThan10 := slices.Concat([]string{"f00", "f01", "f02"}, idRange(4, 10), []string{"f25"})
	for _, tc := range []struct {
		predicate, extra string
		want             []string
	}{
		// Only a row's live version is tested: f03's old n = 3 is not listed,
		// f25's new n = 5 is.
		{"n < 10", "", lessThan10},
		{"n >= 10 AND n < 20 OR n > 100", "", slices.Concat([]string{"f03"}, idRange(10, 20))},
		// The filter applies before paging: the page is of matching rows, in
		// id order, and the streamed list skips matching rows.
		{"n < 10", "&limit=3", lessThan10[:3]},
		{"n < 10", "&limit=4&offset=2", lessThan10[2:6]},
		{"n < 10", "&limit=5&offset=8", lessThan10[8:]},
		{"n < 10", "&limit=5&offset=80", []string{}},
		{"n < 10", "&offset=7", nil}, // streamed: 3 of the 10, in storage order
		// Three-valued logic: a null name is neither = nor != 'name_1'.
		{"name != 'name_1' AND n < 10", "", slices.DeleteFunc(slices.Clone(lessThan10), func(id string) bool { return id == "f00" || id == "f05" || id == "f01" })},
		{"name IS NULL", "", []string{"f00", "f05", "f10", "f15", "f20"}},
		{"n IN (1, 2, NULL)", "", []string{"f01", "f02"}},
		{"n NOT IN (1, 2, NULL)", "", []string{}},
		{"NOT (name = 'name_1') AND n < 3", "", []string{"f02"}},
		// LIKE, with its escape and a literal %.
		{"name LIKE 'name\\_2_'", "", idRange(21, 30)},
		{"name LIKE '%e_2'", "", []string{"f02"}},
		{"name NOT LIKE 'name%'", "", []string{"f03"}},
		// Other types: float32 at its precision, bool, timestamp, BETWEEN.
		{"score = 0.3", "", []string{}}, // f03's score is null now
		{"score = 0.7 OR score >= 2.8", "", []string{"f07", "f28", "f29"}},
		{"ok AND n BETWEEN 20 AND 24", "", []string{"f20", "f22", "f24"}},
		{"at >= '2024-05-01T00:00:28Z'", "", []string{"f28", "f29"}},
		{"v IS NULL", "", []string{"f03", "f25"}},
		{"(n > 5 OR name IS NULL) AND NOT ok AND n < 16", "", []string{"f05", "f07", "f09", "f11", "f13", "f15"}},
	} {
		t.Run(tc.predicate+tc.extra, func(t *testing.T) {
			got := filterIDs(t, e, "gf", tc.predicate, tc.extra)
			if tc.want == nil { // the streamed list with an offset: any 3 of the matches
				if len(got) != 3 || slices.ContainsFunc(got, func(id string) bool { return !slices.Contains(lessThan10, id) }) {
					t.Errorf("filter %q%s: %v, want 3 of %v", tc.predicate, tc.extra, got, lessThan10)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("filter %q%s: %v, want %v", tc.predicate, tc.extra, got, tc.want)
			}
		})
	}

	// A bad filter is the reference's 400 INVALID_REQUEST, with a message that
	// names the column, the type, or what is wrong.
	for _, tc := range []struct{ predicate, message string }{
		{"nope = 1", `filter: no column "nope" in this store's schema`},
		{"_seq > 0", `no column "_seq"`},
		{"name = 5", `column "name" has type utf8 and cannot be compared with integer 5`},
		{"n LIKE '1%'", `column "n" has type int64 and LIKE applies to string columns only`},
		{"v = 1", `column "v" has type fixed_size_list`},
		{"at > 'tomorrow'", `column "at" has type timestamp`},
		{"n = ", "syntax error"},
		{"n IN (SELECT 1)", "subquery"},
		{"lower(name) = 'x'", "function"},
		{"n = 1; DROP TABLE t", "more than one statement"},
		{"n = 1 ORDER BY n", "plain predicate"},
		{"", "empty"},
	} {
		msg := e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, "/api/v1/generic/gf/rows?filter="+url.QueryEscape(tc.predicate), nil)
		if !strings.Contains(msg, tc.message) {
			t.Errorf("filter %q: message %q, want it to contain %q", tc.predicate, msg, tc.message)
		}
		// The same with a limit (the paged list) is the same answer.
		msg = e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, "/api/v1/generic/gf/rows?limit=5&filter="+url.QueryEscape(tc.predicate), nil)
		if !strings.Contains(msg, tc.message) {
			t.Errorf("filter %q, limit 5: message %q, want it to contain %q", tc.predicate, msg, tc.message)
		}
	}
	// A store that does not exist is still the reference's 404, filter or not.
	refError(t, e, http.MethodGet, "/api/v1/generic/absent/rows?filter=n%3D1", nil, 404, CodeNotFound, "Generic store 'absent' does not exist")
	// Rollout lists have their own filters= (a JSON object); filter= there is a 400.
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"ro"}`, nil)
	refError(t, e, http.MethodGet, "/api/v1/rollouts/ro/records?filter=role%3D'user'", nil, 400, CodeInvalidRequest, "")
}
