package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/auth"
)

// The readers of the interop tests are not written here: JavaScript Arrow (npm
// apache-arrow) reads the Arrow IPC streams of the read routes, and DuckDB (npm
// @duckdb/node-api) opens an export. Both are pinned in e2e/interop/package.json
// and its lockfile; the test installs them with `npm ci` on first use.

var interopOnce struct {
	sync.Once
	dir string
	err error
}

// interopReaders returns the directory of the node scripts with their packages
// installed, skipping the test where npm is missing (failing under CI=true).
func interopReaders(t *testing.T) string {
	t.Helper()
	interopOnce.Do(func() {
		dir, err := filepath.Abs("interop")
		if err != nil {
			interopOnce.err = err
			return
		}
		interopOnce.dir = dir
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "apache-arrow")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api")); err == nil {
				return
			}
		}
		if _, err := exec.LookPath("npm"); err != nil {
			interopOnce.err = fmt.Errorf("npm is not installed: %w", err)
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			interopOnce.err = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
		}
	})
	if interopOnce.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("interop readers: %v", interopOnce.err)
		}
		t.Skipf("interop readers: %v", interopOnce.err)
	}
	return interopOnce.dir
}

// node runs one of the interop scripts and decodes its JSON output into out.
func node(t *testing.T, dir string, out any, script string, args ...string) {
	t.Helper()
	cmd := exec.Command("node", append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s %s: %v\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("node %s: output %.300q: %v", script, stdout, err)
	}
}

// jsArrow is what read_arrow.mjs prints of one Arrow stream.
type jsArrow struct {
	Fields []struct {
		Name, Type string
		Nullable   bool
	} `json:"fields"`
	Metadata map[string]string            `json:"metadata"`
	Headers  map[string]string            `json:"headers"`
	Batches  int                          `json:"batches"`
	Rows     []map[string]json.RawMessage `json:"rows"`
}

// interopRow is one row the test wrote to its generic store.
type interopRow struct {
	ID   string
	N    int64
	X    float64
	Flag bool
	Tag  *string
	At   int64 // microseconds since the epoch
}

func (r interopRow) json() string {
	tag := "null"
	if r.Tag != nil {
		tag = strconv.Quote(*r.Tag)
	}
	return fmt.Sprintf(`{"id":%q,"n":%d,"x":%g,"flag":%t,"tag":%s,"at":%d}`, r.ID, r.N, r.X, r.Flag, tag, r.At)
}

// check compares a row JavaScript Arrow decoded with the one written.
func (r interopRow) check(got map[string]json.RawMessage) error {
	var id, n string
	var x float64
	var flag bool
	var tag *string
	var at float64
	for k, dst := range map[string]any{"id": &id, "n": &n, "x": &x, "flag": &flag, "tag": &tag, "at": &at} {
		raw, ok := got[k]
		if !ok {
			return fmt.Errorf("row %s: no column %q in %v", r.ID, k, slices.Collect(maps.Keys(got)))
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("row %s column %s = %s: %v", r.ID, k, raw, err)
		}
	}
	// Arrow JS hands a timestamp[us] out as milliseconds since the epoch.
	ok := id == r.ID && n == strconv.FormatInt(r.N, 10) && x == r.X && flag == r.Flag &&
		((tag == nil) == (r.Tag == nil)) && (tag == nil || *tag == *r.Tag) && int64(at*1000) == r.At
	if !ok {
		return fmt.Errorf("row %s: read %v, wrote %+v", r.ID, got, r)
	}
	return nil
}

func interopPost(t *testing.T, u, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	auth.SetHeader(req.Header, e2eToken)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

// TestArrowStreamsAndExportsOpenInReadersNotWrittenHere writes a generic store
// through two workers (rows merged, overwritten and merged again so deletion
// vectors hide old versions, and overwritten once more and left pending), then
// reads it with readers not written here: JavaScript Arrow reads the Arrow
// streams of a full list, a walk of pages by X-Tidemark-Next-Cursor, a batch
// get and the change feed, and every row must be the one written last; DuckDB
// opens an export and its count, its aggregates over every column and its ids
// must be those of the live rows, with no overwritten version.
func TestArrowStreamsAndExportsOpenInReadersNotWrittenHere(t *testing.T) {
	t.Parallel()
	dir := interopReaders(t)
	c := newCluster(t, nil, nil)
	m := c.startMaster("m1", nil)
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")

	const name = "interop"
	spec := `{"name":"interop","schema":{"columns":[["id",{"type":"string"}],["n",{"type":"int64"}],` +
		`["x",{"type":"float64"}],["flag",{"type":"bool"}],["tag",{"type":"string","nullable":true}],` +
		`["at",{"type":"timestamp","nullable":true}]]}}`
	if code, body := interopPost(t, w1.url()+"/api/v1/generic", spec); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	want := map[string]interopRow{}
	var lastSeq string // the causal token of the last add
	add := func(w *workerProc, round, from, to int) {
		var rows []string
		for i := from; i < to; i++ {
			r := interopRow{ID: fmt.Sprintf("r%05d", i), N: int64(round*1_000_000 + i), X: float64(i) / 4,
				Flag: (i+round)%3 == 0, At: 1_700_000_000_000_000 + int64(round*1000+i)}
			if i%5 != 0 {
				tag := fmt.Sprintf("t%d-%d", round, i%17)
				r.Tag = &tag
			}
			want[r.ID] = r
			rows = append(rows, r.json())
		}
		u := w.url() + "/api/v1/generic/" + name + "/rows?flush=true"
		code, body := interopPost(t, u, `{"rows":[`+strings.Join(rows, ",")+`]}`)
		var ans struct {
			Seq json.Number `json:"seq"`
		}
		if err := json.Unmarshal(body, &ans); code != http.StatusCreated || err != nil {
			t.Fatalf("add: %d %s", code, body)
		}
		lastSeq = ans.Seq.String()
	}
	merge := func() {
		if tk := c.awaitTaskEnd(c.requeueMerge(m, "generic:"+name), time.Minute); tk.State != "done" {
			t.Fatalf("merge: %s %s", tk.State, tk.Error)
		}
	}
	add(w1, 0, 0, 1500)
	add(w2, 0, 1500, 3000)
	merge()
	add(w2, 1, 0, 3000/3) // overwrites: deletion vectors once merged
	add(w1, 1, 2500, 2700)
	merge()
	add(w1, 2, 100, 160) // overwritten again, left pending
	add(w2, 2, 2990, 3010)

	// Every worker reads the last add: a read with its causal token waits for it,
	// and reads never go back after that.
	for _, w := range []*workerProc{w1, w2} {
		if code, body, err := c.get(w.url() + "/api/v1/generic/" + name + "/rows?limit=1&after=" + lastSeq); err != nil || code != http.StatusOK {
			t.Fatalf("read after the last add: %d %s %v", code, body, err)
		}
	}
	check := func(what string, got []map[string]json.RawMessage, wantIDs []string) {
		t.Helper()
		seen := map[string]bool{}
		for _, row := range got {
			var id string
			_ = json.Unmarshal(row["id"], &id)
			if seen[id] {
				t.Fatalf("%s: id %s twice", what, id)
			}
			seen[id] = true
			r, ok := want[id]
			if !ok {
				t.Fatalf("%s: id %q was never written", what, id)
			}
			if err := r.check(row); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if len(seen) != len(wantIDs) {
			t.Fatalf("%s: %d rows, want %d", what, len(seen), len(wantIDs))
		}
	}
	allIDs := slices.Sorted(maps.Keys(want))
	rowsURL := w2.url() + "/api/v1/generic/" + name + "/rows"

	// A full list, and a full snapshot stream in storage order.
	for _, q := range []string{"", "?order=storage"} {
		var full jsArrow
		node(t, dir, &full, "read_arrow.mjs", "GET", rowsURL+q)
		check("full list"+q, full.Rows, allIDs)
		if full.Metadata["tidemark.store"] != name || full.Metadata["tidemark.version"] == "" {
			t.Fatalf("full list%s: schema metadata %v, want the store and its version", q, full.Metadata)
		}
		if last := full.Fields[len(full.Fields)-1]; last.Name != "_seq" {
			t.Fatalf("full list%s: last field %+v, want _seq", q, last)
		}
	}
	// Pages by the next cursor header.
	var paged []map[string]json.RawMessage
	for u, pages := rowsURL+"?limit=700", 0; ; pages++ {
		if pages > 10 {
			t.Fatal("the page walk does not end")
		}
		var page jsArrow
		node(t, dir, &page, "read_arrow.mjs", "GET", u)
		paged = append(paged, page.Rows...)
		next := page.Headers["x-tidemark-next-cursor"]
		if next == "" {
			break
		}
		u = rowsURL + "?limit=700&cursor=" + next
	}
	check("page walk", paged, allIDs)
	// A batch get, absent ids left out.
	ids := []string{"r00001", "r00120", "r02999", "r03005", "nope"}
	body, _ := json.Marshal(map[string]any{"ids": ids})
	var got jsArrow
	node(t, dir, &got, "read_arrow.mjs", "POST", w1.url()+"/api/v1/generic/"+name+"/get-rows", string(body))
	check("batch get", got.Rows, ids[:4])
	// The change feed from the beginning: the last delivery of each id is its
	// newest version.
	newest := map[string]map[string]json.RawMessage{}
	for cursor, pages := "", 0; ; pages++ {
		if pages > 50 {
			t.Fatal("the feed does not catch up")
		}
		var page jsArrow
		node(t, dir, &page, "read_arrow.mjs", "GET", w1.url()+"/api/v1/generic/"+name+"/changes?limit=1000&cursor="+cursor)
		for _, row := range page.Rows {
			var id string
			_ = json.Unmarshal(row["id"], &id)
			newest[id] = row
		}
		next := page.Headers["x-tidemark-next-cursor"]
		if len(page.Rows) == 0 && len(newest) == len(want) {
			break
		}
		if next == "" {
			t.Fatalf("feed page without X-Tidemark-Next-Cursor: %v", page.Headers)
		}
		cursor = next
	}
	check("change feed", slices.Collect(maps.Values(newest)), allIDs)

	// An export, opened with DuckDB.
	dest := filepath.Join(t.TempDir(), "export")
	code, answer := interopPost(t, w1.url()+"/api/v1/generic/"+name+"/export", fmt.Sprintf(`{"destination":%q}`, "file://"+dest))
	if code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("export: %d %s", code, answer)
	}
	var task struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(answer, &task); err != nil || task.ID == "" {
		t.Fatalf("export answer %s: %v", answer, err)
	}
	if tk := c.awaitTaskEnd(task.ID, 2*time.Minute); tk.State != "done" {
		t.Fatalf("export task: %s %s", tk.State, tk.Error)
	}
	var manifest struct {
		Rows  int64 `json:"rows"`
		Files []struct {
			Path string `json:"path"`
			Rows int64  `json:"rows"`
		} `json:"files"`
	}
	raw, err := os.ReadFile(filepath.Join(dest, "_manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &manifest); err != nil || manifest.Rows != int64(len(want)) || len(manifest.Files) == 0 {
		t.Fatalf("export manifest %s (%v): want %d rows", raw, err, len(want))
	}
	var sumN, sumAt, tagLen int64
	var sumX float64
	var flags, tags int64
	for _, r := range want {
		sumN += r.N
		sumX += r.X
		sumAt += r.At
		if r.Flag {
			flags++
		}
		if r.Tag != nil {
			tags++
			tagLen += int64(len(*r.Tag))
		}
	}
	from := fmt.Sprintf("read_parquet('%s/*.parquet')", dest)
	queries := []string{
		"SELECT count(*) AS rows, count(DISTINCT id) AS ids, min(id) AS lo, max(id) AS hi, sum(n) AS n, sum(x) AS x, " +
			"count_if(flag) AS flags, count(tag) AS tags, sum(length(tag)) AS tag_len, " +
			"sum(epoch_us(\"at\")) AS at_us FROM " + from, // "at" is a keyword of DuckDB's
		// No overwritten version: every id's n is the one written last.
		"SELECT id, n FROM " + from + " ORDER BY id",
	}
	var raws [][]map[string]any
	node(t, dir, &raws, "duckdb_query.mjs", mustJSON(t, queries))
	// DuckDB's JSON rows hold 64-bit integers as strings and doubles as numbers.
	results := make([][]map[string]string, len(raws))
	for i, rows := range raws {
		for _, row := range rows {
			r := map[string]string{}
			for k, v := range row {
				if f, ok := v.(float64); ok {
					r[k] = strconv.FormatFloat(f, 'f', -1, 64)
				} else {
					r[k] = fmt.Sprint(v)
				}
			}
			results[i] = append(results[i], r)
		}
	}
	agg := results[0][0]
	wantAgg := map[string]string{
		"rows": strconv.Itoa(len(want)), "ids": strconv.Itoa(len(want)), "lo": allIDs[0], "hi": allIDs[len(allIDs)-1],
		"n": strconv.FormatInt(sumN, 10), "flags": strconv.FormatInt(flags, 10), "tags": strconv.FormatInt(tags, 10),
		"tag_len": strconv.FormatInt(tagLen, 10), "at_us": strconv.FormatInt(sumAt, 10),
	}
	for k, v := range wantAgg {
		if agg[k] != v {
			t.Errorf("DuckDB over the export: %s = %s, want %s (all: %v)", k, agg[k], v, agg)
		}
	}
	if x, err := strconv.ParseFloat(agg["x"], 64); err != nil || x != sumX {
		t.Errorf("DuckDB over the export: sum(x) = %s, want %g", agg["x"], sumX)
	}
	for i, row := range results[1] {
		if row["id"] != allIDs[i] || row["n"] != strconv.FormatInt(want[allIDs[i]].N, 10) {
			t.Fatalf("DuckDB row %d: %v, want %+v", i, row, want[allIDs[i]])
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
