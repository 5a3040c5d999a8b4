package dashboard

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testcerts"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

const testToken = "s3cret-dashboard-token"

// fakeAdmin is an in-memory AdminService: what it lists is set by the test, and
// it records what it was asked to enqueue.
type fakeAdmin struct {
	mu       sync.Mutex
	stats    []*tidemarkv1.StatsRow
	workers  []*tidemarkv1.WorkerInfo
	tasks    []*tidemarkv1.Task
	enqueued []*tidemarkv1.EnqueueTaskRequest
}

func (f *fakeAdmin) EnqueueTask(_ context.Context, req *tidemarkv1.EnqueueTaskRequest) (*tidemarkv1.EnqueueTaskResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !strings.HasPrefix(req.GetTarget(), "demo") {
		return nil, status.Errorf(codes.NotFound, "target %q: store not found", req.GetTarget())
	}
	f.enqueued = append(f.enqueued, req)
	t := &tidemarkv1.Task{Id: fmt.Sprintf("0190-task-%d", len(f.enqueued)), Kind: req.GetKind(), Target: req.GetTarget(), State: "queued", EnqueuedAt: timestamppb.Now()}
	f.tasks = append(f.tasks, t)
	return &tidemarkv1.EnqueueTaskResponse{Task: t}, nil
}

func (f *fakeAdmin) GetTask(_ context.Context, req *tidemarkv1.GetTaskRequest) (*tidemarkv1.GetTaskResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tasks {
		if t.GetId() == req.GetId() {
			return &tidemarkv1.GetTaskResponse{Task: t}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "task %q not found", req.GetId())
}

func (f *fakeAdmin) ListTasks(_ context.Context, req *tidemarkv1.ListTasksRequest) (*tidemarkv1.ListTasksResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &tidemarkv1.ListTasksResponse{}
	for _, t := range f.tasks {
		if req.GetTarget() == "" || req.GetTarget() == t.GetTarget() {
			out.Tasks = append(out.Tasks, t)
		}
	}
	return out, nil
}

func (f *fakeAdmin) ListStats(context.Context, *tidemarkv1.ListStatsRequest) (*tidemarkv1.ListStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &tidemarkv1.ListStatsResponse{Stats: f.stats}, nil
}

func (f *fakeAdmin) ListWorkers(context.Context, *tidemarkv1.ListWorkersRequest) (*tidemarkv1.ListWorkersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &tidemarkv1.ListWorkersResponse{Workers: f.workers}, nil
}

func (f *fakeAdmin) enqueues() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.enqueued)
}

// env is a dashboard on a real embedded etcd, served by an httptest server.
type env struct {
	admin *fakeAdmin
	dash  *Dashboard
	srv   *httptest.Server
	cfg   Config
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	client, _ := etcdtest.Start(t)
	tokens, err := auth.NewTokens("test", testToken)
	if err != nil {
		t.Fatal(err)
	}
	admin := &fakeAdmin{
		stats: []*tidemarkv1.StatsRow{
			{Target: "demo", Version: 12, RowCount: 3400, FragmentCount: 4, PendingWalGenerations: 300,
				PendingByShard: map[string]int64{"w1": 280, "w2": 20}, ActiveShards: []string{"w1", "w2"},
				MissingShards: []*tidemarkv1.MissingShard{{Shard: "w2", Orphaned: true}}},
			{Target: "generic:events", Version: 3, RowCount: 10},
		},
		workers: []*tidemarkv1.WorkerInfo{{InstanceId: "w1", GrpcAddr: "127.0.0.1:1", Version: "test"}},
	}
	cfg := Config{
		Admin: admin, Client: client, Prefix: "/dash-test",
		Guard:   auth.NewGuard(auth.GuardConfig{Tokens: tokens}),
		Workers: workerhttp.New(workerhttp.Config{Discovery: fanout.StaticDiscovery{}}),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(d)
	// Short server timeouts, as the master has (longer) ones: an event stream
	// must outlive them. The idle timeout is not short: without one, the read
	// timeout bounds a kept-alive connection's idle time too, and a test's next
	// request on a loaded machine raced the server closing it (a GET failing EOF).
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Config.IdleTimeout = time.Minute
	srv.Start()
	t.Cleanup(srv.Close)
	return &env{admin: admin, dash: d, srv: srv, cfg: cfg}
}

// workerAt reads records from the worker serving at url, with token.
func workerAt(url, token string) *workerhttp.Client {
	return workerhttp.New(workerhttp.Config{Token: token,
		Discovery: fanout.StaticDiscovery{{InstanceID: "w1", HTTPAddr: strings.TrimPrefix(url, "http://")}}})
}

// browser is a client with a cookie jar that does not follow redirects, so a
// test sees each answer.
func (e *env) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (e *env) login(t *testing.T, c *http.Client) {
	t.Helper()
	resp, err := c.PostForm(e.srv.URL+"/ui/login", url.Values{"token": {testToken}, "next": {"/ui/stores"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/stores" {
		t.Fatalf("login: %s, Location %q; want 303 to /ui/stores", resp.Status, resp.Header.Get("Location"))
	}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// csrfOf reads the CSRF token a page carries for its script.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	const marker = `<meta name="csrf-token" content="`
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("page has no CSRF token:\n%s", page)
	}
	rest := page[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestPagesNeedALoginAndTheStreamAnswers401(t *testing.T) {
	e := newEnv(t, nil)
	c := e.browser(t)
	for _, path := range []string{"/ui/", "/ui/stores", "/ui/stores/demo", "/ui/tasks", "/ui/tasks/x"} {
		resp, _ := get(t, c, e.srv.URL+path)
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login?next=") {
			t.Errorf("GET %s without a session: %s to %q; want 303 to the login", path, resp.Status, resp.Header.Get("Location"))
		}
	}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/ui/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("event stream without a session: %s, want 401", resp.Status)
	}
	resp, err = c.PostForm(e.srv.URL+"/ui/stores/demo/tasks", url.Values{"kind": {"merge_wal"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || e.admin.enqueues() != 0 {
		t.Errorf("POST without a session: %s, %d enqueued; want 401 and none", resp.Status, e.admin.enqueues())
	}
	// The assets are public: the login page needs its style sheet.
	resp, body := get(t, c, e.srv.URL+"/ui/static/style.css")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "svg.chart") {
		t.Errorf("style sheet: %s", resp.Status)
	}
}

func TestLoginRefusesAWrongTokenAndSetsNoCookie(t *testing.T) {
	e := newEnv(t, nil)
	c := e.browser(t)
	resp, err := c.PostForm(e.srv.URL+"/ui/login", url.Values{"token": {"not-the-token"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), ErrBadCredential.Error()) {
		t.Fatalf("wrong token: %s, want 401 saying %q", resp.Status, ErrBadCredential)
	}
	if len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token set cookies %v", resp.Cookies())
	}
	if r, _ := get(t, c, e.srv.URL+"/ui/"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("after a refused login the overview answered %s, want a redirect to the login", r.Status)
	}
}

func TestLoginSetsAnHttpOnlyStrictCookieSecureUnderTLS(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("secure=%v", secure), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.Secure = secure })
			c := e.browser(t)
			resp, err := c.PostForm(e.srv.URL+"/ui/login", url.Values{"token": {testToken}, "next": {"https://evil.example/"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); loc != "/ui/" {
				t.Errorf("login with next=https://evil.example/ redirects to %q, want /ui/", loc)
			}
			cookies := resp.Cookies()
			if len(cookies) != 1 {
				t.Fatalf("cookies %v, want the session cookie", cookies)
			}
			ck := cookies[0]
			if ck.Name != SessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != secure || ck.Path != "/ui/" {
				t.Fatalf("cookie %+v: want %s, HttpOnly, SameSite=Strict, Secure=%v, Path=/ui/", ck, SessionCookie, secure)
			}
			if strings.Contains(ck.Value, testToken) {
				t.Fatal("the cookie carries the token")
			}
			if !secure { // the jar does not send a Secure cookie over http://
				if r, _ := get(t, c, e.srv.URL+"/ui/"); r.StatusCode != http.StatusOK {
					t.Fatalf("overview after login: %s", r.Status)
				}
			}
		})
	}
}

func TestButtonsNeedTheSessionsCSRFTokenAndSameOrigin(t *testing.T) {
	e := newEnv(t, nil)
	c := e.browser(t)
	e.login(t, c)
	_, page := get(t, c, e.srv.URL+"/ui/stores/demo")
	token := csrfOf(t, page)

	post := func(form url.Values, header map[string]string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/ui/stores/demo/tasks", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for name, tc := range map[string]struct {
		form   url.Values
		header map[string]string
	}{
		"no token":     {url.Values{"kind": {"merge_wal"}}, nil},
		"wrong token":  {url.Values{"kind": {"merge_wal"}, "csrf": {"forged"}}, nil},
		"other origin": {url.Values{"kind": {"merge_wal"}, "csrf": {token}}, map[string]string{"Origin": "https://evil.example"}},
	} {
		resp := post(tc.form, tc.header)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s, want 403", name, resp.Status)
		}
	}
	if n := e.admin.enqueues(); n != 0 {
		t.Fatalf("refused POSTs enqueued %d tasks", n)
	}

	resp := post(url.Values{"kind": {"merge_wal"}}, map[string]string{CSRFHeader: token, "Origin": e.srv.URL})
	var got enqueueResult
	err := json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || got.Task.Kind != "merge_wal" || got.Task.Target.String() != "demo" || got.Task.State != "queued" {
		t.Fatalf("merge now: %s %+v (%v)", resp.Status, got, err)
	}
	resp = post(url.Values{"kind": {"repair"}, "csrf": {token}}, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("kind repair (drops data) from a button: %s, want 400", resp.Status)
	}
	if n := e.admin.enqueues(); n != 1 {
		t.Fatalf("%d enqueues, want 1", n)
	}
}

func TestMarkupInStoreNamesTaskErrorsAndRowValuesIsShownAsText(t *testing.T) {
	const evil = `<script>alert("x")</script>`
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer worker-token" {
			http.Error(w, `{"error":{"message":"no token"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"records":[{"id":"r1","rollout_id":%q,"content":%q}],"count":1}`, evil, evil)
	}))
	defer worker.Close()
	e := newEnv(t, func(c *Config) { c.Workers = workerAt(worker.URL, "worker-token") })
	e.admin.stats = append(e.admin.stats, &tidemarkv1.StatsRow{Target: evil, PendingWalGenerations: 1})
	e.admin.tasks = append(e.admin.tasks, &tidemarkv1.Task{Id: "t1", Kind: "merge_wal", Target: "demo", State: "failed", Error: evil})
	c := e.browser(t)
	e.login(t, c)
	for _, path := range []string{"/ui/stores", "/ui/stores/demo", "/ui/tasks", "/ui/tasks/t1"} {
		resp, body := get(t, c, e.srv.URL+path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
		}
		if strings.Contains(body, "<script>alert") {
			t.Errorf("GET %s: markup rendered unescaped", path)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
			t.Errorf("GET %s: the escaped text is not shown", path)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
}

func TestAuthDisabledIsOpenSaysSoAndStillChecksCSRF(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Guard = nil })
	c := e.browser(t)
	resp, body := get(t, c, e.srv.URL+"/ui/stores")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="auth-disabled"`) {
		t.Fatalf("stores with auth disabled: %s, banner shown %v", resp.Status, strings.Contains(body, `id="auth-disabled"`))
	}
	resp, err := c.PostForm(e.srv.URL+"/ui/stores/demo/tasks", url.Values{"kind": {"verify"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST without CSRF token, auth disabled: %s, want 403", resp.Status)
	}
	resp, err = c.PostForm(e.srv.URL+"/ui/stores/demo/tasks", url.Values{"kind": {"verify"}, "csrf": {csrfOf(t, body)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/tasks/") {
		t.Fatalf("form POST: %s to %q, want 303 to the task", resp.Status, resp.Header.Get("Location"))
	}
}

func TestStoresPageMarksStoresBehindAndSearchesAndSorts(t *testing.T) {
	e := newEnv(t, nil)
	c := e.browser(t)
	e.login(t, c)
	_, body := get(t, c, e.srv.URL+"/ui/stores?q=event")
	if strings.Contains(body, `href="/ui/stores/demo"`) || !strings.Contains(body, `href="/ui/stores/generic:events"`) {
		t.Errorf("search q=event: want only generic:events")
	}
	_, body = get(t, c, e.srv.URL+"/ui/stores?sort=name&dir=asc")
	if i, j := strings.Index(body, `href="/ui/stores/demo"`), strings.Index(body, `href="/ui/stores/generic:events"`); i < 0 || j < 0 || i > j {
		t.Errorf("sorted by name: demo at %d, generic:events at %d", i, j)
	}
	if !strings.Contains(body, `class="behind"`) || !strings.Contains(body, "orphaned") {
		t.Errorf("demo (300 pending, an orphaned shard) is not marked")
	}
}

// TestEventsStreamTaskChangesFromTheEtcdWatch: a task written to P/tasks/ reaches
// an open event stream, without the page asking again.
func TestEventsStreamTaskChangesFromTheEtcdWatch(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.srv
	c := e.browser(t)
	e.login(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.dash.Run(ctx) }()
	defer func() {
		// The feed, the stream's handler and the client's connection all end
		// with ctx: nothing the dashboard started outlives it.
		cancel()
		<-done
		c.CloseIdleConnections()
		testwait.For(t, 10*time.Second, "the dashboard's goroutines to end", func() (bool, string) {
			buf := make([]byte, 1<<20)
			for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
				if strings.Contains(g, "pkg/master/dashboard.(*") {
					return false, g
				}
			}
			return true, ""
		})
	}()

	// The stream's own context: it must end because the feed stops, not because
	// the client hangs up.
	reqCtx, reqCancel := context.WithCancel(context.Background())
	defer reqCancel()
	req, _ := http.NewRequestWithContext(reqCtx, http.MethodGet, e.srv.URL+"/ui/events?target=demo", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("events: %s %q", resp.Status, ct)
	}
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != ": open" {
		t.Fatalf("first line %q, want the open comment", lines.Text())
	}
	opened := time.Now()
	// The watch starts after the feed's first load: write until an event arrives.
	keys := keys.Under("/dash-test")
	put := func(id, target string) {
		t.Helper()
		v, _ := json.Marshal(tasks.Task{ID: id, Kind: tasks.KindMergeWAL, Target: registry.MustParseTarget(target), State: tasks.StateDone, Detail: "merged 7 generations across 1/1 workers",
			Stats: tasks.Stats{Workers: 1, WorkersMerged: 1, GenerationsMerged: 7}, FinishedAt: time.Now()})
		if _, err := e.cfg.Client.Put(ctx, keys.Task(id), string(v)); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan taskJSON, 16)
	go func() {
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var tj taskJSON
				if json.Unmarshal([]byte(data), &tj) == nil {
					got <- tj
				}
			}
		}
		close(got)
	}()
	put("0190-other", "other") // filtered out: another target
	deadline := time.After(20 * time.Second)
	for i := 0; ; i++ {
		put(fmt.Sprintf("0190-%04d", i), "demo")
		select {
		case tj, ok := <-got:
			if !ok {
				t.Fatalf("the stream ended after %s", time.Since(opened))
			}
			// Events keep coming after the server's read and write timeouts.
			if time.Since(opened) < 3*srv.Config.ReadTimeout {
				continue
			}
			if tj.Target.String() != "demo" || tj.State != "done" {
				t.Fatalf("event %+v, want a done task of demo", tj)
			}
			snap := e.dash.feed.snapshot()
			if len(snap.Recent) == 0 || snap.Recent[0].Stats.GenerationsMerged != 7 {
				t.Fatalf("feed recent %+v: want the merge of 7 generations", snap.Recent)
			}
			// A master shutting down stops the feed: open streams end, so the
			// server's graceful shutdown does not wait for the browsers.
			cancel()
			for {
				select {
				case _, ok := <-got:
					if !ok {
						return
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the event stream outlived the feed by 10s")
				}
			}
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no task event within 20s")
		}
	}
}

func TestSeriesKeepsOnlyTheWindowAndItsBound(t *testing.T) {
	s := series{max: 10}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		s.add(t0.Add(time.Duration(i)*time.Minute), float64(i))
	}
	if len(s.pts) > 10 {
		t.Fatalf("%d points kept, bound 10", len(s.pts))
	}
	s = series{max: 1000}
	for i := range 120 {
		s.add(t0.Add(time.Duration(i)*time.Minute), float64(i))
	}
	// The last point before the window is kept: the step line starts there.
	if first := s.pts[0].at; first.Before(t0.Add(58*time.Minute)) || first.After(t0.Add(59*time.Minute)) {
		t.Fatalf("first point at %s, want the one just before the hour's window", first)
	}
}

func TestChartsHaveAxesAndUnits(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	w := chartWindow(now, now.Add(-2*time.Hour))
	if w.Label != "last hour" || !w.Start.Equal(now.Add(-time.Hour)) {
		t.Errorf("window of a 2h history: %+v, want the last hour", w)
	}
	svg := string(lineChart("pending generations", w, []point{{now.Add(-30 * time.Minute), 40}, {now.Add(-10 * time.Minute), 130}}))
	for _, want := range []string{"pending generations", "11:00", "11:30", "12:00", ">200<", ">50<", ">0<", `class="line"`, "UTC"} {
		if !strings.Contains(svg, want) {
			t.Errorf("line chart lacks %q", want)
		}
	}
	young := chartWindow(now, now.Add(-time.Minute))
	if young.Label != "last 10 min" {
		t.Errorf("window of a 1 min history: %+v, want the last 10 min", young)
	}
	bars := string(barChart("merged generations/s", young, []float64{0.5, 0, 1.5}, time.Minute))
	if strings.Count(bars, "<rect") != 2 || !strings.Contains(bars, "merged generations/s") {
		t.Errorf("bar chart: want 2 bars and its unit:\n%s", bars)
	}
}

func TestSafeNextStaysOnTheDashboard(t *testing.T) {
	for in, want := range map[string]string{
		"/ui/stores?q=a": "/ui/stores?q=a", "": "/ui/", "//evil.example/": "/ui/", "https://evil.example/ui/": "/ui/",
		"/api/v1/tasks": "/ui/", "/ui/\\evil": "/ui/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRecordsAreReadThroughAWorkerWithFiltersPagesAndBlobDownload: the record
// browser asks a registered worker, with the master's token, for one page more
// than it shows (to know whether a next page exists), passes the rollout filters
// as the worker's filters parameter, and serves binary_payload as a download.
func TestRecordsAreReadThroughAWorkerWithFiltersPagesAndBlobDownload(t *testing.T) {
	var mu sync.Mutex
	var asked []url.Values
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer worker-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/api/v1/rollouts/demo/records/r-blob/blob":
			w.Header().Set("Content-Type", "application/octet-stream")
			fmt.Fprint(w, "hello blob")
			return
		case "/api/v1/rollouts/demo/records/r-none/blob":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"NOT_FOUND","message":"Rollout 'r-none' has no payload"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		asked = append(asked, r.URL.Query())
		mu.Unlock()
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		var recs []string
		for i := offset; i < min(offset+limit, 30); i++ { // 30 records in all
			// Lists leave binary_payload out: payload_size marks a record with one.
			recs = append(recs, fmt.Sprintf(`{"id":"r%02d","created_at":"2026-12-01T10:00:00.123456Z","payload_size":%s}`, i, map[bool]string{true: "2", false: "null"}[i == 0]))
		}
		fmt.Fprintf(w, `{"records":[%s],"count":%d}`, strings.Join(recs, ","), len(recs))
	}))
	defer worker.Close()
	e := newEnv(t, func(c *Config) { c.Workers = workerAt(worker.URL, "worker-token") })
	c := e.browser(t)
	e.login(t, c)

	_, body := get(t, c, e.srv.URL+"/ui/stores/demo?f.dataset=gsm8k&f.include_in_training=true")
	if n := strings.Count(body, `<tr data-id="r`); n != recordsPerPage {
		t.Errorf("first page shows %d records, want %d", n, recordsPerPage)
	}
	if !strings.Contains(body, `id="records-next" href="?offset=25&amp;f.dataset=gsm8k&amp;f.include_in_training=true#records"`) || strings.Contains(body, `id="records-prev"`) {
		t.Errorf("first page: want a next link keeping the filters and no previous link")
	}
	if !strings.Contains(body, "2026-12-01 10:00:00Z") || !strings.Contains(body, `href="/ui/stores/demo/records/r00/blob"`) ||
		strings.Contains(body, `href="/ui/stores/demo/records/r01/blob"`) {
		t.Errorf("first page: want timestamps to the second and the blob link of r00 only")
	}
	mu.Lock()
	q := asked[0]
	mu.Unlock()
	var filters map[string]any
	if err := json.Unmarshal([]byte(q.Get("filters")), &filters); err != nil || filters["dataset"] != "gsm8k" || filters["include_in_training"] != true || q.Get("limit") != "26" {
		t.Errorf("worker asked %v, want limit 26 and the filters as JSON", q)
	}
	_, body = get(t, c, e.srv.URL+"/ui/stores/demo?offset=25")
	if n := strings.Count(body, `<tr data-id="r`); n != 5 || strings.Contains(body, `id="records-next"`) || !strings.Contains(body, `id="records-prev"`) {
		t.Errorf("last page: %d records, want 5, a previous link and no next link", n)
	}

	resp, blob := get(t, c, e.srv.URL+"/ui/stores/demo/records/r-blob/blob")
	if resp.StatusCode != http.StatusOK || blob != "hello blob" || resp.Header.Get("Content-Disposition") != `attachment; filename="r-blob.bin"` {
		t.Errorf("blob: %s %q %q", resp.Status, blob, resp.Header.Get("Content-Disposition"))
	}
	if resp, _ := get(t, c, e.srv.URL+"/ui/stores/demo/records/r-none/blob"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("blob of a record without one: %s, want 404", resp.Status)
	}
	if resp, _ := get(t, c, e.srv.URL+"/ui/stores/generic:events/records/x/blob"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("blob of a generic store: %s, want 400", resp.Status)
	}
}

// The overview's merged generations and adoptions of the last hour come from
// the tasks' stats alone: a merge whose detail says nothing of generations
// counts its stats' 5, and a record whose detail says "merged 100 generations"
// but whose stats say none (reworded, or written before stats) counts nothing.
// They were read out of the detail with a regexp, so rewording the fan-out's
// summary would have emptied the chart. A failed merge's progress is not charted.
func TestOverviewCountsMergesFromTaskStatsNotDetails(t *testing.T) {
	e := newEnv(t, nil)
	c := e.browser(t)
	e.login(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	keys := keys.Under("/dash-test")
	now := time.Now()
	for _, task := range []tasks.Task{
		{ID: "0190-0001", State: tasks.StateDone, Detail: "done on 2 workers",
			Stats: tasks.Stats{Workers: 2, WorkersMerged: 2, GenerationsMerged: 5, ShardsAdopted: 2}},
		{ID: "0190-0002", State: tasks.StateDone, Detail: "merged 100 generations across 3/3 workers; adopted 9 orphaned shards"},
		{ID: "0190-0003", State: tasks.StateFailed, Detail: "merged 3 generations across 1/2 workers", Error: "unavailable: w2",
			Stats: tasks.Stats{Workers: 2, WorkersMerged: 1, WorkersSkipped: 1, GenerationsMerged: 3}},
	} {
		task.Kind, task.Target, task.EnqueuedAt, task.FinishedAt = tasks.KindMergeWAL, registry.MustParseTarget("demo"), now, now
		v, _ := json.Marshal(task)
		if _, err := e.cfg.Client.Put(ctx, keys.Task(task.ID), string(v)); err != nil {
			t.Fatal(err)
		}
	}
	go func() { defer close(done); e.dash.Run(ctx) }()
	testwait.For(t, 10*time.Second, "the feed's first load", func() (bool, string) {
		snap := e.dash.feed.snapshot()
		return snap.Loaded && len(snap.Recent) == 3, fmt.Sprintf("loaded %v, %d tasks", snap.Loaded, len(snap.Recent))
	})
	_, body := get(t, c, e.srv.URL+"/ui/")
	if want := `Merged, last hour</div><div class="value">5</div>`; !strings.Contains(body, want) {
		t.Errorf("overview lacks %s:\n%s", want, body)
	}
	if want := "2 adopted in the last hour"; !strings.Contains(body, want) {
		t.Errorf("overview lacks %q:\n%s", want, body)
	}
}

// Under mutual TLS without tokens the client certificate is the credential: a
// browser presenting one gets a Secure session without a login form, one
// without is sent to the login.
func TestMutualTLSCertificateStartsASessionWithoutTheForm(t *testing.T) {
	certs := testcerts.New(t, t.TempDir())
	e := newEnv(t, func(c *Config) {
		c.Guard = auth.NewGuard(auth.GuardConfig{RequireClientCert: true})
		c.Secure = true
	})
	serverTLS, err := auth.ServerTLS(certs.ServerCert, certs.ServerKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(e.dash)
	srv.TLS = serverTLS
	srv.StartTLS()
	defer srv.Close()
	client := func(cert bool) *http.Client {
		t.Helper()
		var cfg *tls.Config
		if cert {
			cfg, err = auth.ClientTLS(certs.CA, certs.ClientCert, certs.ClientKey)
		} else {
			cfg, err = auth.ClientTLS(certs.CA, "", "")
		}
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, _ := get(t, client(true), srv.URL+"/ui/stores")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with a client certificate: %s, want 200", resp.Status)
	}
	if ck := resp.Cookies(); len(ck) != 1 || !ck[0].Secure || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %v: want one Secure, HttpOnly, SameSite=Strict cookie", ck)
	}
	resp, _ = get(t, client(false), srv.URL+"/ui/stores")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("without a client certificate: %s, want a redirect to the login", resp.Status)
	}
}
