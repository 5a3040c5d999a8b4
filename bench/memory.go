package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// MemoryRun is one merge configuration of the memory scenario: the merge caps
// (MERGE_MAX_GENERATIONS, MERGE_MAX_BYTES) and the worker's merge memory budget
// (MERGE_MEMORY_BUDGET).
type MemoryRun struct {
	Name           string `json:"name"`
	MaxGenerations int    `json:"max_generations"`
	MaxBytes       int64  `json:"max_bytes"`
	Budget         int64  `json:"budget"`
	// GoMemLimit, if set, is the merge process's GOMEMLIMIT (cmd/worker sets none).
	GoMemLimit int64 `json:"go_mem_limit,omitempty"`
}

// MemoryConfig sizes the memory scenario.
type MemoryConfig struct {
	// BacklogBytes of generations (sealed at the worker's default 64 MiB) are
	// built in one shard by one process, then merged by one fresh worker process
	// per run.
	BacklogBytes int64
	Row          RowShape
	Runs         []MemoryRun
}

// DefaultMemoryConfig merges a 1 GiB backlog with the worker's defaults (8
// generations, 1 GiB, 2 GiB budget), with a 256 MiB cap and a 512 MiB budget, with
// the same plus GOMEMLIMIT set to the budget, and with a 64 MiB cap (one generation
// a pass) and the 256 MiB budget that pays for it. A pass takes no more generations
// than the budget pays for at merge.PassCostFactor, so the budget, not the caps,
// bounds the small-budget runs.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{BacklogBytes: 1 << 30, Row: RealisticRow, Runs: []MemoryRun{
		{Name: "defaults", MaxGenerations: merge.DefaultMaxGenerations, MaxBytes: merge.DefaultMaxBytes, Budget: 2 << 30},
		{Name: "small budget", MaxGenerations: merge.DefaultMaxGenerations, MaxBytes: 256 << 20, Budget: 512 << 20},
		{Name: "small budget, GOMEMLIMIT = budget", MaxGenerations: merge.DefaultMaxGenerations, MaxBytes: 256 << 20,
			Budget: 512 << 20, GoMemLimit: 512 << 20},
		{Name: "one generation a pass", MaxGenerations: merge.DefaultMaxGenerations, MaxBytes: 64 << 20, Budget: 256 << 20},
	}}
}

// MemoryBacklog is what the build process wrote.
type MemoryBacklog struct {
	Generations int           `json:"generations"`
	Rows        int64         `json:"rows"`
	Bytes       int64         `json:"bytes"`
	Elapsed     time.Duration `json:"elapsed"`
}

// MemoryOutcome is one merge process's report.
type MemoryOutcome struct {
	Run MemoryRun `json:"run"`
	// PeakRSS is the process's VmHWM at the end; PeakHeap is the largest Go heap
	// in use seen by a 50 ms sampler.
	PeakRSS  int64 `json:"peak_rss"`
	PeakHeap int64 `json:"peak_heap"`
	Rows     int64 `json:"rows"`
	Passes   int   `json:"passes"`
	// LargestPass is the generation bytes of the largest pass the caps allow over
	// this backlog (what one prepare reads and holds).
	LargestPass int64         `json:"largest_pass"`
	Elapsed     time.Duration `json:"elapsed"`
}

// MemoryResult is the memory scenario's outcome.
type MemoryResult struct {
	Backlog MemoryBacklog
	Runs    []MemoryOutcome
}

const memoryStore = "backlog"

// RunMemory builds the backlog in a child process, then merges a copy of it (hard
// links: generation files are immutable) in one fresh child process per run, so each
// run's peak RSS is a worker's, not the benchmark's.
func RunMemory(ctx context.Context, env *Env, cfg MemoryConfig) (MemoryResult, error) {
	var res MemoryResult
	if env.Exe == "" {
		return res, fmt.Errorf("memory: no tidemark-bench executable to run the worker processes from")
	}
	dir, err := env.scratch("memory")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	base := filepath.Join(dir, "backlog")
	if err := child(ctx, env, &res.Backlog, nil, "memory-build", "--dir", base,
		"--bytes", strconv.FormatInt(cfg.BacklogBytes, 10), "--seed", strconv.FormatUint(env.Seed, 10),
		"--content-words", strconv.Itoa(cfg.Row.ContentWords), "--tokens", strconv.Itoa(cfg.Row.Tokens)); err != nil {
		return res, err
	}
	env.log().Info("memory: backlog built", "generations", res.Backlog.Generations, "bytes", res.Backlog.Bytes,
		"took", res.Backlog.Elapsed.Round(time.Millisecond))
	for i, run := range cfg.Runs {
		copyDir := filepath.Join(dir, fmt.Sprintf("run-%d", i))
		if err := linkTree(base, copyDir); err != nil {
			return res, err
		}
		var out MemoryOutcome
		var extraEnv []string
		if run.GoMemLimit > 0 {
			extraEnv = append(extraEnv, "GOMEMLIMIT="+strconv.FormatInt(run.GoMemLimit, 10))
		}
		err := child(ctx, env, &out, extraEnv, "memory-merge", "--dir", copyDir, "--name", run.Name,
			"--max-generations", strconv.Itoa(run.MaxGenerations), "--max-bytes", strconv.FormatInt(run.MaxBytes, 10),
			"--budget", strconv.FormatInt(run.Budget, 10))
		if err != nil {
			return res, err
		}
		out.Run = run
		if out.Rows != res.Backlog.Rows {
			return res, fmt.Errorf("memory run %q: merged %d rows of %d", run.Name, out.Rows, res.Backlog.Rows)
		}
		env.log().Info("memory: merged", "run", run.Name, "peak_rss", out.PeakRSS, "took", out.Elapsed.Round(time.Millisecond))
		res.Runs = append(res.Runs, out)
		if err := os.RemoveAll(copyDir); err != nil {
			return res, err
		}
	}
	return res, nil
}

// child runs env.Exe with args and decodes the JSON line it prints last into out.
// GOGC and GOMEMLIMIT are removed from its environment (the worker runs with the Go
// defaults, as cmd/worker does) before extraEnv is added.
func child(ctx context.Context, env *Env, out any, extraEnv []string, args ...string) error {
	cmd := exec.CommandContext(ctx, env.Exe, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(env.Exe), strings.Join(args, " "), err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), out); err != nil {
		return fmt.Errorf("%s %s: output %q: %w", filepath.Base(env.Exe), args[0], stdout.String(), err)
	}
	return nil
}

// linkTree recreates src's directory tree at dst with every file hard-linked.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return os.Link(path, target)
	})
}

// MemoryBuild writes a backlog of at least bytes of generations into one shard of
// the rollout store "backlog" in the file:// bucket at dir, sealing at the worker's
// default SealAfterBytes. It is the memory-build process.
func MemoryBuild(ctx context.Context, dir string, bytes int64, seed uint64, row RowShape) (MemoryBacklog, error) {
	var res MemoryBacklog
	start := time.Now()
	b, err := objstore.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		return res, err
	}
	wk := newWorker(b, "worker-00", store.Config{}, defaultMergeConfig())
	defer wk.close()
	if _, err := wk.stores.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: memoryStore}); err != nil {
		return res, err
	}
	s, rel, err := wk.stores.Open(ctx, registry.KindRollout, memoryStore)
	if err != nil {
		return res, err
	}
	defer rel()
	gen := newRowGen(seed+8, row)
	sealed := func() (n int, rows, size, unsealed int64) {
		st, _ := s.WriterStats()
		if st.Manifest == nil {
			return 0, 0, 0, st.MemtableBytes
		}
		for _, g := range st.Manifest.Generations {
			n, rows, size = n+1, rows+g.Rows, size+g.Bytes
		}
		return n, rows, size, st.MemtableBytes
	}
	for {
		if _, _, size, unsealed := sealed(); size+unsealed >= bytes {
			break
		}
		rec, _, err := gen.batch(1000)
		if err != nil {
			return res, err
		}
		err = s.Append(ctx, rec)
		rec.Release()
		if err != nil {
			return res, err
		}
	}
	if _, err := s.Seal(ctx); err != nil {
		return res, err
	}
	res.Generations, res.Rows, res.Bytes, _ = sealed()
	res.Elapsed = time.Since(start)
	return res, nil
}

// MemoryMerge merges the backlog at dir as a worker with run's caps and budget
// would, checks every row reached the base table, and reports the process's peak
// RSS. It is the memory-merge process: run it in a fresh process.
//
// With heapProfile set it writes there the heap profile at the end (what the merge
// allocated, by call site: `go tool pprof -sample_index=alloc_space`), and to
// heapProfile.peak the one taken at the largest Go heap in use (as of the GC before).
func MemoryMerge(ctx context.Context, dir string, run MemoryRun, heapProfile string) (MemoryOutcome, error) {
	out := MemoryOutcome{Run: run}
	b, err := objstore.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		return out, err
	}
	wk := newWorker(b, "worker-00", store.Config{},
		merge.Config{MaxGenerations: run.MaxGenerations, MaxBytes: run.MaxBytes, BudgetBytes: run.Budget})
	defer wk.close()
	s, rel, err := wk.stores.Open(ctx, registry.KindRollout, memoryStore)
	if err != nil {
		return out, err
	}
	defer rel()
	sm, err := wal.LoadShard(ctx, b, s.Entry().URI, wk.id)
	if err != nil {
		return out, err
	}
	gens := sm.Generations

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var profile bytes.Buffer
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if heapProfile != "" && int64(ms.HeapInuse) > out.PeakHeap*21/20 {
				profile.Reset()
				_ = pprof.Lookup("heap").WriteTo(&profile, 0)
			}
			out.PeakHeap = max(out.PeakHeap, int64(ms.HeapInuse))
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	start := time.Now()
	r, err := wk.merger.Merge(ctx, s, true)
	out.Elapsed = time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		return out, err
	}
	if heapProfile != "" {
		// The peak's in-use view, and everything the merge allocated (alloc_space).
		if err := os.WriteFile(heapProfile+".peak", profile.Bytes(), 0o644); err != nil {
			return out, err
		}
		runtime.GC()
		profile.Reset()
		if err := pprof.Lookup("heap").WriteTo(&profile, 0); err != nil {
			return out, err
		}
		if err := os.WriteFile(heapProfile, profile.Bytes(), 0o644); err != nil {
			return out, err
		}
	}
	out.Passes = r.Passes
	out.LargestPass = largestPass(gens, run)
	if out.PeakRSS, err = peakRSS(); err != nil {
		return out, err
	}
	t, err := table.Open(ctx, b, s.Entry().URI, table.WithLogger(quiet))
	if err != nil {
		return out, err
	}
	out.Rows = t.Latest().Stats().Rows
	if n, err := pendingGenerations(ctx, b, s.Entry().URI); err != nil || n > 0 {
		return out, fmt.Errorf("after the merge: %d generations pending (%v)", n, err)
	}
	return out, nil
}

// largestPass replays merge.Merger's choice of generations (the oldest first, up to
// the caps and what the budget pays for, at least one) over gens and returns the
// largest pass's bytes.
func largestPass(gens []wal.Generation, run MemoryRun) int64 {
	budget := run.Budget
	if budget <= 0 {
		budget = 2 << 30 // merge.Config's default
	}
	maxBytes := budget / merge.PassCostFactor
	if run.MaxBytes > 0 {
		maxBytes = min(maxBytes, run.MaxBytes)
	}
	var largest int64
	for len(gens) > 0 {
		var bytes int64
		n := 0
		for _, g := range gens {
			if n > 0 && (run.MaxGenerations > 0 && n >= run.MaxGenerations || bytes+g.Bytes > maxBytes) {
				break
			}
			bytes += g.Bytes
			n++
		}
		largest = max(largest, bytes)
		gens = gens[n:]
	}
	return largest
}

// peakRSS reads VmHWM (the resident set's high-water mark) from /proc/self/status.
func peakRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/self/status: no VmHWM line")
}
