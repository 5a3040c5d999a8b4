package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
	"github.com/tidemark-io/tidemark/testutil/storetest"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// Table maintenance over a long run (issue 15): one store merged many times in
// small passes, with overwrites of earlier ids so deletion vectors accumulate, once
// with no maintenance and once with the compaction sweep's rule and the compact
// task (maintain.Maintainer.Compact: compaction, then cleanup of the table and of
// the WAL shards). Both run in this one process, a merge of one and then the same
// merge of the other, on two file:// buckets, with the same rows.
//
// It is not an incident reproduction (the old shape is "no maintenance", which
// production still has when the sweep is off), so it writes a section of its own
// into BENCHMARKS.md, before the incident reproductions (WriteMaintenanceSection).

// MaintenanceConfig sizes the long-run maintenance scenario.
type MaintenanceConfig struct {
	// Merges is the number of merge passes; each appends RowsPerMerge rows of which
	// a share Overwrites rewrites ids written earlier (chosen uniformly), seals them
	// into one generation and merges it: one fragment per merge.
	Merges       int
	RowsPerMerge int
	Overwrites   float64
	// Checkpoints are the merge counts after which both tables are measured.
	Checkpoints []int
	// SweepEvery is the merges between two compaction sweeps (COMPACTION_INTERVAL
	// over the merge interval). A sweep runs the compact task when the newest
	// manifest meets the rule of scanner.CompactionSweeper
	// (scanner.CompactionReason: fragments to sort, at least MinFragments level-0
	// fragments, a level past its target, deleted rows at or over DeletedRatio of
	// the rows, or CleanupVersions versions since the last task; not when it is
	// unchanged since the last task).
	SweepEvery      int
	MinFragments    int
	DeletedRatio    float64
	CleanupVersions uint64
	// Compact, Retention and WAL configure the task (the worker's flags).
	Compact   table.CompactOptions
	Retention table.Retention
	WAL       wal.Retention
	// BudgetBytes is the worker's MERGE_MEMORY_BUDGET; the task reserves its charge
	// on it (maintain.Config.Reserver, merge.PassCostFactor).
	BudgetBytes int64
	// Scans and Lookups are the cold samples per checkpoint and run.
	Scans, Lookups int
}

// DefaultMaintenanceConfig is the run: 2,000 merges of 20 rows, 30%
// overwrites; a sweep every 10 merges with the master's defaults (MIN_FRAGMENTS
// 8 level-0 fragments); the worker's compaction defaults; retention of 10 versions and a 300 ms
// age and safety window, so that garbage collection acts at the run's time scale.
func DefaultMaintenanceConfig() MaintenanceConfig {
	const window = 300 * time.Millisecond
	return MaintenanceConfig{
		Merges: 2000, RowsPerMerge: 20, Overwrites: 0.3, Checkpoints: []int{100, 500, 1000, 2000},
		SweepEvery: 10, MinFragments: scanner.DefaultMinFragments, DeletedRatio: scanner.DefaultDeletedRatio,
		CleanupVersions: scanner.DefaultCleanupEveryVersions,
		Compact: table.CompactOptions{TargetRows: table.DefaultTargetRows, MaxSources: table.DefaultMaxSources,
			DeletedRatio: table.DefaultDeletedRatio},
		Retention:   table.Retention{KeepVersions: 10, KeepAge: window, SafetyWindow: window},
		WAL:         wal.Retention{KeepManifests: 10, SafetyWindow: window},
		BudgetBytes: 2 << 30,
		Scans:       25, Lookups: 60,
	}
}

// TableBytes is what one listing of a store's directory found.
type TableBytes struct {
	// Stored is every byte under the table directory but the WAL (_wal/): data
	// files, bloom filters, deletion vectors, manifests, the version hint.
	Stored int64
	// Manifests is the bytes under _versions/, Versions the number of manifests,
	// Newest the newest manifest's bytes.
	Manifests      int64
	Versions       int
	Newest         int64
	WAL            int64
	DataFiles      int // data files (Parquet) present
	DeletionVector int // deletion vector files present
	// Referenced is the bytes of the newest version's files: its data files, bloom
	// filters and deletion vectors, and its manifest.
	Referenced int64
	// LiveRows is the newest version's data file bytes scaled by live / total
	// rows of each fragment: what a fully compacted table would about hold.
	LiveRows int64
	// OlderOnly is the bytes of files only kept versions other than the newest
	// reference; Unreferenced the bytes of files no kept version references
	// (younger than the safety window, or waiting for the next cleanup). Measured
	// with maintenance only.
	OlderOnly, Unreferenced int64
}

// Ratio is Stored / Referenced.
func (b TableBytes) Ratio() float64 { return float64(b.Stored) / float64(max(b.Referenced, 1)) }

// MaintenancePoint is one run's measurements after a checkpoint's merge, before
// the sweep that falls on that merge.
type MaintenancePoint struct {
	Merges                int
	Version               uint64
	Fragments             int
	LiveRows, DeletedRows int64
	// LargestFragment is the rows of the newest version's largest fragment.
	LargestFragment int64
	Bytes           TableBytes
	// Merges holds the seal + merge times since the previous checkpoint.
	MergeTimes Quantiles
	// Scan and Lookup are cold: a new table handle per sample (table.Open, which
	// reads the newest manifest, then a full Scan, or a Get of a random live id).
	Scan, Lookup Quantiles
}

// MaintenanceTask is one compact task of the maintained run.
type MaintenanceTask struct {
	AfterMerge int
	Report     maintain.Report
	Elapsed    time.Duration
	// Charge is what the task reserved on the merge budget (its Reserver's
	// argument); PeakHeap the Go heap (objects, live and not yet swept) above
	// the baseline taken after a GC just before the task, sampled every
	// millisecond during it, with GOGC lowered to heapGCPercent for the task so
	// that little garbage is counted; Allocated its allocations.
	Charge, PeakHeap, Allocated int64
	// Before and After are the table's bytes around the task.
	Before, After TableBytes
}

// MaintenanceRun is one run: with maintenance or without.
type MaintenanceRun struct {
	Maintained bool
	Points     []MaintenancePoint
	// MaxFragments is the most fragments the newest version had after any merge.
	MaxFragments int
	Tasks        []MaintenanceTask
	Elapsed      time.Duration // merges and tasks, not the measurements
}

// MaintenanceResult is the scenario's outcome.
type MaintenanceResult struct {
	Date     time.Time
	Command  string
	Machine  mdreport.Machine
	Seed     uint64
	Duration time.Duration
	Config   MaintenanceConfig
	Off, On  MaintenanceRun
}

const maintenanceStore = "maintained"

type maintRun struct {
	res     *MaintenanceRun
	w       *benchWorker
	s       *store.Store
	rel     store.Release
	bucket  *objstore.Bucket
	dir     string
	m       *maintain.Maintainer
	charges *chargeRecorder
	last    uint64 // version at the last task (the sweep's lastVersion)
	seen    bool
	merges  durations // since the last checkpoint
}

// chargeRecorder passes reservations to the merger and remembers the last charge.
type chargeRecorder struct {
	r    maintain.Reserver
	last int64
}

func (c *chargeRecorder) Reserve(ctx context.Context, charge int64) (func(), error) {
	c.last = charge
	return c.r.Reserve(ctx, charge)
}

func (c *chargeRecorder) Merging() int { return c.r.Merging() }

// RunMaintenance runs the scenario: both runs side by side, merge by merge.
func RunMaintenance(ctx context.Context, env *Env, cfg MaintenanceConfig) (MaintenanceResult, error) {
	res := MaintenanceResult{Date: time.Now(), Seed: env.Seed, Config: cfg, Off: MaintenanceRun{}, On: MaintenanceRun{Maintained: true}}
	start := time.Now()
	spec, err := schema.ParseSpec([]byte(storetest.Spec))
	if err != nil {
		return res, err
	}
	canon, err := spec.MarshalJSON()
	if err != nil {
		return res, err
	}
	var runs []*maintRun
	defer func() {
		for _, r := range runs {
			r.rel()
			r.w.close()
		}
	}()
	for _, out := range []*MaintenanceRun{&res.Off, &res.On} {
		name := "maint-off"
		if out.Maintained {
			name = "maint-on"
		}
		b, _, err := env.openFile(ctx, name)
		if err != nil {
			return res, err
		}
		w := newWorker(b, "worker-00", store.Config{}, merge.Config{MaxGenerations: merge.DefaultMaxGenerations,
			MaxBytes: merge.DefaultMaxBytes, BudgetBytes: cfg.BudgetBytes})
		e, err := w.stores.Create(ctx, registry.Entry{Kind: registry.KindGeneric, Name: maintenanceStore, Schema: canon})
		if err != nil {
			w.close()
			return res, err
		}
		s, rel, err := w.stores.Open(ctx, registry.KindGeneric, maintenanceStore)
		if err != nil {
			w.close()
			return res, err
		}
		r := &maintRun{res: out, w: w, s: s, rel: rel, bucket: b, dir: e.URI}
		if out.Maintained {
			r.charges = &chargeRecorder{r: w.merger}
			r.m = maintain.New(maintain.Config{Compact: cfg.Compact, Retention: cfg.Retention, WAL: cfg.WAL,
				Reserver: r.charges, CostFactor: merge.PassCostFactor, Logger: quiet})
		}
		runs = append(runs, r)
	}

	rng := rand.New(rand.NewPCG(env.Seed, 15))
	model := map[string]int64{}
	var ids []string
	checkpoint := map[int]bool{}
	for _, c := range cfg.Checkpoints {
		checkpoint[c] = true
	}
	overwrites := int(math.Round(float64(cfg.RowsPerMerge) * cfg.Overwrites))
	for n := 1; n <= cfg.Merges; n++ {
		v := int64(n)
		pass := make([]string, 0, cfg.RowsPerMerge)
		inPass := map[string]bool{}
		for range min(overwrites, len(ids)) {
			id := ids[rng.IntN(len(ids))]
			for inPass[id] {
				id = ids[rng.IntN(len(ids))]
			}
			inPass[id] = true
			pass = append(pass, id)
		}
		for len(pass) < cfg.RowsPerMerge {
			id := fmt.Sprintf("%016x", rng.Uint64())
			if _, dup := model[id]; dup || inPass[id] {
				continue
			}
			inPass[id] = true
			ids = append(ids, id)
			pass = append(pass, id)
		}
		for _, id := range pass {
			model[id] = v
		}
		// A checkpoint measures after the merge and before the sweep of that merge
		// (checkpoints fall on sweeps): not right after a compaction.
		for _, r := range runs {
			if err := r.merge(ctx, v, pass); err != nil {
				return res, fmt.Errorf("merge %d (%s): %w", n, r.name(), err)
			}
			if checkpoint[n] {
				p, err := r.measure(ctx, cfg, n, model, ids, rng)
				if err != nil {
					return res, fmt.Errorf("measure %s after merge %d: %w", r.name(), n, err)
				}
				r.res.Points = append(r.res.Points, p)
				env.log().Info("maintenance: measured", "run", r.name(), "merges", n, "fragments", p.Fragments,
					"stored", p.Bytes.Stored, "referenced", p.Bytes.Referenced, "scan_p50", p.Scan.P50, "lookup_p50", p.Lookup.P50)
			}
			if r.m != nil && n%cfg.SweepEvery == 0 && r.due(cfg) {
				if err := r.task(ctx, n); err != nil {
					return res, fmt.Errorf("compact task after merge %d: %w", n, err)
				}
			}
		}
		if n%100 == 0 && !checkpoint[n] {
			env.log().Info("maintenance: progress", "merges", n, "fragments_off", len(runs[0].s.Table().Latest().Fragments),
				"fragments_on", len(runs[1].s.Table().Latest().Fragments), "tasks", len(res.On.Tasks))
		}
	}
	for _, r := range runs {
		if n, err := pendingGenerations(ctx, r.bucket, r.dir); err != nil || n > 0 {
			return res, fmt.Errorf("%s: %d generations pending at the end (%v)", r.name(), n, err)
		}
	}
	res.Duration = time.Since(start)
	return res, nil
}

func (r *maintRun) name() string {
	if r.res.Maintained {
		return "maintenance on"
	}
	return "maintenance off"
}

// merge appends pass with value v, seals it and merges it.
func (r *maintRun) merge(ctx context.Context, v int64, pass []string) error {
	start := time.Now()
	if err := storetest.Append(ctx, r.s, v, pass...); err != nil {
		return err
	}
	if _, err := r.s.Seal(ctx); err != nil {
		return err
	}
	if _, err := r.w.merger.Merge(ctx, r.s, true); err != nil {
		return err
	}
	d := time.Since(start)
	r.merges = append(r.merges, d)
	r.res.Elapsed += d
	r.res.MaxFragments = max(r.res.MaxFragments, len(r.s.Table().Latest().Fragments))
	return nil
}

// due applies the compaction sweep's rule (scanner.CompactionReason) to the
// newest manifest, and remembers its version as the sweep does when it enqueues.
func (r *maintRun) due(cfg MaintenanceConfig) bool {
	st := r.s.Table().Latest().Stats()
	row := stats.Row{Version: st.Version, RowCount: st.Rows, FragmentCount: st.Fragments, DeletedRows: st.DeletedRows,
		Level0Fragments: st.Level0, UnsortedFragments: st.Unsorted, SpillingLevels: st.Spilling}
	rule := scanner.CompactionSweepConfig{MinFragments: cfg.MinFragments, DeletedRatio: cfg.DeletedRatio,
		CleanupEveryVersions: int(cfg.CleanupVersions)}
	if scanner.CompactionReason(rule, row, r.last, r.seen) == "" {
		return false
	}
	r.seen, r.last = true, st.Version
	return true
}

// task runs one compact task and samples the heap during it.
func (r *maintRun) task(ctx context.Context, n int) error {
	t := MaintenanceTask{AfterMerge: n}
	var err error
	if t.Before, err = r.tableBytes(ctx, true); err != nil {
		return err
	}
	r.charges.last = 0
	var rep maintain.Report
	start := time.Now()
	t.PeakHeap, t.Allocated, err = heapDuring(func() error {
		rep, err = r.m.Compact(ctx, r.s)
		return err
	})
	t.Elapsed = time.Since(start)
	r.res.Elapsed += t.Elapsed
	if err != nil {
		return err
	}
	t.Report, t.Charge = rep, r.charges.last
	if t.After, err = r.tableBytes(ctx, true); err != nil {
		return err
	}
	r.res.Tasks = append(r.res.Tasks, t)
	return nil
}

var heapMetrics = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}

func readHeap() (inUse, allocs int64) {
	s := make([]metrics.Sample, len(heapMetrics))
	copy(s, heapMetrics)
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

// heapGCPercent is GOGC while a task's heap is sampled: at the default 100 a task
// of a few MiB finishes before any GC, and its peak would be its allocations.
const heapGCPercent = 10

// heapDuring runs fn after a GC and returns the peak heap in use above the
// heap right after that GC, sampled every millisecond with GOGC at
// heapGCPercent, and the bytes fn allocated.
func heapDuring(fn func() error) (peak, allocated int64, err error) {
	defer debug.SetGCPercent(debug.SetGCPercent(heapGCPercent))
	runtime.GC()
	base, allocs0 := readHeap()
	stop, done := make(chan struct{}), make(chan int64)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		top := base
		for {
			select {
			case <-stop:
				done <- top
				return
			case <-tick.C:
				if h, _ := readHeap(); h > top {
					top = h
				}
			}
		}
	}()
	err = fn()
	close(stop)
	top := <-done
	h, allocs1 := readHeap()
	return max(top, h) - base, allocs1 - allocs0, err
}

func manifestPath(v uint64) string { return fmt.Sprintf("_versions/%020d.json", v) }

// tableBytes lists the store's directory. With refs it also reads every kept
// version and splits the files the newest does not reference into those older
// kept versions reference and the rest.
func (r *maintRun) tableBytes(ctx context.Context, refs bool) (TableBytes, error) {
	var tb TableBytes
	objs, err := r.bucket.List(ctx, r.dir+"/")
	if err != nil {
		return tb, err
	}
	size := make(map[string]int64, len(objs))
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, r.dir+"/")
		size[rel] = o.Size
		switch {
		case strings.HasPrefix(rel, "_wal/"):
			tb.WAL += o.Size
			continue
		case strings.HasPrefix(rel, "_versions/"):
			tb.Manifests += o.Size
			tb.Versions++
		case strings.HasPrefix(rel, "data/") && strings.HasSuffix(rel, ".parquet"):
			tb.DataFiles++
		case strings.HasPrefix(rel, "_deletions/"):
			tb.DeletionVector++
		}
		tb.Stored += o.Size
	}
	t := r.s.Table()
	m := t.Latest()
	tb.Newest = size[manifestPath(m.Version)]
	newest := fileRefs(m)
	for p := range newest {
		tb.Referenced += size[p]
	}
	tb.Referenced += tb.Newest
	for _, f := range m.Fragments {
		if f.Rows > 0 {
			tb.LiveRows += f.Bytes * f.LiveRows() / f.Rows
		}
	}
	if !refs {
		return tb, nil
	}
	vs, err := t.Versions(ctx)
	if err != nil {
		return tb, err
	}
	older := map[string]bool{}
	for _, v := range vs {
		if v == m.Version {
			continue
		}
		om, err := t.Load(ctx, v)
		if err != nil {
			return tb, err
		}
		for p := range fileRefs(om) {
			if !newest[p] {
				older[p] = true
			}
		}
	}
	for p := range older {
		tb.OlderOnly += size[p]
	}
	for p, n := range size {
		if (strings.HasPrefix(p, "data/") || strings.HasPrefix(p, "_deletions/")) && !newest[p] && !older[p] {
			tb.Unreferenced += n
		}
	}
	return tb, nil
}

// fileRefs returns the data files, bloom filters and deletion vectors m references.
func fileRefs(m *table.Manifest) map[string]bool {
	out := make(map[string]bool, 3*len(m.Fragments))
	for _, f := range m.Fragments {
		out[f.Path] = true
		if f.Bloom != "" {
			out[f.Bloom] = true
		}
		if f.Deletions != nil {
			out[f.Deletions.Path] = true
		}
	}
	return out
}

// measure takes a checkpoint's figures; a scan before the timed ones checks every
// row against the model (each id once, with its last value), and every lookup
// checks its row.
func (r *maintRun) measure(ctx context.Context, cfg MaintenanceConfig, n int, model map[string]int64, ids []string, rng *rand.Rand) (MaintenancePoint, error) {
	m := r.s.Table().Latest()
	st := m.Stats()
	p := MaintenancePoint{Merges: n, Version: m.Version, Fragments: st.Fragments, LiveRows: st.Rows, DeletedRows: st.DeletedRows,
		MergeTimes: r.merges.quantiles()}
	r.merges = nil
	var err error
	if p.Bytes, err = r.tableBytes(ctx, r.res.Maintained); err != nil {
		return p, err
	}
	for _, f := range m.Fragments {
		p.LargestFragment = max(p.LargestFragment, f.Rows)
	}
	if st.Rows != int64(len(model)) {
		return p, fmt.Errorf("version %d has %d live rows, want %d", m.Version, st.Rows, len(model))
	}
	if _, err := coldScan(ctx, r.bucket, r.dir, model, true); err != nil { // the check, not timed
		return p, err
	}
	var scans, lookups durations
	for range cfg.Scans {
		d, err := coldScan(ctx, r.bucket, r.dir, model, false)
		if err != nil {
			return p, err
		}
		scans = append(scans, d)
	}
	for range cfg.Lookups {
		d, err := coldLookup(ctx, r.bucket, r.dir, ids[rng.IntN(len(ids))], model)
		if err != nil {
			return p, err
		}
		lookups = append(lookups, d)
	}
	p.Scan, p.Lookup = scans.quantiles(), lookups.quantiles()
	return p, nil
}

func valueColumns(rec arrow.RecordBatch) (*array.String, *array.Int64, error) {
	s := rec.Schema()
	ic, vc := s.FieldIndices(rowkey.IDColumn), s.FieldIndices("v")
	if len(ic) != 1 || len(vc) != 1 {
		return nil, nil, fmt.Errorf("batch without id and v columns: %s", s)
	}
	id, ok1 := rec.Column(ic[0]).(*array.String)
	v, ok2 := rec.Column(vc[0]).(*array.Int64)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("id or v column of an unexpected type: %s", s)
	}
	return id, v, nil
}

// coldScan opens a new handle on the table and scans every column of its newest
// version; with check it compares the rows with model.
func coldScan(ctx context.Context, b *objstore.Bucket, dir string, model map[string]int64, check bool) (time.Duration, error) {
	start := time.Now()
	t, err := table.Open(ctx, b, dir, table.WithLogger(quiet))
	if err != nil {
		return 0, err
	}
	rows := 0
	seen := map[string]bool{}
	err = t.Scan(ctx, t.Latest(), table.ScanOptions{}, func(rec arrow.RecordBatch, _ string) error {
		rows += int(rec.NumRows())
		if !check {
			return nil
		}
		ids, vs, err := valueColumns(rec)
		if err != nil {
			return err
		}
		for i := range ids.Len() {
			id := ids.Value(i)
			if seen[id] {
				return fmt.Errorf("id %s is live twice", id)
			}
			seen[id] = true
			if want, ok := model[id]; !ok || vs.Value(i) != want {
				return fmt.Errorf("id %s has value %d, want %d (written: %v)", id, vs.Value(i), want, ok)
			}
		}
		return nil
	})
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if rows != len(model) {
		return d, fmt.Errorf("a scan returned %d rows, want %d", rows, len(model))
	}
	return d, nil
}

// coldLookup opens a new handle on the table and gets id from its newest version.
func coldLookup(ctx context.Context, b *objstore.Bucket, dir, id string, model map[string]int64) (time.Duration, error) {
	start := time.Now()
	t, err := table.Open(ctx, b, dir, table.WithLogger(quiet))
	if err != nil {
		return 0, err
	}
	rec, _, err := t.Get(ctx, t.Latest(), id)
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if rec == nil {
		return d, fmt.Errorf("get %s: missing", id)
	}
	defer rec.Release()
	_, vs, err := valueColumns(rec)
	if err != nil {
		return d, err
	}
	if vs.Value(0) != model[id] {
		return d, fmt.Errorf("get %s = %d, want %d", id, vs.Value(0), model[id])
	}
	return d, nil
}

// MaintenanceHeading starts the section WriteMaintenanceSection replaces.
const MaintenanceHeading = "## Table maintenance over a long run (`pkg/storage/table`, `pkg/worker/maintain`)"

// RunMaintenanceSection runs the scenario with DefaultMaintenanceConfig, prints its
// section to out and, if path is not empty, writes it into that Markdown file.
func RunMaintenanceSection(ctx context.Context, env *Env, out io.Writer, command, path string) error {
	res, err := RunMaintenance(ctx, env, DefaultMaintenanceConfig())
	if err != nil {
		return err
	}
	res.Command, res.Machine = command, mdreport.ThisMachine()
	return printSection(out, path, MaintenanceHeading, res.Markdown())
}

// printSection prints section to out and, if path is not empty, writes it into
// that Markdown file as its section starting with heading (writeOwnSection).
func printSection(out io.Writer, path, heading, section string) error {
	if _, err := io.WriteString(out, section); err != nil {
		return err
	}
	if path == "" {
		return nil
	}
	return writeOwnSection(path, heading, section)
}

// WriteMaintenanceSection replaces the MaintenanceHeading section of the Markdown
// file at path (up to the next "## " heading) with section, or inserts it before
// the incident reproductions (SectionHeading), or appends it. The file is
// replaced atomically.
func WriteMaintenanceSection(path, section string) error {
	return writeOwnSection(path, MaintenanceHeading, section)
}

// writeOwnSection replaces the section of the Markdown file at path that starts
// with heading (up to the next "## " heading) with section, or inserts it before
// the incident reproductions (SectionHeading), or appends it. The file is
// replaced atomically.
func writeOwnSection(path, heading, section string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(data)
	if s, ok := mdreport.Find(doc, mdreport.All(doc), heading); ok {
		return mdreport.WriteFile(path, mdreport.Replace(doc, s, section))
	}
	if s, ok := mdreport.Find(doc, mdreport.All(doc), SectionHeading); ok {
		return mdreport.WriteFile(path, mdreport.Replace(doc, mdreport.Span{Start: s.Start, End: s.Start}, section))
	}
	return mdreport.WriteFile(path, mdreport.Append(doc, section))
}

// Markdown renders the result as a BENCHMARKS.md section.
func (r MaintenanceResult) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	c := r.Config
	p("%s, %s\n\n", MaintenanceHeading, r.Date.Format("2006-01-02"))
	p("Command: `%s`. Machine: %s. Seed %d; the run took %s (merges and tasks: %s without maintenance, %s with).\n\n",
		r.Command, r.Machine, r.Seed, fmtDur(r.Duration), fmtDur(r.Off.Elapsed), fmtDur(r.On.Elapsed))
	p("One generic store (`id`, `v int64`: the schema of `testutil/storetest`) on `file://`, merged %s times by "+
		"`merge.Merger` through `store.Store` as a worker does: each merge appends %d rows (%.0f%% of them overwrite "+
		"ids written earlier, chosen uniformly, the rest are new random 16-hex-digit ids), seals them into one "+
		"generation and merges it, so every merge adds one fragment and the overwrites add deletion vectors. Two "+
		"stores get the same rows side by side in this one process, a merge of one then the same merge of the "+
		"other: **off**, no maintenance at all; **on**, every %d merges a compaction sweep (a COMPACTION_INTERVAL "+
		"of %d merge intervals) applies the master's rule (`scanner.CompactionSweeper`: at least MIN_FRAGMENTS = %d "+
		"fragments, deleted rows at or over %.0f%% of the rows, or %d versions since the last task) to the newest "+
		"manifest and, when due, runs the compact task as a worker does: `maintain.Maintainer.Compact` (compaction "+
		"with TARGET_ROWS_PER_FRAGMENT %d, at most %d source fragments, deleted ratio %.1f; then `Table.Cleanup` "+
		"keeping %d versions, VERSION_RETENTION_AGE %s, GC_SAFETY_WINDOW %s, and `wal.Cleanup` of the shard), its "+
		"budget reserved on the merger (MERGE_MEMORY_BUDGET %s). Retention is short so that garbage collection acts "+
		"at this run's time scale; nothing sleeps.\n\n",
		fmtCount(float64(c.Merges)), c.RowsPerMerge, 100*c.Overwrites, c.SweepEvery, c.SweepEvery, c.MinFragments,
		100*c.DeletedRatio, c.CleanupVersions, c.Compact.TargetRows, c.Compact.MaxSources, c.Compact.DeletedRatio,
		c.Retention.KeepVersions, fmtDur(c.Retention.KeepAge), fmtDur(c.Retention.SafetyWindow), fmtBytes(c.BudgetBytes))
	p("Bytes are from listing the store's directory. \"Stored\" is everything of the base table (data files, bloom "+
		"filters, deletion vectors, `_versions/`, the version hint), not the WAL (`_wal/`, whose drained generations "+
		"stay for the drain's 5-minute delete delay in both runs). \"Newest version's files\" is what the newest "+
		"manifest references (data files, blooms, deletion vectors) plus the manifest itself: the live bytes the "+
		"ratio divides by. \"Live rows' share\" scales each fragment's data file by live / total rows (what a fully "+
		"compacted table would about hold). Cold reads open a new `table.Open` handle per sample (no cache; the "+
		"OS page cache is warm: on a real object store every file read is a request): a full scan of every column, "+
		"or a `Get` of a random live id; %d scans and %d lookups per point (with so few samples, p99 is the maximum; "+
		"other work on this shared machine lands in it). An untimed scan before them checks every row against the "+
		"model (each id once, its last value), every lookup checks its row, and at the end no generation is pending. A point is measured right after its merge, before "+
		"the sweep that falls on that merge (not right after a compaction).\n\n", c.Scans, c.Lookups)
	p("| merges | maintenance | fragments | live rows (deleted) | manifests: newest / `_versions/` total (count) | stored | newest version's files | stored / newest's files | live rows' share | seal + merge p50 / p99 | cold scan p50 / p99 | cold lookup p50 / p99 |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range max(len(r.Off.Points), len(r.On.Points)) {
		for _, run := range []MaintenanceRun{r.Off, r.On} {
			if i >= len(run.Points) {
				continue
			}
			pt := run.Points[i]
			on := "off"
			if run.Maintained {
				on = "on"
			}
			p("| %s | %s | %s | %s (%s) | %s / %s (%d) | %s | %s | %.2f | %s | %s / %s | %s / %s | %s / %s |\n",
				fmtCount(float64(pt.Merges)), on, fmtCount(float64(pt.Fragments)), fmtCount(float64(pt.LiveRows)), fmtCount(float64(pt.DeletedRows)),
				fmtBytes(pt.Bytes.Newest), fmtBytes(pt.Bytes.Manifests), pt.Bytes.Versions, fmtBytes(pt.Bytes.Stored),
				fmtBytes(pt.Bytes.Referenced), pt.Bytes.Ratio(), fmtBytes(pt.Bytes.LiveRows),
				fmtDur(pt.MergeTimes.P50), fmtDur(pt.MergeTimes.P99), fmtDur(pt.Scan.P50), fmtDur(pt.Scan.P99),
				fmtDur(pt.Lookup.P50), fmtDur(pt.Lookup.P99))
		}
	}
	p("\n")
	on := r.On
	var compactions, cleanups int
	var rewritten, dropped, manifests, files int64
	var filesBytes int64
	var worst, worstRatio MaintenanceTask
	var peakOverCharge int
	var taskTimes durations
	var maxRatio float64
	var maxRatioAt string
	var maxRatioBytes TableBytes
	for _, t := range on.Tasks {
		taskTimes = append(taskTimes, t.Elapsed)
		c := t.Report.Compaction
		if c.Sources > 0 {
			compactions++
			rewritten += int64(c.Sources)
			dropped += c.RowsDropped
			if t.PeakHeap > worst.PeakHeap {
				worst = t
			}
			if t.Charge > 0 && float64(t.PeakHeap)/float64(t.Charge) > float64(worstRatio.PeakHeap)/float64(max(worstRatio.Charge, 1)) {
				worstRatio = t
			}
			if t.PeakHeap > t.Charge {
				peakOverCharge++
			}
		} else {
			cleanups++
		}
		manifests += int64(t.Report.Table.ManifestsDeleted)
		files += int64(t.Report.Table.FilesDeleted)
		filesBytes += t.Report.Table.BytesDeleted
		for _, s := range []struct {
			at string
			b  TableBytes
		}{{"before", t.Before}, {"after", t.After}} {
			if rt := s.b.Ratio(); rt > maxRatio {
				maxRatio, maxRatioAt, maxRatioBytes = rt, fmt.Sprintf("%s the task after merge %s", s.at, fmtCount(float64(t.AfterMerge))), s.b
			}
		}
	}
	for _, pt := range on.Points {
		if rt := pt.Bytes.Ratio(); rt > maxRatio {
			maxRatio, maxRatioAt, maxRatioBytes = rt, "at merge "+fmtCount(float64(pt.Merges)), pt.Bytes
		}
	}
	tq := taskTimes.quantiles()
	p("With maintenance, %d compact tasks ran: %d compacted (%s source fragments rewritten, %s deleted rows "+
		"dropped), %d found nothing to compact and only cleaned up; task time p50 %s, p99 %s, max %s. Cleanup deleted "+
		"%s manifests and %s files (%s). Most fragments after any merge: %d with maintenance, %d without.\n\n",
		len(on.Tasks), compactions, fmtCount(float64(rewritten)), fmtCount(float64(dropped)), cleanups,
		fmtDur(tq.P50), fmtDur(tq.P99), fmtDur(tq.Max), fmtCount(float64(manifests)), fmtCount(float64(files)),
		fmtBytes(filesBytes), on.MaxFragments, r.Off.MaxFragments)
	if len(on.Points) > 0 {
		var parts []string
		for _, pt := range on.Points {
			b := pt.Bytes
			others := b.Manifests - b.Newest
			rest := b.Stored - b.Referenced - b.OlderOnly - b.Unreferenced - others
			parts = append(parts, fmt.Sprintf("merge %s: %s = the newest version's files %s + files only older kept "+
				"versions reference %s + files no kept version references %s + the %d other manifests %s + %s (the version hint)",
				fmtCount(float64(pt.Merges)), fmtBytes(b.Stored), fmtBytes(b.Referenced), fmtBytes(b.OlderOnly),
				fmtBytes(b.Unreferenced), b.Versions-1, fmtBytes(others), fmtBytes(rest)))
		}
		p("The maintained table's stored bytes at each point: %s.\n\n", strings.Join(parts, "; "))
	}
	if compactions > 0 {
		p("Compaction memory: the largest peak Go heap during a task (objects above the heap right after a GC before "+
			"the task, sampled every millisecond, with GOGC lowered to %d during the task so that little garbage is "+
			"counted: at the default 100 a task finishes before any GC and its peak is simply its allocations) was %s, "+
			"in the task after merge %s (%d sources, %s read, %s allocated); that task reserved %s on the merge budget "+
			"(maintain's charge: `merge.PassCostFactor` x the planned sources' bytes per row x "+
			"min(TARGET_ROWS_PER_FRAGMENT, their rows)). Peak over charge, worst task: %s (%s against %s, after merge "+
			"%s); %d of %d compactions peaked above their charge. The budget itself is %s. (The task times above "+
			"include the extra GC work of the lowered GOGC.)\n\n",
			heapGCPercent, fmtBytes(worst.PeakHeap), fmtCount(float64(worst.AfterMerge)), worst.Report.Compaction.Sources,
			fmtBytes(worst.Report.Compaction.BytesRead), fmtBytes(worst.Allocated), fmtBytes(worst.Charge),
			fmtRatio(float64(worstRatio.PeakHeap)/float64(max(worstRatio.Charge, 1))), fmtBytes(worstRatio.PeakHeap),
			fmtBytes(worstRatio.Charge), fmtCount(float64(worstRatio.AfterMerge)), peakOverCharge, compactions,
			fmtBytes(r.Config.BudgetBytes))
	}
	if maxRatio > 0 {
		p("Stored / newest version's files, sampled at the points and before and after every task: at most "+
			"%.2f, %s (stored %s: the newest version's files %s, files only older kept versions reference %s, files "+
			"no kept version references %s, manifests %s in %d versions).\n\n",
			maxRatio, maxRatioAt, fmtBytes(maxRatioBytes.Stored), fmtBytes(maxRatioBytes.Referenced),
			fmtBytes(maxRatioBytes.OlderOnly), fmtBytes(maxRatioBytes.Unreferenced), fmtBytes(maxRatioBytes.Manifests),
			maxRatioBytes.Versions)
	}
	r.goals(p, maxRatio, worst, peakOverCharge, compactions)
	return b.String()
}

// goals states each of the goals for the maintained run, whether it
// holds, and, when it does not, what the figures above say about why.
func (r MaintenanceResult) goals(p printer, maxRatio float64, worst MaintenanceTask, overCharge, compactions int) {
	verdict := func(ok bool) string {
		if ok {
			return "**holds**"
		}
		return "**does not hold**"
	}
	on, off := r.On, r.Off
	c := r.Config
	p("Goals (issue 15), for the run with maintenance:\n\n")
	p("- Fragments stay under 2 x MIN_FRAGMENTS (%d): at most %d after any merge: %s.\n",
		2*c.MinFragments, on.MaxFragments, verdict(on.MaxFragments < 2*c.MinFragments))
	if n := len(on.Points); n > 0 {
		var ratios []string
		ok := maxRatio <= 1.5
		for _, pt := range on.Points {
			ratios = append(ratios, fmt.Sprintf("%.2f", pt.Bytes.Ratio()))
		}
		p("- Bytes stored / live bytes (the newest version's files) <= 1.5: %s at the points, at most %.2f over every "+
			"sample: %s.", strings.Join(ratios, ", "), maxRatio, verdict(ok))
		if !ok {
			var floors, garbage []string
			for _, pt := range on.Points {
				b := pt.Bytes
				floors = append(floors, fmt.Sprintf("%.2f", float64(b.Referenced+int64(c.Retention.KeepVersions-1)*b.Newest)/float64(max(b.Referenced, 1))))
				garbage = append(garbage, fmt.Sprintf("%.2f", float64(b.OlderOnly+b.Unreferenced)/float64(max(b.Referenced, 1))))
			}
			z := on.Points[n-1]
			p(" Why, from the breakdown above: most of the excess is metadata. Every kept version has a manifest that "+
				"lists every fragment (the newest: %s for %d fragments at merge %s), and rows of 20 bytes make fragments "+
				"of a few KiB, so the %d versions retention keeps (VERSION_RETENTION_COUNT, more between two cleanups: "+
				"cleanup runs inside a compact task) weigh as much as the data: their manifests alone put the ratio at "+
				"least at %s at the points. The data files only older kept versions reference (what compactions "+
				"replaced, kept for readers of those versions) add %s of the newest version's files; compaction plans "+
				"small fragments smallest first (`table.PlanCompaction`), so a compaction replaces about what it "+
				"writes, not the whole table. With rows of realistic size (rollouts of KiBs) a manifest entry is a "+
				"fraction of a percent of its fragment and the ratio is that data share plus one.",
				fmtBytes(z.Bytes.Newest), z.Fragments, fmtCount(float64(z.Merges)), c.Retention.KeepVersions,
				strings.Join(floors, ", "), strings.Join(garbage, ", "))
		}
		p("\n")
	}
	if n := len(on.Points); n > 1 {
		a, z := on.Points[0], on.Points[n-1]
		var oa, oz MaintenancePoint
		if len(off.Points) == n {
			oa, oz = off.Points[0], off.Points[n-1]
		}
		flat := func(what string, x, y Quantiles, ox, oy Quantiles, why string) {
			r50, r99 := ratio(y.P50, x.P50), ratio(y.P99, x.P99)
			ok := r50 <= 1.5 && r99 <= 1.5
			p("- Cold %s within 1.5x from merge %s to merge %s: p50 %s -> %s (%s), p99 %s -> %s (%s): %s "+
				"(without maintenance: p50 %s, p99 %s).", what, fmtCount(float64(a.Merges)), fmtCount(float64(z.Merges)),
				fmtDur(x.P50), fmtDur(y.P50), fmtRatio(r50), fmtDur(x.P99), fmtDur(y.P99), fmtRatio(r99),
				verdict(ok), fmtRatio(ratio(oy.P50, ox.P50)), fmtRatio(ratio(oy.P99, ox.P99)))
			if !ok {
				p(" %s", why)
			}
			p("\n")
		}
		perK := func(d time.Duration, rows int64) string {
			return fmtDur(time.Duration(float64(d) * 1000 / float64(max(rows, 1))))
		}
		flat("scan", a.Scan, z.Scan, oa.Scan, oz.Scan, fmt.Sprintf("A full scan reads every row, and the table holds "+
			"%.0fx the live rows at merge %s (%s) than at merge %s (%s); per 1,000 live rows its p50 went from %s to %s. "+
			"Maintenance bounds the per-fragment cost (fragments, manifest size), not the data's.",
			float64(z.LiveRows)/float64(max(a.LiveRows, 1)), fmtCount(float64(z.Merges)), fmtCount(float64(z.LiveRows)),
			fmtCount(float64(a.Merges)), fmtCount(float64(a.LiveRows)), perK(a.Scan.P50, a.LiveRows), perK(z.Scan.P50, z.LiveRows)))
		flat("lookup", a.Lookup, z.Lookup, oa.Lookup, oz.Lookup, fmt.Sprintf("A cold `Get` builds the key index of "+
			"every fragment whose bloom filter admits the id, reading that fragment's whole id and `_seq` columns "+
			"(`pkg/storage/table` keyIndex). With maintenance most rows sit in one compacted fragment (the largest: %s rows at "+
			"merge %s, %s at merge %s), so a cold lookup costs about as much as reading its ids, which grows with the "+
			"table up to TARGET_ROWS_PER_FRAGMENT (%s) rows.", fmtCount(float64(a.LargestFragment)), fmtCount(float64(a.Merges)),
			fmtCount(float64(z.LargestFragment)), fmtCount(float64(z.Merges)), fmtCount(float64(c.Compact.TargetRows))))
	}
	if worst.AfterMerge > 0 {
		p("- Compaction's peak memory within the merge budget: at most %s against %s: %s. Within the charge each "+
			"task reserved on it: %d of %d compactions peaked above their charge: %s.", fmtBytes(worst.PeakHeap),
			fmtBytes(c.BudgetBytes), verdict(worst.PeakHeap <= c.BudgetBytes), overCharge, compactions, verdict(overCharge == 0))
		if overCharge > 0 {
			p(" The charge prices the sources' encoded Parquet bytes; a compaction holds rows decoded into Arrow, the " +
				"Parquet writer's dictionary hash tables and its zstd encoder's state (an allocation profile of these " +
				"tasks, `go tool pprof -focus Maintainer..Compact`, taken when this scenario was written, is mostly " +
				"those), which for small, well-compressed fragments are many times their encoded bytes.")
		}
		p("\n")
	}
	p("\n")
}
