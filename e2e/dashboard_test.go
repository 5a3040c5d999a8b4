package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// screenshotsEnv, if set, is the directory the dashboard test writes its
// screenshots to (make screenshots sets it to docs/), and screenshotRoundsEnv how
// many rounds of writes, each observed by a scan, come first (more rounds: fuller
// charts).
const (
	screenshotsEnv      = "TIDEMARK_SCREENSHOTS"
	screenshotRoundsEnv = "TIDEMARK_SCREENSHOT_ROUNDS"
)

// markup is a row value (and, written straight into etcd, a stats row's target) that
// would run script if the dashboard rendered it as HTML.
const markup = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`

var bannerToken = regexp.MustCompile(`dashboard\s+(http://\S+/ui/)\s+log in with the token (\S+)`)

// tab is a browser tab with the test's failure reporting.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// do runs actions, failing the test with what was being done.
func (b tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v (page at %s)", what, err, b.location())
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](b tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript condition to hold in the page. It evaluates the
// condition again and again rather than through one chromedp.Poll, because a
// poll fails when the page navigates, and several waits span a navigation.
func (b tab) until(what, expr string, timeout time.Duration) {
	b.t.Helper()
	var last error
	testwait.ForEvery(b.t, timeout, poll, what+" ("+expr+")", func() (bool, string) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { try { return !!(`+expr+`); } catch (e) { return false; } })()`))
		if err != nil {
			last = err
		}
		return ok, fmt.Sprintf("page at %s, last error %v", b.location(), last)
	})
}

func (b tab) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	return loc
}

func (b tab) screenshot(dir, name string) {
	b.t.Helper()
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s", filepath.Join(dir, name))
}

// dashCluster is a `master dev` cluster with stores and records to look at.
type dashCluster struct {
	t       *testing.T
	dev     *devRun
	ui      string // http://<master>/ui/
	api     string // http://<master>
	token   string
	etcd    string
	workers []string // HTTP base URLs
	batch   int
}

func (c *dashCluster) post(base, path, body string) {
	c.t.Helper()
	resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		c.t.Fatalf("POST %s: %s %s", path, resp.Status, b.String())
	}
}

// addRecords adds n rollout records to store through worker w and seals them
// into a generation.
func (c *dashCluster) addRecords(w int, store string, n int, extra func(i int, rec map[string]any)) {
	c.t.Helper()
	var recs []map[string]any
	for i := range n {
		c.batch++
		rec := map[string]any{
			"id": fmt.Sprintf("r%04d-%02d", c.batch, i), "rollout_id": fmt.Sprintf("run-%d", c.batch%7),
			"dataset": []string{"gsm8k", "math", "humaneval"}[c.batch%3], "sequence_order": i,
			"role": []string{"user", "assistant"}[i%2], "content": fmt.Sprintf("step %d of rollout %d", i, c.batch),
			"reward": float64((c.batch*7+i)%10) / 10,
		}
		if extra != nil {
			extra(i, rec)
		}
		recs = append(recs, rec)
	}
	body, _ := json.Marshal(map[string]any{"records": recs})
	c.post(c.workers[w%len(c.workers)], "/api/v1/rollouts/"+store+"/records?flush=true", string(body))
}

// stats reads the master's stats rows: target -> row.
func (c *dashCluster) stats() map[string]map[string]any {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.api+"/api/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var page struct {
		Stats []map[string]any `json:"stats"`
	}
	if json.NewDecoder(resp.Body).Decode(&page) != nil {
		return nil
	}
	out := map[string]map[string]any{}
	for _, r := range page.Stats {
		out[fmt.Sprint(r["target"])] = r
	}
	return out
}

// task returns the master's record of task id, as JSON text.
func (c *dashCluster) task(id string) string {
	req, _ := http.NewRequest(http.MethodGet, c.api+"/api/v1/tasks/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

// awaitScan waits until the master's stats row of target differs from before:
// the next scan observed the writes.
func (c *dashCluster) awaitScan(target string, before map[string]any) {
	c.t.Helper()
	testwait.ForEvery(c.t, time.Minute, poll, "a scan observes "+target, func() (bool, string) {
		row := c.stats()[target]
		if row == nil {
			return false, "no stats row yet"
		}
		same := before != nil && fmt.Sprint(row["row_count"], row["pending_wal_generations"], row["version"]) ==
			fmt.Sprint(before["row_count"], before["pending_wal_generations"], before["version"])
		return !same, fmt.Sprint(row)
	})
}

func startDashCluster(t *testing.T) *dashCluster {
	t.Helper()
	b := build(t)
	dir := t.TempDir()
	etcdAddr := freeAddr(t)
	args := []string{
		"--dir", filepath.Join(dir, "data"), "--workers", "2", "--worker-binary", b.worker,
		"--etcd-addr", etcdAddr, "--master-grpc-addr", freeAddr(t), "--master-http-addr", freeAddr(t),
		"--worker-http-port", "0", "--worker-grpc-port", "0", "--etcd-unsafe-no-fsync", "--echo-level", "error",
	}
	d := startDev(t, dir, "dev-dashboard", args, nil)
	m := bannerToken.FindStringSubmatch(d.banner)
	if m == nil {
		t.Fatalf("banner prints no dashboard URL and token:\n%s", d.banner)
	}
	c := &dashCluster{t: t, dev: d, ui: m[1], api: strings.TrimSuffix(m[1], "/ui/"), token: m[2], etcd: "http://" + etcdAddr}
	for _, id := range sortedIDs(d.workers) {
		c.workers = append(c.workers, d.workers[id])
	}
	if len(c.workers) != 2 {
		t.Fatalf("banner lists workers %v, want 2", d.workers)
	}
	return c
}

// seed creates the stores and writes rounds of records, each round observed by a
// scan, so the charts have a history to draw.
func (c *dashCluster) seed(rounds int) {
	c.t.Helper()
	for _, s := range []string{"eval-runs", "prod-rollouts", "rl-sweep-42"} {
		c.post(c.workers[0], "/api/v1/rollouts", fmt.Sprintf(`{"name":%q}`, s))
	}
	c.post(c.workers[1], "/api/v1/generic", `{"name":"events","schema":{"columns":[["id",{"type":"string"}],["kind",{"type":"string"}],["score",{"type":"float64","nullable":true}]]}}`)
	c.post(c.workers[1], "/api/v1/generic/events/rows?flush=true", `{"rows":[{"id":"e1","kind":"deploy","score":0.5},{"id":"e2","kind":"alert","score":null}]}`)
	// demo: 60 records over 3 generations; one carries markup, one a payload.
	payload := base64.StdEncoding.EncodeToString([]byte("binary payload of r-blob"))
	for g := range 3 {
		c.addRecords(g, "demo", 20, func(i int, rec map[string]any) {
			switch {
			case g == 0 && i == 0:
				rec["id"], rec["content"], rec["rollout_id"] = "r-markup", markup, markup
			case g == 0 && i == 1:
				rec["id"], rec["binary_payload"], rec["payload_size"] = "r-blob", payload, 24
			}
		})
	}
	for r := range rounds {
		before := c.stats()["prod-rollouts"]
		for k := range 3 + r%4 {
			c.addRecords(k, "prod-rollouts", 40, nil)
		}
		c.addRecords(r, "eval-runs", 10, nil)
		if r%2 == 0 {
			c.addRecords(r+1, "rl-sweep-42", 25, nil)
		}
		c.awaitScan("prod-rollouts", before)
	}
	testwait.ForEvery(c.t, time.Minute, poll, "stats rows of every store", func() (bool, string) {
		s := c.stats()
		for _, tg := range []string{"demo", "eval-runs", "prod-rollouts", "rl-sweep-42", "generic:events"} {
			if s[tg] == nil {
				return false, "no row for " + tg
			}
		}
		return true, ""
	})
}

// backlog piles n single-row generations onto a new store through both
// workers, faster than the merge sweep drains them: a store behind, for the
// screenshots.
func (c *dashCluster) backlog(store string, n int) {
	c.t.Helper()
	c.post(c.workers[0], "/api/v1/rollouts", fmt.Sprintf(`{"name":%q}`, store))
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			var err error
			for i := g; i < n && err == nil; i += 4 {
				body := fmt.Sprintf(`{"records":[{"id":"b%05d","rollout_id":"backfill","dataset":"math","content":"backfilled step %d"}]}`, i, i)
				var resp *http.Response
				resp, err = http.Post(c.workers[i%len(c.workers)]+"/api/v1/rollouts/"+store+"/records?flush=true", "application/json", strings.NewReader(body))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						err = fmt.Errorf("add to %s: %s", store, resp.Status)
					}
				}
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			c.t.Fatal(err)
		}
	}
}

// TestDashboardInABrowser drives the dashboard of a real `master dev` cluster
// in headless Chromium as an operator would: a wrong token is refused, the
// right one logs in, a store is found by search and opened, its records paged,
// "Merge now" pressed and the task seen to run and finish without a reload (the
// server-sent events of the etcd watch), and markup in a row value and in a
// store name is shown as text and never run.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	skipShort(t)
	chromiumPath(t) // skip (or fail under CI) before building a cluster
	shots := os.Getenv(screenshotsEnv)
	rounds := 3
	if v := os.Getenv(screenshotRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", screenshotRoundsEnv, v, err)
		}
		rounds = n
	}
	c := startDashCluster(t)
	c.seed(rounds)
	if shots != "" {
		c.backlog("backfill-2026", 400)
		testwait.ForEvery(t, time.Minute, poll, "a scan sees the backlog", func() (bool, string) {
			row := c.stats()["backfill-2026"]
			n, _ := row["pending_wal_generations"].(float64)
			return n >= 256, fmt.Sprint(row)
		})
	}
	b := tab{t: t, ctx: newBrowser(t, 1440, 1000)}

	// A wrong token is refused and leaves the browser logged out.
	b.do("open the dashboard", chromedp.Navigate(c.ui))
	b.until("the login form", `location.pathname === "/ui/login" && !!document.querySelector("#token")`, 30*time.Second)
	b.do("log in with a wrong token",
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Click(chromedp.CSS("#login")))
	b.until("the refusal", `!!document.querySelector("#login-error") && document.querySelector("#login-error").textContent.includes("not valid")`, 30*time.Second)
	if got := eval[string](b, `document.cookie`); got != "" {
		t.Errorf("cookies readable by script after a refused login: %q", got)
	}

	b.do("log in", chromedp.SendKeys(chromedp.CSS("#token"), c.token), chromedp.Click(chromedp.CSS("#login")))
	b.until("the overview", `document.querySelector("h1") && document.querySelector("h1").textContent === "Cluster overview"`, 30*time.Second)
	if got := eval[string](b, `document.cookie`); got != "" {
		t.Errorf("the session cookie is readable by script (not HttpOnly): %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("table.data tbody tr td.mono").length`); n < 2 {
		t.Errorf("overview lists %d worker cells, want the 2 workers", n)
	}
	b.screenshot(shots, "dashboard-overview.png")

	// Find the store by search and open it.
	b.do("open the stores", chromedp.Navigate(c.ui+"stores"))
	b.until("the stores table", `document.querySelectorAll("#stores-table tbody tr[data-search]").length >= 5`, 30*time.Second)
	b.screenshot(shots, "dashboard-stores.png")
	b.do("search for demo", chromedp.SendKeys(chromedp.CSS("#store-search"), "dem"))
	b.until("only demo left", `[...document.querySelectorAll("#stores-table tbody tr[data-search]")].filter(r => !r.hidden).map(r => r.dataset.search).join() === "demo"`, 10*time.Second)
	b.do("open demo", chromedp.Click(chromedp.CSS(`#stores-table tbody tr:not([hidden]) a.store-link`)))
	b.until("the store page", `location.pathname === "/ui/stores/demo" && document.querySelectorAll("#records-table tbody tr").length === 25`, 30*time.Second)

	// Markup in a row value is text, and did not run.
	if got := eval[bool](b, `[...document.querySelectorAll("#records-table td")].some(td => td.textContent.includes("<script>window.__xss=1</script>"))`); !got {
		t.Error("the record with markup is not shown as text on the first page")
	}
	if got := eval[bool](b, `window.__xss === undefined && document.querySelectorAll("#records-table script, #records-table img").length === 0`); !got {
		t.Error("markup of a record value was rendered as HTML")
	}

	// Page through the records: 60 = 25 + 25 + 10.
	b.do("next page", chromedp.Click(chromedp.CSS("#records-next")))
	b.until("page 2", `location.search.includes("offset=25") && document.querySelectorAll("#records-table tbody tr").length === 25`, 30*time.Second)
	b.do("next page", chromedp.Click(chromedp.CSS("#records-next")))
	b.until("page 3", `location.search.includes("offset=50") && document.querySelectorAll("#records-table tbody tr").length === 10 && !document.querySelector("#records-next")`, 30*time.Second)
	b.do("previous page", chromedp.Click(chromedp.CSS("#records-prev")))
	b.until("page 2 again", `location.search.includes("offset=25")`, 30*time.Second)

	// Merge now: the task appears and finishes on this page, without a reload.
	b.do("back to the first page", chromedp.Navigate(c.ui+"stores/demo"))
	b.until("the live stream", `document.body.dataset.live === "open"`, 30*time.Second)
	eval[bool](b, `window.__sameDocument = true`)
	b.do("press Merge now", chromedp.Click(chromedp.CSS("#merge-now")))
	b.until("the enqueued task", `!!document.querySelector("#action-result").dataset.task`, 30*time.Second)
	id := eval[string](b, `document.querySelector("#action-result").dataset.task`)
	row := fmt.Sprintf(`document.querySelector('#tasks-table tr[data-id="%s"]')`, id)
	b.until("task "+id+" in the table", "!!"+row, 10*time.Second)
	testwait.ForEvery(t, 2*time.Minute, poll, "task "+id+" shows as done on the page", func() (bool, string) {
		shown := eval[string](b, `(() => { const r = `+row+`; return r ? r.querySelector(".state").textContent : "no row"; })()`)
		return shown == "done", fmt.Sprintf("page shows %q, the master has %s", shown, c.task(id))
	})
	if !eval[bool](b, `window.__sameDocument === true`) {
		t.Error("the page reloaded: the task should finish live")
	}
	detail := eval[string](b, row+`.querySelector(".result").textContent`)
	if !strings.HasPrefix(detail, "merged ") {
		t.Errorf("task %s result %q, want the merge's detail", id, detail)
	}
	b.screenshot(shots, "dashboard-store.png")

	// The task list filtered by the store has the task, and its record opens.
	b.do("open the tasks of demo", chromedp.Navigate(c.ui+"tasks?target=demo"))
	b.until("the merge in the task list", `!!document.querySelector('#tasks-table tr[data-id="`+id+`"]')`, 30*time.Second)
	b.screenshot(shots, "dashboard-tasks.png")
	b.do("open the task", chromedp.Click(chromedp.CSS(`#tasks-table tr[data-id="`+id+`"] a`)))
	b.until("the task's record", `document.querySelector("#task-record") && document.querySelector("#task-record").dataset.id === "`+id+`"`, 30*time.Second)

	// A stats row whose target carries markup (written into etcd directly: no
	// registered name can) is refused where the target is parsed, so it never
	// reaches a page: the stores page still lists demo, and not the bad row.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	evilTarget := `x` + markup
	row2, _ := json.Marshal(map[string]any{"target": evilTarget, "kind": "rollout", "name": evilTarget, "pending_wal_generations": 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = cli.Put(ctx, "/tidemark/stats/"+evilTarget, string(row2))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	b.do("open the stores", chromedp.Navigate(c.ui+"stores"))
	b.until("the stores page with the demo store", `document.querySelector("#stores-table tbody") && document.querySelector("#stores-table tbody").textContent.includes("demo")`, 30*time.Second)
	if eval[bool](b, `document.querySelector("#stores-table tbody").textContent.includes("__xss")`) {
		t.Error("a stats row whose target is not a valid target was listed")
	}
	if got := eval[bool](b, `window.__xss === undefined && document.querySelectorAll("#stores-table script, #stores-table img").length === 0`); !got {
		t.Error("markup of a store name was rendered as HTML")
	}
}
