package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/data/rowfilter"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// Stores of millions of rows (issue 29): one generic store of four small columns
// per size, every row merged into the base table through the worker's write path
// and compacted into its levels, then read and written on file:// and on the
// same data behind a latency of LatencyPerRequest. Reads and merges should cost
// what they touch, not the store's size: the goals compare the sizes' figures
// (ScaleResult.goals).
//
// Ids are a bijection of a counter (scaleID), so they are distinct by
// construction, spread over the key space as random ids are, and every row's
// values follow from its id: a read checks what it got without the benchmark
// holding the store's ids.

// ScaleSchema is the store's schema: the id, a float, a short string and an int.
// n is uniform in [0, 1000), so ScaleFilter matches about 1% of the rows.
const ScaleSchema = `{"columns":[["id",{"type":"string"}],["score",{"type":"float64"}],["label",{"type":"string"}],["n",{"type":"int64"}]]}`

// ScaleFilter is the filtered page's predicate (a generic list's ?filter=).
const ScaleFilter = "n < 10"

// DefaultScaleRows are the sizes `tidemark-bench run --only scale` measures.
var DefaultScaleRows = []int64{1_000_000, 10_000_000}

// ScaleConfig sizes the scale scenario.
type ScaleConfig struct {
	// Rows are the store sizes, smallest first; each gets a store of its own.
	Rows []int64
	// BuildRows is the rows of one build pass: appended through store.Store.Append
	// AppendRows at a time, sealed into generations and merged by merge.Merger.
	BuildRows, AppendRows int
	// Compact and Retention configure the compact tasks (maintain.Maintainer.Compact)
	// of the build and of the measured compaction.
	Compact   table.CompactOptions
	Retention table.Retention
	// Latency is what every request of the latency bucket waits.
	Latency time.Duration
	// Samples per bucket: [0] on file://, [1] on the latency bucket.
	Gets, MissingGets, Batches, Pages [2]int
	// BatchIDs is the ids of one batch get, PageRows a page's limit, WarmIDs the
	// ids of the untimed batch get that warms a new handle (as a long-running
	// worker's would be: every key-index top cached).
	BatchIDs, PageRows, WarmIDs int
	// MergeRows is the rows of a measured merge; Merges is how many merges of new
	// ids and, as many, of overwritten ids each bucket measures (alternating).
	MergeRows, Merges int
	// TableCacheBytes is the measuring workers' table cache, a quarter of CACHE_BYTES (0: the
	// worker's default, 64 MiB).
	TableCacheBytes int64
	// ProfileDir, if set, receives a CPU profile of every measured phase
	// (<rows>-<bucket>-reads.pprof, <rows>-<bucket>-writes.pprof).
	ProfileDir string
}

// DefaultScaleConfig is the run for the given sizes (DefaultScaleRows
// if none): build passes of 250,000 rows, the worker's compaction defaults, 20 ms
// per request on the latency bucket.
func DefaultScaleConfig(rows []int64) ScaleConfig {
	if len(rows) == 0 {
		rows = DefaultScaleRows
	}
	return ScaleConfig{
		Rows: rows, BuildRows: 250_000, AppendRows: 25_000,
		// Level0Trigger 1: the build leaves level 0 empty, so reads measure the levels.
		Compact: table.CompactOptions{TargetRows: table.DefaultTargetRows, MaxSources: table.DefaultMaxSources,
			DeletedRatio: table.DefaultDeletedRatio, Level0Trigger: 1},
		Retention: table.Retention{KeepVersions: 3, KeepAge: time.Second, SafetyWindow: time.Second},
		Latency:   20 * time.Millisecond,
		Gets:      [2]int{500, 100}, MissingGets: [2]int{50, 10}, Batches: [2]int{30, 10}, Pages: [2]int{20, 5},
		BatchIDs: 100, PageRows: 100, WarmIDs: 2000,
		// 15 merges of each kind: the p50 of 5 merges of ~15 ms each swung by 1.5x
		// between runs on this shared 2-core machine (BENCHMARKS.md).
		MergeRows: 1000, Merges: 15,
	}
}

// ScaleBuild is how one store was built.
type ScaleBuild struct {
	Elapsed time.Duration
	// Merges are the build passes; MergeTime their time (append, seal, merge).
	Merges    int
	MergeTime time.Duration
	// Tasks and Compactions are the compact tasks, run whenever a pass left level
	// 0 with table.DefaultLevel0Trigger fragments and at the end until one found
	// nothing to compact, and the compactions they committed; CompactTime their
	// time.
	Tasks, Compactions int
	CompactTime        time.Duration
	RowsRewritten      int64
	// Levels is the table's shape at the end of the build.
	Levels ScaleLevels
}

// ScaleLevels is a manifest's fragments by level.
type ScaleLevels struct {
	Version uint64
	// Fragments and Rows are per level (index = level).
	Fragments []int
	Rows      []int64
	// DataBytes and IndexBytes are the fragments' Parquet files and key indexes.
	DataBytes, IndexBytes int64
}

// Total is the number of fragments.
func (l ScaleLevels) Total() int {
	n := 0
	for _, f := range l.Fragments {
		n += f
	}
	return n
}

func levelsOf(m *table.Manifest) ScaleLevels {
	l := ScaleLevels{Version: m.Version}
	for _, f := range m.Fragments {
		if f.LiveRows() == 0 {
			continue
		}
		for len(l.Fragments) <= f.Level {
			l.Fragments, l.Rows = append(l.Fragments, 0), append(l.Rows, 0)
		}
		l.Fragments[f.Level]++
		l.Rows[f.Level] += f.LiveRows()
		l.DataBytes += f.Bytes
		if f.Index != nil {
			l.IndexBytes += f.Index.Bytes
		}
	}
	return l
}

// ScaleOp is one kind of operation measured on one bucket.
type ScaleOp struct {
	Q Quantiles
	// Requests is object-store requests per operation (the Faults counters), and
	// ByObject the same by the kind of object they went to (scaleObjects).
	Requests float64
	ByObject map[string]float64
	// CPU is the process's CPU time (user and system) per operation: on a shared
	// machine the part of the time that does not depend on what else runs.
	CPU time.Duration
}

// scaleObjects names the kinds of objects a table's requests go to, in report
// order, with the parts of their keys that tell them apart (FORMAT.md, "Table
// directory").
var scaleObjects = []struct {
	name  string
	parts []string
}{
	{"bloom", []string{".bloom"}},
	{"key index", []string{".idx"}},
	{"data", []string{".parquet"}},
	{"deletion vector", []string{"/_deletions/"}},
	{"manifest", []string{"/_versions/", "/_latest_version"}},
	{"WAL", []string{"/_wal/"}},
	{"registry", []string{"_registry/"}},
}

// objectTally counts a bucket's requests by the kind of object they go to.
type objectTally struct {
	mu sync.Mutex
	n  map[string]int64
}

func (o *objectTally) add(_ context.Context, _ objstore.Op, key string) {
	kind := "other"
	for _, k := range scaleObjects {
		if slices.ContainsFunc(k.parts, func(p string) bool { return strings.Contains(key, p) }) {
			kind = k.name
			break
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int64{}
	}
	o.n[kind]++
}

// take returns the counts divided by ops and starts counting again.
func (o *objectTally) take(ops int) map[string]float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]float64, len(o.n))
	for k, n := range o.n {
		out[k] = float64(n) / float64(max(ops, 1))
	}
	o.n = nil
	return out
}

// ScaleTask is the measured compact task.
type ScaleTask struct {
	// Op is the task's time (one sample) and requests.
	Op     ScaleOp
	Report maintain.Report
	Levels ScaleLevels // after the task
}

// ScaleBucket is everything measured on one bucket.
type ScaleBucket struct {
	Name    string
	Latency time.Duration
	// ColdGet is the first get of a new handle: the key-index tops and blocks it
	// meets are read then.
	ColdGet ScaleOp
	// The reads, with the handle warm.
	Get, MissingGet, Batch, FirstPage, CursorPage, FilteredPage ScaleOp
	// MergeNew and MergeOverwrite time merge.Merger.Merge alone (from its start;
	// the append and seal before it are not timed), after a first merge of each
	// kind (FirstMergeNew, FirstMergeOverwrite: one sample each), which reads the
	// bloom filters of the fragments its ids fall in that the reads did not.
	FirstMergeNew, FirstMergeOverwrite ScaleOp
	MergeNew, MergeOverwrite           ScaleOp
	Compaction                         ScaleTask
}

// ScaleSize is one store size's figures.
type ScaleSize struct {
	Rows  int64
	Build ScaleBuild
	// Buckets: file:// first, then the latency bucket.
	Buckets []ScaleBucket
	// BaseRSS is the process's resident set after the build, a GC and returning
	// freed memory to the OS, when the peak was reset; ReadRSS the peak (VmHWM)
	// through the reads on both buckets, WriteRSS through the merges and
	// compactions that follow.
	BaseRSS, ReadRSS, WriteRSS int64
}

// ScaleResult is the scenario's outcome.
type ScaleResult struct {
	Date     time.Time
	Command  string
	Machine  mdreport.Machine
	Seed     uint64
	Duration time.Duration
	Config   ScaleConfig
	Sizes    []ScaleSize
}

const scaleStore = "scale"

// scaleKeys derives a store's ids and values from the seed.
type scaleKeys struct{ offset uint64 }

func newScaleKeys(seed uint64) scaleKeys { return scaleKeys{offset: mix64(seed ^ 0x7363616c65)} }

// mix64 is SplitMix64's finalizer: a bijection of uint64 (xor-shifts and odd
// multiplications are invertible) that scatters neighbouring inputs.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// key is row i's id as a number; distinct i give distinct keys.
func (k scaleKeys) key(i uint64) uint64 { return mix64(i + k.offset) }

// id is row i's id: 16 hex digits.
func (k scaleKeys) id(i uint64) string { return hex16(k.key(i)) }

// missing is an id no row has: row numbers from 2^63 on are never written.
func (k scaleKeys) missing(j uint64) string { return k.id(1<<63 + j) }

func hex16(x uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[x&15]
		x >>= 4
	}
	return string(b[:])
}

var scaleLabels = []string{"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"}

// scaleValues are the values of the row with key x written at version v (0: the
// build; a merge that overwrites writes v >= 1).
func scaleValues(x uint64, v int64) (score float64, label string, n int64) {
	h := mix64(x ^ 0x76616c756573)
	return float64(h>>11) / (1 << 53), scaleLabels[(h>>32)%uint64(len(scaleLabels))], int64((h%1000 + uint64(v)) % 1000)
}

// scaleBatch builds the input record of rows keyed xs, written at version v.
func scaleBatch(s *arrow.Schema, xs []uint64, v int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	ids := b.Field(s.FieldIndices(rowkey.IDColumn)[0]).(*array.StringBuilder)
	scores := b.Field(s.FieldIndices("score")[0]).(*array.Float64Builder)
	labels := b.Field(s.FieldIndices("label")[0]).(*array.StringBuilder)
	ns := b.Field(s.FieldIndices("n")[0]).(*array.Int64Builder)
	for _, x := range xs {
		score, label, n := scaleValues(x, v)
		ids.Append(hex16(x))
		scores.Append(score)
		labels.Append(label)
		ns.Append(n)
	}
	return b.NewRecordBatch()
}

// scaleRow is a row read back: its id and n.
type scaleRow struct {
	id string
	n  int64
}

// scaleRowAt reads row i of rec.
func scaleRowAt(rec arrow.RecordBatch, i int) (scaleRow, error) {
	s := rec.Schema()
	ic, nc := s.FieldIndices(rowkey.IDColumn), s.FieldIndices("n")
	if len(ic) != 1 || len(nc) != 1 {
		return scaleRow{}, fmt.Errorf("a row without id or n: %s", s)
	}
	id, ok1 := rec.Column(ic[0]).(*array.String)
	n, ok2 := rec.Column(nc[0]).(*array.Int64)
	if !ok1 || !ok2 {
		return scaleRow{}, fmt.Errorf("id or n of an unexpected type: %s", s)
	}
	return scaleRow{id: id.Value(i), n: n.Value(i)}, nil
}

// checkScaleRow checks a row read for key x, written at the build.
func checkScaleRow(rec arrow.RecordBatch, i int, x uint64) error {
	r, err := scaleRowAt(rec, i)
	if err != nil {
		return err
	}
	_, _, n := scaleValues(x, 0)
	if r.id != hex16(x) || r.n != n {
		return fmt.Errorf("read (%s, n=%d), want (%s, n=%d)", r.id, r.n, hex16(x), n)
	}
	return nil
}

// RunScale builds and measures a store of every size of cfg.Rows, one after
// another, each in a scratch directory removed afterwards.
func RunScale(ctx context.Context, env *Env, cfg ScaleConfig) (ScaleResult, error) {
	res := ScaleResult{Date: time.Now(), Seed: env.Seed, Config: cfg}
	start := time.Now()
	for _, rows := range cfg.Rows {
		sz, err := runScaleSize(ctx, env, cfg, rows)
		if err != nil {
			return res, fmt.Errorf("%s rows: %w", fmtCount(float64(rows)), err)
		}
		res.Sizes = append(res.Sizes, sz)
	}
	res.Duration = time.Since(start)
	return res, nil
}

func runScaleSize(ctx context.Context, env *Env, cfg ScaleConfig, rows int64) (ScaleSize, error) {
	sz := ScaleSize{Rows: rows}
	raw, dir, err := env.openFile(ctx, fmt.Sprintf("scale-%d", rows))
	if err != nil {
		return sz, err
	}
	defer os.RemoveAll(dir)
	keys := newScaleKeys(env.Seed)
	uri, err := buildScaleStore(ctx, env, cfg, raw, rows, keys, &sz.Build)
	if err != nil {
		return sz, fmt.Errorf("build: %w", err)
	}
	env.log().Info("scale: built", "rows", rows, "took", sz.Build.Elapsed.Round(time.Second),
		"fragments", sz.Build.Levels.Fragments, "compactions", sz.Build.Compactions)

	// Both buckets serve the same directory; each has its own worker (its own
	// caches and WAL shard), opened only now, as a worker that restarts would.
	runs := make([]*scaleRun, 2)
	for i, name := range []string{"file://", fmt.Sprintf("file:// + %s a request", fmtDur(cfg.Latency))} {
		f, tally := objstore.NewFaults(rand.NewPCG(env.Seed, uint64(29+i))), &objectTally{}
		f.AddRule(objstore.Rule{Before: tally.add})
		var sc store.Config
		if cfg.TableCacheBytes > 0 {
			sc.TableOptions = []table.Option{table.WithCacheBytes(cfg.TableCacheBytes)}
		}
		w := newWorker(objstore.WithFaults(raw, f), fmt.Sprintf("scale-%d", i), sc, defaultMergeConfig())
		defer w.close()
		runs[i] = &scaleRun{cfg: cfg, keys: keys, rows: rows, w: w, faults: f, objects: tally,
			out: ScaleBucket{Name: name}, rng: rand.New(rand.NewPCG(env.Seed, uint64(290+i)))}
		if i == 1 {
			runs[i].out.Latency = cfg.Latency
		}
	}
	// The peak resident set of the reads alone: what the build left is returned
	// to the OS first, and the high-water mark reset to what remains.
	if sz.BaseRSS, err = resetPeakRSS(); err != nil {
		return sz, err
	}
	for i, r := range runs {
		if err := r.profiled(ctx, "reads", r.reads); err != nil {
			return sz, fmt.Errorf("reads on bucket %d: %w", i, err)
		}
		env.log().Info("scale: read", "rows", rows, "bucket", r.out.Name, "get_p50", r.out.Get.Q.P50,
			"batch_p50", r.out.Batch.Q.P50, "cursor_page_p50", r.out.CursorPage.Q.P50)
	}
	if sz.ReadRSS, err = peakRSS(); err != nil {
		return sz, err
	}
	if _, err := resetPeakRSS(); err != nil {
		return sz, err
	}
	next := uint64(rows) // the row numbers of new ids, after the build's
	for i, r := range runs {
		if err := r.profiled(ctx, "writes", func(ctx context.Context) error { return r.writes(ctx, &next) }); err != nil {
			return sz, fmt.Errorf("merges and compaction on bucket %d: %w", i, err)
		}
		env.log().Info("scale: wrote", "rows", rows, "bucket", r.out.Name, "merge_new_p50", r.out.MergeNew.Q.P50,
			"merge_overwrite_p50", r.out.MergeOverwrite.Q.P50, "compact_task", r.out.Compaction.Op.Q.P50)
		sz.Buckets = append(sz.Buckets, r.out)
	}
	if sz.WriteRSS, err = peakRSS(); err != nil {
		return sz, err
	}
	// Every row is there once: the build's, plus the new ids the merges added.
	t, err := table.Open(ctx, raw, uri, table.WithLogger(quiet))
	if err != nil {
		return sz, err
	}
	if got, want := t.Latest().Stats().Rows, int64(next); got != want {
		return sz, fmt.Errorf("after the merges: %d live rows, want %d", got, want)
	}
	if n, err := pendingGenerations(ctx, raw, uri); err != nil || n > 0 {
		return sz, fmt.Errorf("after the merges: %d generations pending (%v)", n, err)
	}
	return sz, nil
}

// buildScaleStore creates the store and merges rows into it, BuildRows a pass,
// compacting it as it grows, then runs compact tasks until one finds nothing to
// compact.
func buildScaleStore(ctx context.Context, env *Env, cfg ScaleConfig, b *objstore.Bucket, rows int64, keys scaleKeys, out *ScaleBuild) (string, error) {
	start := time.Now()
	spec, err := schema.ParseSpec([]byte(ScaleSchema))
	if err != nil {
		return "", err
	}
	canon, err := spec.MarshalJSON()
	if err != nil {
		return "", err
	}
	w := newWorker(b, "builder", store.Config{}, defaultMergeConfig())
	defer w.close()
	e, err := w.stores.Create(ctx, registry.Entry{Kind: registry.KindGeneric, Name: scaleStore, Schema: canon})
	if err != nil {
		return "", err
	}
	s, rel, err := w.stores.Open(ctx, registry.KindGeneric, scaleStore)
	if err != nil {
		return "", err
	}
	defer rel()
	m := scaleMaintainer(cfg)
	// compactTask runs one compact task and counts what it did.
	compactTask := func() (int, error) {
		t := time.Now()
		r, err := m.Compact(ctx, s)
		out.CompactTime += time.Since(t)
		if err != nil {
			return 0, err
		}
		out.Tasks++
		out.Compactions += r.Compactions
		out.RowsRewritten += r.Compaction.RowsWritten
		return r.Compactions, nil
	}
	xs := make([]uint64, 0, cfg.AppendRows)
	for i := int64(0); i < rows; {
		pass := time.Now()
		end := min(rows, i+int64(cfg.BuildRows))
		for ; i < end; i += int64(len(xs)) {
			xs = xs[:0]
			for j := i; j < min(end, i+int64(cfg.AppendRows)); j++ {
				xs = append(xs, keys.key(uint64(j)))
			}
			rec := scaleBatch(spec.Schema(), xs, 0)
			err := s.Append(ctx, rec)
			rec.Release()
			if err != nil {
				return "", err
			}
		}
		if _, err := s.Seal(ctx); err != nil {
			return "", err
		}
		if _, err := w.merger.Merge(ctx, s, true); err != nil {
			return "", err
		}
		out.Merges++
		out.MergeTime += time.Since(pass)
		if out.Merges%10 == 0 {
			env.log().Info("scale: building", "rows", rows, "merged", i, "fragments", len(s.Table().Latest().Fragments),
				"took", time.Since(start).Round(time.Second))
		}
		// Compacted as it grows, as a long-lived store is when its merges leave
		// level 0 with the planner's trigger of fragments: merges then resolve
		// their ids against the levels, not against every pass's fragment.
		if s.Table().Latest().Levels().Level0 >= table.DefaultLevel0Trigger {
			if _, err := compactTask(); err != nil {
				return "", err
			}
		}
	}
	for {
		n, err := compactTask()
		if err != nil {
			return "", err
		}
		if n == 0 {
			break
		}
		env.log().Info("scale: compacting", "rows", rows, "compactions", out.Compactions,
			"levels", levelsOf(s.Table().Latest()).Fragments, "took", out.CompactTime.Round(time.Second))
	}
	// One more cleanup once the build's garbage is past the safety window, so the
	// measured compact task's cleanup finds only its own.
	if err := sleepCtx(ctx, cfg.Retention.SafetyWindow); err != nil {
		return "", err
	}
	if _, err := m.Compact(ctx, s); err != nil {
		return "", err
	}
	latest := s.Table().Latest()
	out.Levels = levelsOf(latest)
	ls := latest.Levels()
	if got := latest.Stats().Rows; got != rows || ls.Level0 > 0 || ls.Spilling > 0 {
		return "", fmt.Errorf("built version %d: %d live rows (want %d), %d level-0 fragments, %d levels past their targets",
			latest.Version, got, rows, ls.Level0, ls.Spilling)
	}
	if n, err := pendingGenerations(ctx, b, e.URI); err != nil || n > 0 {
		return "", fmt.Errorf("after the build: %d generations pending (%v)", n, err)
	}
	out.Elapsed = time.Since(start)
	return e.URI, nil
}

func scaleMaintainer(cfg ScaleConfig) *maintain.Maintainer {
	return maintain.New(maintain.Config{Compact: cfg.Compact, Retention: cfg.Retention,
		WAL: wal.Retention{KeepManifests: 10, SafetyWindow: cfg.Retention.SafetyWindow}, Logger: quiet})
}

// scaleRun is the measurement of one bucket.
type scaleRun struct {
	cfg     ScaleConfig
	keys    scaleKeys
	rows    int64
	w       *benchWorker
	faults  *objstore.Faults
	objects *objectTally
	rng     *rand.Rand
	out     ScaleBucket
}

func (r *scaleRun) bucket() int {
	if r.out.Latency > 0 {
		return 1
	}
	return 0
}

// profiled runs phase, under a CPU profile when the config asks for one.
func (r *scaleRun) profiled(ctx context.Context, phase string, fn func(context.Context) error) error {
	if r.cfg.ProfileDir == "" {
		return fn(ctx)
	}
	if err := os.MkdirAll(r.cfg.ProfileDir, 0o755); err != nil {
		return err
	}
	names := [2]string{"file", "latency"}
	stop, err := StartCPUProfile(filepath.Join(r.cfg.ProfileDir, fmt.Sprintf("%d-%s-%s.pprof", r.rows, names[r.bucket()], phase)))
	if err != nil {
		return err
	}
	defer stop()
	return fn(ctx)
}

// StartCPUProfile writes a CPU profile into a new file at path until stop is
// called. One profile runs at a time in a process.
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// open puts the run's latency on its bucket and opens the store on its worker;
// done releases the handle and lifts the latency, so that only the measured
// phases pay it.
func (r *scaleRun) open(ctx context.Context) (s *store.Store, done func(), err error) {
	r.faults.SetLatency(r.out.Latency, 0)
	s, rel, err := r.w.stores.Open(ctx, registry.KindGeneric, scaleStore)
	if err != nil {
		r.faults.SetLatency(0, 0)
		return nil, nil, err
	}
	return s, func() { rel(); r.faults.SetLatency(0, 0) }, nil
}

// existing returns a random row number of the build.
func (r *scaleRun) existing() uint64 { return uint64(r.rng.Int64N(r.rows)) }

// timed runs op n times and returns its latencies and requests per call.
func (r *scaleRun) timed(n int, op func(k int) error) (ScaleOp, error) {
	var ds durations
	r.resetCounters()
	cpu := processCPU()
	for k := range n {
		start := time.Now()
		if err := op(k); err != nil {
			return ScaleOp{}, err
		}
		ds = append(ds, time.Since(start))
	}
	o := r.counted(ds, n)
	o.CPU = (processCPU() - cpu) / time.Duration(max(n, 1))
	return o, nil
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetCounters starts counting requests, in all and by object.
func (r *scaleRun) resetCounters() {
	r.faults.ResetCounters()
	_ = r.objects.take(0)
}

// counted is ds with the requests counted since resetCounters, per op of ops.
func (r *scaleRun) counted(ds durations, ops int) ScaleOp {
	return ScaleOp{Q: ds.quantiles(), Requests: float64(r.faults.TotalRequests()) / float64(max(ops, 1)),
		ByObject: r.objects.take(ops)}
}

// reads opens the store on the run's worker and measures the reads: gets,
// batch gets and pages.
func (r *scaleRun) reads(ctx context.Context) error {
	s, done, err := r.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	b := r.bucket()
	get := func(x uint64) error {
		rec, err := s.Get(ctx, hex16(x))
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("get %s: not found", hex16(x))
		}
		defer rec.Release()
		return checkScaleRow(rec, 0, x)
	}
	if r.out.ColdGet, err = r.timed(1, func(int) error { return get(r.keys.key(r.existing())) }); err != nil {
		return fmt.Errorf("cold get: %w", err)
	}
	// Warm the handle as a long-running worker's is: a batch over many ids reads
	// every fragment's key-index top.
	warm := make([]uint64, r.cfg.WarmIDs)
	for k := range warm {
		warm[k] = r.keys.key(r.existing())
	}
	if err := r.batch(ctx, s, warm); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if r.out.Get, err = r.timed(r.cfg.Gets[b], func(int) error { return get(r.keys.key(r.existing())) }); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	r.out.MissingGet, err = r.timed(r.cfg.MissingGets[b], func(k int) error {
		id := r.keys.missing(uint64(k))
		rec, err := s.Get(ctx, id)
		if rec != nil {
			rec.Release()
			return fmt.Errorf("get %s: found an id never written", id)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("get of a missing id: %w", err)
	}
	// The label sets the batch gets apart in the phase's CPU profile
	// (pprof -tagfocus read=batch).
	pprof.Do(ctx, pprof.Labels("read", "batch"), func(ctx context.Context) {
		r.out.Batch, err = r.timed(r.cfg.Batches[b], func(int) error {
			xs := make([]uint64, r.cfg.BatchIDs)
			for k := range xs {
				xs[k] = r.keys.key(r.existing())
			}
			return r.batch(ctx, s, xs)
		})
	})
	if err != nil {
		return fmt.Errorf("batch get: %w", err)
	}
	page := func(opts store.ListOptions, check func(scaleRow) error) error {
		opts.Limit = r.cfg.PageRows
		p, err := s.Page(ctx, opts)
		if err != nil {
			return err
		}
		defer func() {
			for _, rec := range p.Rows {
				rec.Release()
			}
		}()
		if len(p.Rows) != r.cfg.PageRows || !p.More {
			return fmt.Errorf("a page of %d rows (more: %v), want %d and more", len(p.Rows), p.More, r.cfg.PageRows)
		}
		prev := ""
		if opts.StartAfter != nil {
			prev = *opts.StartAfter
		}
		for _, rec := range p.Rows {
			row, err := scaleRowAt(rec, 0)
			if err != nil {
				return err
			}
			if row.id <= prev {
				return fmt.Errorf("page: id %s after %s", row.id, prev)
			}
			if err := check(row); err != nil {
				return err
			}
			prev = row.id
		}
		return nil
	}
	anyRow := func(scaleRow) error { return nil }
	if r.out.FirstPage, err = r.timed(r.cfg.Pages[b], func(int) error { return page(store.ListOptions{}, anyRow) }); err != nil {
		return fmt.Errorf("first page: %w", err)
	}
	// Cursors at 90% of the id space and a little after, one page apart on
	// average, so each page reads its own blocks and row groups.
	step := math.MaxUint64 / uint64(r.rows) * uint64(r.cfg.PageRows)
	r.out.CursorPage, err = r.timed(r.cfg.Pages[b], func(k int) error {
		after := hex16(math.MaxUint64/10*9 + uint64(k)*step)
		return page(store.ListOptions{StartAfter: &after}, anyRow)
	})
	if err != nil {
		return fmt.Errorf("page by cursor: %w", err)
	}
	spec, err := schema.ParseSpec([]byte(ScaleSchema))
	if err != nil {
		return err
	}
	f, err := rowfilter.Compile(ScaleFilter, spec.Schema())
	if err != nil {
		return err
	}
	matches := func(row scaleRow) error {
		if row.n >= 10 {
			return fmt.Errorf("filtered page: id %s has n=%d", row.id, row.n)
		}
		return nil
	}
	r.out.FilteredPage, err = r.timed(r.cfg.Pages[b], func(int) error {
		return page(store.ListOptions{Filter: f.Mask, FilterColumns: f.Columns()}, matches)
	})
	if err != nil {
		return fmt.Errorf("filtered page: %w", err)
	}
	return nil
}

// batch gets the rows keyed xs in one store.GetMany and checks them.
func (r *scaleRun) batch(ctx context.Context, s *store.Store, xs []uint64) error {
	ids := make([]string, len(xs))
	for k, x := range xs {
		ids[k] = hex16(x)
	}
	k := 0
	err := s.GetMany(ctx, ids, nil, func(rec arrow.RecordBatch) error {
		if k >= len(xs) {
			return errors.New("more rows than ids")
		}
		err := checkScaleRow(rec, 0, xs[k])
		k++
		return err
	})
	if err == nil && k != len(xs) {
		err = fmt.Errorf("%d rows for %d ids", k, len(xs))
	}
	return err
}

// writes measures merges of new and of overwritten ids, then the compact task
// that follows them, on the bucket with its latency. next is the row number of
// the next new id.
func (r *scaleRun) writes(ctx context.Context, next *uint64) error {
	s, done, err := r.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	spec, err := schema.ParseSpec([]byte(ScaleSchema))
	if err != nil {
		return err
	}
	// Per kind of merge (new ids, overwritten ids): times, requests and requests
	// by object, summed over its merges. The first of each kind is its own figure:
	// it reads the bloom filters its ids meet that the reads left unread, once for
	// the life of a worker's cache, as a long-running worker has them.
	var times [2]durations
	var sums [2]ScaleOp
	firsts := [2]*ScaleOp{&r.out.FirstMergeNew, &r.out.FirstMergeOverwrite}
	for k := range 2 * (r.cfg.Merges + 1) {
		xs := make([]uint64, r.cfg.MergeRows)
		kind := k % 2
		seen := map[uint64]bool{}
		for j := range xs {
			if kind == 1 {
				x := r.keys.key(r.existing())
				for seen[x] {
					x = r.keys.key(r.existing())
				}
				seen[x] = true
				xs[j] = x
			} else {
				xs[j] = r.keys.key(*next)
				*next++
			}
		}
		rec := scaleBatch(spec.Schema(), xs, int64(k+1))
		err := s.Append(ctx, rec)
		rec.Release()
		if err != nil {
			return err
		}
		if _, err := s.Seal(ctx); err != nil {
			return err
		}
		r.resetCounters()
		cpu, start := processCPU(), time.Now()
		var res merge.Result
		// The label tells the two kinds of merge apart in the phase's CPU profile
		// (go tool pprof -tagfocus=merge=overwrite).
		pprof.Do(ctx, pprof.Labels("merge", [2]string{"new", "overwrite"}[kind]), func(ctx context.Context) {
			res, err = r.w.merger.Merge(ctx, s, true)
		})
		d := time.Since(start)
		cpu = processCPU() - cpu
		if err != nil {
			return err
		}
		if res.Rows != int64(len(xs)) {
			return fmt.Errorf("a merge of %d rows merged %d", len(xs), res.Rows)
		}
		if k < 2 {
			*firsts[kind] = r.counted(durations{d}, 1)
			firsts[kind].CPU = cpu
			continue
		}
		one := r.counted(nil, 1)
		times[kind] = append(times[kind], d)
		sums[kind].Requests += one.Requests
		sums[kind].CPU += cpu
		if sums[kind].ByObject == nil {
			sums[kind].ByObject = map[string]float64{}
		}
		for o, n := range one.ByObject {
			sums[kind].ByObject[o] += n
		}
	}
	for kind, out := range []*ScaleOp{&r.out.MergeNew, &r.out.MergeOverwrite} {
		n := float64(max(len(times[kind]), 1))
		for o := range sums[kind].ByObject {
			sums[kind].ByObject[o] /= n
		}
		*out = ScaleOp{Q: times[kind].quantiles(), Requests: sums[kind].Requests / n, ByObject: sums[kind].ByObject,
			CPU: sums[kind].CPU / time.Duration(n)}
	}
	r.resetCounters()
	cpu, start := processCPU(), time.Now()
	rep, err := scaleMaintainer(r.cfg).Compact(ctx, s)
	r.out.Compaction = ScaleTask{Op: r.counted(durations{time.Since(start)}, 1), Report: rep}
	r.out.Compaction.Op.CPU = processCPU() - cpu
	if err != nil {
		return fmt.Errorf("compact task: %w", err)
	}
	r.out.Compaction.Levels = levelsOf(s.Table().Latest())
	return nil
}

// resetPeakRSS returns the memory the Go runtime holds free to the OS, resets
// the process's peak resident set (VmHWM) to its current one
// (/proc/self/clear_refs, "5") and returns it.
func resetPeakRSS() (int64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, fmt.Errorf("reset the peak resident set: %w", err)
	}
	return peakRSS()
}
