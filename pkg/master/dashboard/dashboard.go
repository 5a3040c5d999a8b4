package dashboard

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// Root is the path the dashboard is served under.
const Root = "/ui/"

// DefaultWarnGenerations is the pending-generation count over which a store is
// marked as falling behind: the worker's warn threshold (reads log above it).
const DefaultWarnGenerations = 256

//go:embed assets
var assets embed.FS

// Admin is what the dashboard asks of the master's AdminService: the code path of
// `master admin`, so a button does exactly what the command does.
type Admin interface {
	EnqueueTask(context.Context, *tidemarkv1.EnqueueTaskRequest) (*tidemarkv1.EnqueueTaskResponse, error)
	GetTask(context.Context, *tidemarkv1.GetTaskRequest) (*tidemarkv1.GetTaskResponse, error)
	ListTasks(context.Context, *tidemarkv1.ListTasksRequest) (*tidemarkv1.ListTasksResponse, error)
	ListStats(context.Context, *tidemarkv1.ListStatsRequest) (*tidemarkv1.ListStatsResponse, error)
	ListWorkers(context.Context, *tidemarkv1.ListWorkersRequest) (*tidemarkv1.ListWorkersResponse, error)
}

// Config is what a Dashboard needs.
type Config struct {
	// Admin enqueues tasks and lists tasks, stats and workers. Required.
	Admin Admin
	// Client and Prefix locate the keys the feed watches (P/stats/, P/tasks/).
	// Required.
	Client *clientv3.Client
	Prefix string
	// Guard checks the login's token (and client certificate); nil: the pages are
	// open (--auth-disabled), and say so.
	Guard *auth.Guard
	// Secure marks the session cookie Secure: set it when the master serves TLS.
	Secure bool
	// Workers reads records through a worker's HTTP data API (with the master's
	// outgoing credential). Required.
	Workers *workerhttp.Client
	// Consumers and Horizons, if both set, show each store's named consumers
	// on its page, with their lag behind the store's horizon (the master's
	// consumers.Cursors and horizon.View, which the master runs).
	Consumers ConsumerCursors
	Horizons  Horizons
	// WarnGenerations marks stores with at least this many pending generations
	// (DefaultWarnGenerations).
	WarnGenerations int
	// SessionTTL is how long a login lasts (DefaultSessionTTL).
	SessionTTL time.Duration
	// CallTimeout bounds the AdminService and worker calls of one page (10 s).
	CallTimeout time.Duration
	// Now is the clock (time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Dashboard serves the pages; Run feeds its history and live task stream.
type Dashboard struct {
	cfg      Config
	feed     *Feed
	sessions *sessions
	pages    map[string]*template.Template
	static   http.Handler
	mux      *http.ServeMux
}

// New checks cfg and returns a dashboard.
func New(cfg Config) (*Dashboard, error) {
	switch {
	case cfg.Admin == nil:
		return nil, errors.New("dashboard: Admin is required")
	case cfg.Client == nil:
		return nil, errors.New("dashboard: Client (etcd) is required")
	case cfg.Workers == nil:
		return nil, errors.New("dashboard: Workers is required")
	}
	if cfg.WarnGenerations <= 0 {
		cfg.WarnGenerations = DefaultWarnGenerations
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("dashboard: assets: %w", err)
	}
	d := &Dashboard{
		cfg:      cfg,
		feed:     NewFeed(cfg.Client, keys.Under(cfg.Prefix), cfg.Now, cfg.Logger),
		sessions: newSessions(cfg.SessionTTL, cfg.Now),
		pages:    pages,
		static:   http.StripPrefix(Root+"static/", http.FileServerFS(static)),
	}
	d.routes()
	return d, nil
}

// Run feeds the history and the live task stream until ctx is done.
func (d *Dashboard) Run(ctx context.Context) { d.feed.Run(ctx) }

func (d *Dashboard) routes() {
	mux := http.NewServeMux()
	s := d.requireSession
	mux.Handle("GET "+Root+"static/", d.static)
	mux.HandleFunc("GET "+Root+"login", d.login)
	mux.HandleFunc("POST "+Root+"login", d.login)
	mux.Handle("POST "+Root+"logout", s(d.logout))
	mux.Handle("GET "+Root+"{$}", s(d.overview))
	mux.Handle("GET "+Root+"stores", s(d.stores))
	mux.Handle("GET "+Root+"stores/{target}", s(d.store))
	mux.Handle("POST "+Root+"stores/{target}/tasks", s(d.enqueue))
	mux.Handle("GET "+Root+"stores/{target}/records/{id}/blob", s(d.blob))
	mux.Handle("GET "+Root+"tasks", s(d.tasks))
	mux.Handle("GET "+Root+"tasks/{id}", s(d.task))
	mux.Handle("GET "+Root+"events", s(d.events))
	mux.Handle(Root, s(func(w http.ResponseWriter, r *http.Request, sess session) {
		d.fail(w, r, sess, http.StatusNotFound, errors.New("no such page"))
	}))
	d.mux = mux
}

// ServeHTTP serves the pages under Root, with headers that keep the browser from
// running or framing anything that did not come from the master.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	d.mux.ServeHTTP(w, r)
}

// page is what every template gets.
type page struct {
	Title        string
	Nav          string
	AuthDisabled bool
	CSRF         string
	Next         string
	Error        string
	Now          time.Time
	Data         any
}

func (d *Dashboard) newPage(sess session, nav, title string, data any) page {
	return page{Title: title, Nav: nav, AuthDisabled: d.cfg.Guard == nil, CSRF: sess.csrf, Now: d.cfg.Now(), Data: data}
}

// render executes the named page into a buffer first, so a template error is a
// clean 500 and never half a page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if p.Now.IsZero() {
		p.Now = d.cfg.Now()
	}
	p.AuthDisabled = d.cfg.Guard == nil
	var buf bytes.Buffer
	if err := d.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		d.cfg.Logger.Error("dashboard: render failed", "page", name, "path", r.URL.Path, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, sess session, status int, err error) {
	if status >= 500 {
		d.cfg.Logger.Warn("dashboard: page failed", "path", r.URL.Path, "status", status, "err", err)
	}
	p := d.newPage(sess, "", http.StatusText(status), nil)
	p.Error = err.Error()
	d.render(w, r, status, "error", p)
}

func (d *Dashboard) callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.cfg.CallTimeout)
}
