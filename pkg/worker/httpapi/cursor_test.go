package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// A list pages by cursor as S3's ListObjectsV2 pages keys: every page with more
// rows after it answers next_cursor, passed back as ?cursor=; the last page has
// none; ?start_after=<id> starts after an id; offset counts from the start; and
// the rows of the walk are every row once, in id order, pending and merged alike.
func TestListPagesByCursor(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"pg","schema":`+apiSpec+`}`, nil)
	add := func(ids ...int) {
		var rows []string
		for _, i := range ids {
			rows = append(rows, fmt.Sprintf(`{"id":"r%02d","n":%d}`, i, i))
		}
		e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/pg/rows?flush=true", `{"rows":[`+strings.Join(rows, ",")+`]}`, nil)
	}
	add(3, 1, 7, 5, 9, 0)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/pg/merge-wal", nil, nil)
	add(2, 8, 4, 6) // pending: the walk merges both sides
	type page struct {
		Rows []struct {
			ID string `json:"id"`
		} `json:"rows"`
		Count      int     `json:"count"`
		NextCursor *string `json:"next_cursor"`
	}
	var got []string
	query := "limit=3"
	for pages := 0; ; pages++ {
		var p page
		e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/pg/rows?"+query, nil, &p)
		for _, r := range p.Rows {
			got = append(got, r.ID)
		}
		if p.NextCursor == nil {
			if pages != 3 || p.Count != 1 {
				t.Fatalf("last page %d with %d rows", pages, p.Count)
			}
			break
		}
		if p.Count != 3 || url.QueryEscape(*p.NextCursor) != *p.NextCursor {
			t.Fatalf("page %d: %d rows, cursor %q (want 3 rows and a URL-safe cursor)", pages, p.Count, *p.NextCursor)
		}
		query = "limit=3&cursor=" + *p.NextCursor
	}
	if want := "r00 r01 r02 r03 r04 r05 r06 r07 r08 r09"; strings.Join(got, " ") != want {
		t.Fatalf("walk by cursor: %s, want %s", strings.Join(got, " "), want)
	}
	var p page
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/pg/rows?limit=2&start_after=r04&offset=1", nil, &p)
	if len(p.Rows) != 2 || p.Rows[0].ID != "r06" || p.Rows[1].ID != "r07" || p.NextCursor == nil {
		t.Fatalf("start_after=r04&offset=1: %+v", p)
	}
	var end page
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/pg/rows?limit=5&start_after=r07", nil, &end)
	if len(end.Rows) != 2 || end.NextCursor != nil {
		t.Fatalf("the end, exactly: %+v", end)
	}
	// Streamed (no limit): from start_after, every row after it.
	var all page
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/pg/rows?start_after=r07", nil, &all)
	if all.Count != 2 || all.Rows[0].ID != "r08" {
		t.Fatalf("streamed from r07: %+v", all)
	}
	for _, q := range []string{"cursor=nope", "cursor=c1.%25%25", "start_after=r01&cursor=" + encodeCursor("r01")} {
		msg := e.fails(http.StatusBadRequest, CodeInvalidRequest, http.MethodGet, "/api/v1/generic/pg/rows?limit=3&"+q, nil)
		if !strings.Contains(msg, "cursor") {
			t.Fatalf("%s: message %q does not name the cursor", q, msg)
		}
	}
}
