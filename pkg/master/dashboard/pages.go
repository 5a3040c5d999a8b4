package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// shardView is one shard's pending generations, and whether its worker is gone.
type shardView struct {
	Shard    string
	Pending  int64
	Missing  bool
	Orphaned bool
}

// storeView is one store as the pages show it.
type storeView struct {
	Target            registry.Target
	Kind, Name        string
	Version           uint64
	Rows, Deleted     int64
	Bytes             int64
	Fragments         int64
	Pending           int64
	PendingRows       int64
	Shards            []shardView
	Missing, Orphaned int
	LastMerge         *tasks.Task
	LastCompact       *tasks.Task
	Behind            bool
	ScannedAt         time.Time
	LastUpdated       time.Time
}

// statusOf maps an AdminService error to an HTTP status and message.
func statusOf(err error) (int, error) {
	st, ok := status.FromError(err)
	if !ok {
		return http.StatusInternalServerError, err
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return http.StatusBadRequest, errors.New(st.Message())
	case codes.NotFound:
		return http.StatusNotFound, errors.New(st.Message())
	case codes.FailedPrecondition:
		return http.StatusConflict, errors.New(st.Message())
	case codes.Unavailable, codes.DeadlineExceeded:
		return http.StatusServiceUnavailable, errors.New(st.Message())
	}
	return http.StatusInternalServerError, errors.New(st.Message())
}

// storeViews lists every store through the AdminService (with its missing
// shards), adding what the feed knows: deleted rows, bytes, last merge and last
// compaction.
func (d *Dashboard) storeViews(ctx context.Context) ([]storeView, error) {
	snap := d.feed.snapshot()
	var out []storeView
	token := ""
	for {
		resp, err := d.cfg.Admin.ListStats(ctx, &tidemarkv1.ListStatsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		for _, r := range resp.GetStats() {
			out = append(out, d.storeViewOf(r, snap))
		}
		if token = resp.GetNextPageToken(); token == "" || len(resp.GetStats()) == 0 {
			return out, nil
		}
	}
}

func (d *Dashboard) storeViewOf(r *tidemarkv1.StatsRow, snap snapshot) storeView {
	// The AdminService's answer is where the target's text enters.
	target, err := registry.ParseTarget(r.GetTarget())
	kind, name := string(target.Kind), target.Name
	if err != nil { // a row the scanner did not write: show it as it is
		kind, name = "?", r.GetTarget()
	}
	v := storeView{
		Target: target, Kind: kind, Name: name,
		Version: r.GetVersion(), Rows: r.GetRowCount(), Fragments: r.GetFragmentCount(),
		Pending: r.GetPendingWalGenerations(), ScannedAt: protoTime(r.GetScannedAt()), LastUpdated: protoTime(r.GetLastUpdated()),
	}
	v.Behind = v.Pending >= int64(d.cfg.WarnGenerations)
	missing := map[string]*tidemarkv1.MissingShard{}
	for _, m := range r.GetMissingShards() {
		missing[m.GetShard()] = m
		v.Missing++
		if m.GetOrphaned() {
			v.Orphaned++
		}
	}
	shards := map[string]int64{}
	for _, s := range r.GetActiveShards() {
		shards[s] = 0
	}
	for s, n := range r.GetPendingByShard() {
		shards[s] = n
	}
	for s, n := range shards {
		m := missing[s]
		v.Shards = append(v.Shards, shardView{Shard: s, Pending: n, Missing: m != nil, Orphaned: m.GetOrphaned()})
	}
	slices.SortFunc(v.Shards, func(a, b shardView) int {
		return cmp.Or(cmp.Compare(b.Pending, a.Pending), strings.Compare(a.Shard, b.Shard))
	})
	if row, ok := snap.Rows[v.Target]; ok {
		v.Deleted, v.Bytes, v.PendingRows = row.DeletedRows, row.Bytes, row.PendingWALRows
	}
	if last := snap.Last[v.Target]; last != nil {
		if t, ok := last[tasks.KindMergeWAL]; ok {
			v.LastMerge = &t
		}
		if t, ok := last[tasks.KindCompact]; ok {
			v.LastCompact = &t
		}
	}
	return v
}

// workerView is one worker on the overview.
type workerView struct {
	ID, GRPC, HTTP, Version, Source string
	Started                         time.Time
	Stores                          int
	Pending                         int64
}

type overviewData struct {
	Workers                       []workerView
	Stores, Behind                int
	Pending, MergedHour           int64
	Missing, Orphaned             int
	Queued, Running, Done, Failed int
	AdoptedHour                   int64
	Worst                         []storeView
	Failures                      []tasks.Task
	PendingChart, MergedChart     any
	Window                        string
	Warn                          int
	FeedLoaded                    bool
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, sess session) {
	ctx, cancel := d.callCtx(r)
	defer cancel()
	wresp, err := d.cfg.Admin.ListWorkers(ctx, &tidemarkv1.ListWorkersRequest{})
	if err != nil {
		code, err := statusOf(err)
		d.fail(w, r, sess, code, fmt.Errorf("list workers: %w", err))
		return
	}
	stores, err := d.storeViews(ctx)
	if err != nil {
		code, err := statusOf(err)
		d.fail(w, r, sess, code, fmt.Errorf("list stats: %w", err))
		return
	}
	now := d.cfg.Now()
	snap := d.feed.snapshot()
	data := overviewData{Stores: len(stores), Warn: d.cfg.WarnGenerations, FeedLoaded: snap.Loaded}
	byShard := map[string]*workerView{}
	for _, wk := range wresp.GetWorkers() {
		data.Workers = append(data.Workers, workerView{
			ID: wk.GetInstanceId(), GRPC: wk.GetGrpcAddr(), HTTP: wk.GetHttpAddr(), Version: wk.GetVersion(),
			Source: wk.GetSource(), Started: protoTime(wk.GetStartedAt()),
		})
	}
	for i := range data.Workers {
		byShard[data.Workers[i].ID] = &data.Workers[i]
	}
	for _, s := range stores {
		data.Pending += s.Pending
		data.Missing += s.Missing
		data.Orphaned += s.Orphaned
		if s.Behind {
			data.Behind++
		}
		for _, sh := range s.Shards {
			if wv := byShard[sh.Shard]; wv != nil {
				wv.Stores++
				wv.Pending += sh.Pending
			}
		}
	}
	worst := slices.Clone(stores)
	slices.SortFunc(worst, func(a, b storeView) int { return cmp.Compare(b.Pending, a.Pending) })
	for _, s := range worst {
		if len(data.Worst) == 5 || s.Pending == 0 {
			break
		}
		data.Worst = append(data.Worst, s)
	}
	const step = time.Minute
	win := chartWindow(now, d.feed.started)
	data.Window = win.Label
	merged := make([]float64, int(win.End.Sub(win.Start)/step)+1)
	for _, t := range snap.Recent {
		switch t.State {
		case tasks.StateQueued:
			data.Queued++
		case tasks.StateRunning:
			data.Running++
		case tasks.StateDone:
			data.Done++
		case tasks.StateFailed:
			data.Failed++
			if len(data.Failures) < 5 {
				data.Failures = append(data.Failures, t)
			}
		}
		// From the task's stats, never its detail: rewording a runner's
		// summary must not empty a chart. A failed merge's partial progress is
		// not charted; its adoptions are counted.
		data.AdoptedHour += t.Stats.ShardsAdopted
		if n := t.Stats.GenerationsMerged; n > 0 && t.State == tasks.StateDone {
			data.MergedHour += n
			if i := int(t.FinishedAt.Sub(win.Start) / step); i >= 0 && i < len(merged) {
				merged[i] += float64(n) / step.Seconds()
			}
		}
	}
	data.PendingChart = lineChart("pending generations", win, snap.Pending)
	data.MergedChart = barChart("merged generations/s", win, merged, step)
	d.render(w, r, http.StatusOK, "overview", d.newPage(sess, "overview", "Overview", data))
}

type storesData struct {
	Stores    []storeView
	Total     int
	Query     string
	Sort, Dir string
	Warn      int
	Columns   []sortColumn
}

// sortColumn is a sortable column header: its link sorts by it, flipping the
// direction when it is the current sort.
type sortColumn struct {
	Key, Label, Dir string
	Active, Numeric bool
}

var storeColumns = []struct {
	key, label string
	numeric    bool
	less       func(a, b storeView) int
}{
	{"name", "Store", false, func(a, b storeView) int { return a.Target.Compare(b.Target) }},
	{"version", "Version", true, func(a, b storeView) int { return cmp.Compare(a.Version, b.Version) }},
	{"rows", "Rows", true, func(a, b storeView) int { return cmp.Compare(a.Rows, b.Rows) }},
	{"size", "Size", true, func(a, b storeView) int { return cmp.Compare(a.Bytes, b.Bytes) }},
	{"fragments", "Fragments", true, func(a, b storeView) int { return cmp.Compare(a.Fragments, b.Fragments) }},
	{"deleted", "Deleted rows", true, func(a, b storeView) int { return cmp.Compare(a.Deleted, b.Deleted) }},
	{"pending", "Pending gens", true, func(a, b storeView) int { return cmp.Compare(a.Pending, b.Pending) }},
	{"orphaned", "Shards w/o worker", true, func(a, b storeView) int { return cmp.Compare(a.Missing, b.Missing) }},
	{"merge", "Last merge", false, func(a, b storeView) int { return cmp.Compare(finishedAt(a.LastMerge), finishedAt(b.LastMerge)) }},
	{"compact", "Last compaction", false, func(a, b storeView) int {
		return cmp.Compare(finishedAt(a.LastCompact), finishedAt(b.LastCompact))
	}},
}

func finishedAt(t *tasks.Task) int64 {
	if t == nil {
		return 0
	}
	return t.FinishedAt.UnixNano()
}

func (d *Dashboard) stores(w http.ResponseWriter, r *http.Request, sess session) {
	ctx, cancel := d.callCtx(r)
	defer cancel()
	all, err := d.storeViews(ctx)
	if err != nil {
		code, err := statusOf(err)
		d.fail(w, r, sess, code, fmt.Errorf("list stats: %w", err))
		return
	}
	q := r.URL.Query()
	data := storesData{Total: len(all), Query: strings.TrimSpace(q.Get("q")), Sort: q.Get("sort"), Dir: q.Get("dir"), Warn: d.cfg.WarnGenerations}
	if data.Sort == "" {
		data.Sort, data.Dir = "pending", "desc"
	}
	if data.Dir != "asc" {
		data.Dir = "desc"
	}
	for _, s := range all {
		if data.Query == "" || strings.Contains(strings.ToLower(s.Target.String()), strings.ToLower(data.Query)) {
			data.Stores = append(data.Stores, s)
		}
	}
	for _, c := range storeColumns {
		col := sortColumn{Key: c.key, Label: c.label, Numeric: c.numeric, Dir: "desc"}
		if c.key == data.Sort {
			col.Active = true
			if data.Dir == "desc" {
				col.Dir = "asc"
			}
			slices.SortStableFunc(data.Stores, func(a, b storeView) int {
				n := cmp.Or(c.less(a, b), a.Target.Compare(b.Target))
				if data.Dir == "desc" {
					return -n
				}
				return n
			})
		}
		if c.key == "name" && !col.Active {
			col.Dir = "asc"
		}
		data.Columns = append(data.Columns, col)
	}
	d.render(w, r, http.StatusOK, "stores", d.newPage(sess, "stores", "Stores", data))
}

type storeData struct {
	Store        storeView
	PendingChart any
	RowsChart    any
	Window       string
	Tasks        []*tidemarkv1.Task
	Records      recordsPage
	Consumers    consumersPanel
	Kinds        []string
}

func (d *Dashboard) store(w http.ResponseWriter, r *http.Request, sess session) {
	target, err := registry.ParseTarget(r.PathValue("target"))
	if err != nil {
		d.fail(w, r, sess, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	stores, err := d.storeViews(ctx)
	if err != nil {
		code, err := statusOf(err)
		d.fail(w, r, sess, code, fmt.Errorf("list stats: %w", err))
		return
	}
	i := slices.IndexFunc(stores, func(s storeView) bool { return s.Target == target })
	if i < 0 {
		d.fail(w, r, sess, http.StatusNotFound, fmt.Errorf("no stats row for %q: the store is not registered, or the master has not scanned it yet", target))
		return
	}
	data := storeData{Store: stores[i], Kinds: buttonKinds()}
	win := chartWindow(d.cfg.Now(), d.feed.started)
	pending, rows, _ := d.feed.storeSeries(target)
	data.Window = win.Label
	data.PendingChart = lineChart("pending generations", win, pending)
	data.RowsChart = lineChart("rows", win, rows)
	tresp, err := d.cfg.Admin.ListTasks(ctx, &tidemarkv1.ListTasksRequest{Target: target.String(), NewestFirst: true, PageSize: 15})
	if err != nil {
		code, err := statusOf(err)
		d.fail(w, r, sess, code, fmt.Errorf("list tasks: %w", err))
		return
	}
	data.Tasks = tresp.GetTasks()
	data.Records = d.records(ctx, r, target)
	data.Consumers = d.consumers(ctx, target)
	d.render(w, r, http.StatusOK, "store", d.newPage(sess, "stores", target.String(), data))
}

// enqueueResult is the answer to a button pressed by the page's script.
type enqueueResult struct {
	Task         taskJSON `json:"task"`
	Deduplicated bool     `json:"deduplicated"`
}

// buttonKinds are the kinds a store page's buttons enqueue: never repair, which
// drops data and is an operator's command only.
func buttonKinds() []string {
	return []string{string(tasks.KindMergeWAL), string(tasks.KindCompact), string(tasks.KindVerify), string(tasks.KindExport)}
}

// enqueue runs a store's button: a merge_wal, compact, verify or export task
// through the AdminService's EnqueueTask, as `master admin enqueue` and `master
// admin export` do (an export with the form's destination, and optionally
// version, columns and filter). The script gets JSON; a form without script is
// redirected back to the store.
func (d *Dashboard) enqueue(w http.ResponseWriter, r *http.Request, sess session) {
	target := r.PathValue("target")
	kind := r.PostFormValue("kind")
	if !slices.Contains(buttonKinds(), kind) {
		d.fail(w, r, sess, http.StatusBadRequest, fmt.Errorf("kind %q: the buttons enqueue %s", kind, strings.Join(buttonKinds(), ", ")))
		return
	}
	req := &tidemarkv1.EnqueueTaskRequest{Kind: kind, Target: target}
	if kind == string(tasks.KindExport) {
		spec, err := exportForm(r)
		if err != nil {
			if wantsJSON(r) {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			d.fail(w, r, sess, http.StatusBadRequest, err)
			return
		}
		req.Export = spec
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	resp, err := d.cfg.Admin.EnqueueTask(ctx, req)
	if err != nil {
		code, err := statusOf(err)
		if wantsJSON(r) {
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		d.fail(w, r, sess, code, fmt.Errorf("enqueue %s on %s: %w", kind, target, err))
		return
	}
	d.cfg.Logger.Info("dashboard: task enqueued", "task", resp.GetTask().GetId(), "kind", kind, "target", target, "deduplicated", resp.GetDeduplicated())
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, enqueueResult{Task: taskJSONOf(resp.GetTask()), Deduplicated: resp.GetDeduplicated()})
		return
	}
	http.Redirect(w, r, Root+"tasks/"+resp.GetTask().GetId(), http.StatusSeeOther)
}

// exportForm reads an export's spec from the store page's form: destination
// (required), version, columns (comma-separated), filter.
func exportForm(r *http.Request) (*tidemarkv1.ExportSpec, error) {
	spec := &tidemarkv1.ExportSpec{Destination: strings.TrimSpace(r.PostFormValue("destination")), Filter: r.PostFormValue("filter")}
	if spec.Destination == "" {
		return nil, errors.New("destination: give the bucket URL to export to (file:///dir, s3://bucket?region=..., gs://bucket, azblob://container)")
	}
	if v := strings.TrimSpace(r.PostFormValue("version")); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("version %q: want a base-table version (a positive integer), or nothing for the store now", v)
		}
		spec.Version = n
	}
	for c := range strings.SplitSeq(r.PostFormValue("columns"), ",") {
		if c = strings.TrimSpace(c); c != "" {
			spec.Columns = append(spec.Columns, c)
		}
	}
	return spec, nil
}

type tasksData struct {
	Tasks               []*tidemarkv1.Task
	State, Kind, Target string
	Next, Token         string
	States, Kinds       []string
}

func (d *Dashboard) tasks(w http.ResponseWriter, r *http.Request, sess session) {
	q := r.URL.Query()
	data := tasksData{State: q.Get("state"), Kind: q.Get("kind"), Target: strings.TrimSpace(q.Get("target")), Token: q.Get("page_token")}
	for _, s := range tasks.States() {
		data.States = append(data.States, string(s))
	}
	for _, k := range tasks.Kinds() {
		data.Kinds = append(data.Kinds, string(k))
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	resp, err := d.cfg.Admin.ListTasks(ctx, &tidemarkv1.ListTasksRequest{
		State: data.State, Kind: data.Kind, Target: data.Target, PageSize: 100, PageToken: data.Token, NewestFirst: true,
	})
	if err != nil {
		code, err := statusOf(err)
		d.fail(w, r, sess, code, fmt.Errorf("list tasks: %w", err))
		return
	}
	data.Tasks, data.Next = resp.GetTasks(), resp.GetNextPageToken()
	d.render(w, r, http.StatusOK, "tasks", d.newPage(sess, "tasks", "Tasks", data))
}

func (d *Dashboard) task(w http.ResponseWriter, r *http.Request, sess session) {
	ctx, cancel := d.callCtx(r)
	defer cancel()
	resp, err := d.cfg.Admin.GetTask(ctx, &tidemarkv1.GetTaskRequest{Id: r.PathValue("id")})
	if err != nil {
		code, err := statusOf(err)
		if wantsJSON(r) {
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		d.fail(w, r, sess, code, err)
		return
	}
	if wantsJSON(r) { // the script catching up after its event stream reconnected
		writeJSON(w, http.StatusOK, taskJSONOf(resp.GetTask()))
		return
	}
	d.render(w, r, http.StatusOK, "task", d.newPage(sess, "tasks", "Task "+resp.GetTask().GetId(), resp.GetTask()))
}
