// Command tidemark-bench runs the incident reproductions of package bench and
// writes their table into BENCHMARKS.md. `make bench` runs it (scripts/bench.sh).
//
//	tidemark-bench run [--only storm,ingest,lock,fanout,throughput,memory,maintenance,scale,feed,skew,overload,arrow] [--write BENCHMARKS.md [--keep-others]]
//
// scale (stores of millions of rows) runs only when named: at its default sizes
// it takes tens of minutes. feed (the change feed followed on a cluster of
// processes) runs only when named too: it starts a master and --feed-workers
// worker processes. So do skew (one hot store and 50 quiet ones, --skew-duration)
// and overload (adds at twice what merges sustain, --overload-duration), issue
// 31's: each takes over 5 minutes. arrow (issue 44: Arrow and JSON reads and adds
// against the fragments decoded in-process, and exports, at 1M and 10M rows) too.
//
// memory-build and memory-merge are the worker processes of the memory scenario;
// run starts them itself.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/bench"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// scenarios run by default; named adds those that run only when --only names them.
var (
	scenarios = []string{"storm", "ingest", "lock", "fanout", "throughput", "memory", "maintenance"}
	named     = []string{"scale", "feed", "skew", "overload", "arrow"}
)

// ownSection are the scenarios that write a section of their own, not a
// subsection of the incident reproductions.
var ownSection = []string{"maintenance", "scale", "feed", "arrow"}

func main() {
	// The production packages log through slog.Default where no logger is passed;
	// progress goes to stderr through its own logger.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	root := &cobra.Command{
		Use:           "tidemark-bench",
		Short:         "Reproduce Tidemark's production incidents, old shape next to new, and measure its throughput",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newMemoryBuildCmd(), newMemoryMergeCmd())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tidemark-bench:", err)
		os.Exit(1)
	}
}

type runFlags struct {
	only       []string
	write      string
	keepOthers bool
	command    string
	dir        string
	seed       uint64
	// Sizes that may need adjusting to a slower machine.
	stormScale  float64
	stormS3     string
	memoryBytes int64
	// ingestDuration is each sustained-ingest run's length; ingestShort adds the
	// runs with short scan and sweep intervals to those at the master's defaults.
	ingestDuration time.Duration
	ingestShort    bool
	// ingestWorkers and ingestFanout choose the runs: each worker count in each
	// fan-out shape.
	ingestWorkers []int
	ingestFanout  []string
	// scaleRows are the scale scenario's store sizes; scaleProfiles, if set, the
	// directory of its CPU profiles.
	scaleRows []int64
	// arrowRows are the arrow scenario's store sizes.
	arrowRows     []int64
	scaleProfiles string
	scaleCache    int64
	// cpuProfile, if set, receives a CPU profile of the whole run.
	cpuProfile string
	// feed sizes the feed scenario (bench.DefaultFeedConfig, then the flags).
	feed bench.FeedConfig
	// skewDuration is the skewed ingest's length; overload sizes the overload
	// (bench.DefaultOverloadConfig, then the flags).
	skewDuration time.Duration
	overload     bench.OverloadConfig
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the scenarios, print the Markdown table, optionally write it into BENCHMARKS.md",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), f) },
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&f.only, "only", scenarios, "scenarios to run: "+strings.Join(append(slices.Clone(scenarios), named...), ",")+
		" ("+strings.Join(named, ",")+" only when named)")
	fs.StringVar(&f.write, "write", "", "Markdown file whose \""+bench.SectionHeading+"\" section is replaced (or appended) with the results")
	fs.BoolVar(&f.keepOthers, "keep-others", false, "with --write: replace only the subsections of the scenarios run, keep the rest of the section (a rerun of some scenarios)")
	fs.StringVar(&f.command, "command", "", "the command recorded in the section (default: this command line)")
	fs.StringVar(&f.dir, "dir", "", "scratch directory (default: a new temporary directory, removed at the end)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of every generator of rows, jitter and client choices")
	fs.Float64Var(&f.stormScale, "storm-time-scale", 1, "commit storm: multiply the reference's 50 ms latency, 30 s retry timeout and 30 s timer by this (below 1: a shorter, less faithful run)")
	fs.StringVar(&f.stormS3, "storm-s3", "", "commit storm: also run its shapes on this S3-compatible bucket (DATA_URL form, e.g. "+
		"s3://tidemark-test?endpoint=http://127.0.0.1:9100&region=us-east-1&use_path_style=true, credentials from AWS_ACCESS_KEY_ID and "+
		"AWS_SECRET_ACCESS_KEY; scripts/minio.sh's MinIO), behind a fault proxy adding the latency and answering 503 SlowDown over the concurrency")
	fs.DurationVar(&f.ingestDuration, "ingest-duration", 3*time.Minute, "sustained ingest: length of each run")
	fs.BoolVar(&f.ingestShort, "ingest-short-intervals", true, "sustained ingest: also run with a 10 s stats scan and a 5 s merge sweep, besides the master's defaults")
	fs.IntSliceVar(&f.ingestWorkers, "ingest-workers", bench.IngestWorkers, "sustained ingest: the worker counts of the runs")
	fs.StringSliceVar(&f.ingestFanout, "ingest-fanout", []string{string(fanout.Gather)}, "sustained ingest: the fan-out shapes (MERGE_FANOUT: gather, serial) of the runs")
	fs.Int64Var(&f.memoryBytes, "memory-backlog-bytes", 1<<30, "memory scenario: generation bytes of the backlog merged")
	fs.Int64SliceVar(&f.scaleRows, "scale-rows", bench.DefaultScaleRows, "scale scenario: rows of each store measured, smallest first (100000000: a run of hours, by hand)")
	fs.Int64SliceVar(&f.arrowRows, "arrow-rows", bench.DefaultArrowRows, "arrow scenario: rows of each store measured, smallest first")
	fs.Int64Var(&f.scaleCache, "scale-table-cache-bytes", 0, "scale scenario: the measuring workers' table cache, a quarter of CACHE_BYTES (0: the worker's default)")
	fs.StringVar(&f.scaleProfiles, "scale-profiles", "", "scale scenario: write a CPU profile of every measured phase into this directory")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run into this file (not with --scale-profiles)")
	f.feed = bench.DefaultFeedConfig(bench.FeedWorkers)
	fs.IntVar(&f.feed.Workers, "feed-workers", f.feed.Workers, "feed scenario: worker processes (each seals every --feed-seal-every)")
	fs.DurationVar(&f.feed.SealEvery, "feed-seal-every", f.feed.SealEvery, "feed scenario: the workers' FLUSH_INTERVAL")
	fs.Float64Var(&f.feed.Rate, "feed-rate", f.feed.Rate, "feed scenario: rows/s the writer adds through every worker while the consumer follows")
	fs.IntVar(&f.feed.Batch, "feed-batch", f.feed.Batch, "feed scenario: rows per add request of the followed load")
	fs.DurationVar(&f.feed.Duration, "feed-duration", f.feed.Duration, "feed scenario: length of the followed load")
	fs.DurationVar(&f.feed.Warmup, "feed-warmup", f.feed.Warmup, "feed scenario: first part of the load left out of the delays")
	fs.IntVar(&f.feed.Limit, "feed-limit", f.feed.Limit, "feed scenario: the consumer's page size (and the list's)")
	fs.DurationVar(&f.feed.Wait, "feed-wait", f.feed.Wait, "feed scenario: the consumer's long poll (?wait=)")
	fs.Int64Var(&f.feed.CatchUpRows, "feed-catchup-rows", f.feed.CatchUpRows, "feed scenario: rows of the store read from the beginning by the feed and by the list")
	fs.IntVar(&f.feed.Rounds, "feed-rounds", f.feed.Rounds, "feed scenario: reads of the catch-up store by each of the feed and the list")
	fs.DurationVar(&f.skewDuration, "skew-duration", 5*time.Minute, "skewed ingest: length of the run (20 workers on one hot store and 50 quiet ones)")
	f.overload = bench.DefaultOverloadConfig(5 * time.Minute)
	fs.DurationVar(&f.overload.Duration, "overload-duration", f.overload.Duration, "overload: length of the overload phase, after the probe")
	fs.IntVar(&f.overload.Workers, "overload-workers", f.overload.Workers, "overload: workers, each with one writer adding through its HTTP add route")
	fs.IntVar(&f.overload.Writers, "overload-writers", f.overload.Writers, "overload: writers per worker, each waiting for its answers")
	fs.IntVar(&f.overload.RowsPerAdd, "overload-rows", f.overload.RowsPerAdd, "overload: rows per add (each add is sealed into a generation of its own)")
	fs.Float64Var(&f.overload.Factor, "overload-factor", f.overload.Factor, "overload: the writers' rate in all, as a multiple of what the probe measured merges sustain")
	fs.IntVar(&f.overload.MergeMaxGenerations, "overload-merge-max-generations", f.overload.MergeMaxGenerations, "overload: the workers' MERGE_MAX_GENERATIONS, the generations one merge pass takes (a small cap makes merges, not this machine's writers, the bound)")
	fs.IntVar(&f.overload.ProbeGenerations, "overload-probe-generations", f.overload.ProbeGenerations, "overload: generations each worker seals for the probe of what merges sustain")
	fs.StringVar(&f.feed.BinDir, "feed-bin", "", "feed scenario: directory holding the master and worker binaries (default: go build them into the scratch directory)")
	return cmd
}

func run(ctx context.Context, f runFlags) error {
	for _, s := range f.only {
		if !slices.Contains(scenarios, s) && !slices.Contains(named, s) {
			return fmt.Errorf("--only: unknown scenario %q (want %s)", s, strings.Join(append(slices.Clone(scenarios), named...), ","))
		}
	}
	var ingestShapes []fanout.Shape
	for _, name := range f.ingestFanout {
		sh, err := fanout.ParseShape(name)
		if err != nil {
			return fmt.Errorf("--ingest-fanout: %w", err)
		}
		ingestShapes = append(ingestShapes, sh)
	}
	if len(f.ingestWorkers) == 0 || slices.Min(f.ingestWorkers) < 1 {
		return fmt.Errorf("--ingest-workers %v: want positive worker counts", f.ingestWorkers)
	}
	if !slices.IsSorted(f.scaleRows) || len(f.scaleRows) == 0 || f.scaleRows[0] <= 0 {
		return fmt.Errorf("--scale-rows %v: want positive sizes, smallest first", f.scaleRows)
	}
	if f.command == "" {
		f.command = "go run ./bench/cmd/tidemark-bench " + strings.Join(os.Args[1:], " ")
	}
	if f.cpuProfile != "" {
		if f.scaleProfiles != "" {
			return fmt.Errorf("--cpu-profile and --scale-profiles: one CPU profile at a time")
		}
		stop, err := bench.StartCPUProfile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	dir := f.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tidemark-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	want := func(s string) bool { return slices.Contains(f.only, s) }
	env := &bench.Env{Dir: dir, Log: log, Seed: f.seed, Exe: exe}
	// Only the scenarios with a master need etcd; the others measure one process,
	// whose resident set an idle etcd server would add to.
	if want("storm") || want("ingest") || want("throughput") || want("skew") || want("overload") {
		etcd, err := bench.StartEtcd(dir + "/etcd")
		if err != nil {
			return err
		}
		defer etcd.Close()
		env.Etcd = etcd.Client
	}
	// Table maintenance and scale write sections of their own
	// (bench.MaintenanceHeading, bench.ScaleHeading); run alone, they leave the
	// incident reproductions' section as it is.
	if want("maintenance") {
		if err := bench.RunMaintenanceSection(ctx, env, os.Stdout, f.command, f.write); err != nil {
			return fmt.Errorf("table maintenance: %w", err)
		}
	}
	if want("scale") {
		cfg := bench.DefaultScaleConfig(f.scaleRows)
		cfg.ProfileDir, cfg.TableCacheBytes = f.scaleProfiles, f.scaleCache
		if err := bench.RunScaleSection(ctx, env, cfg, os.Stdout, f.command, f.write); err != nil {
			return fmt.Errorf("scale: %w", err)
		}
	}
	if want("arrow") {
		if err := bench.RunArrowSection(ctx, env, bench.DefaultArrowConfig(f.arrowRows), os.Stdout, f.command, f.write); err != nil {
			return fmt.Errorf("arrow: %w", err)
		}
	}
	if want("feed") {
		if err := bench.RunFeedSection(ctx, env, f.feed, os.Stdout, f.command, f.write); err != nil {
			return fmt.Errorf("feed: %w", err)
		}
	}
	if len(slices.DeleteFunc(slices.Clone(f.only), func(s string) bool { return slices.Contains(ownSection, s) })) == 0 {
		return nil
	}
	r := &bench.Report{Date: time.Now(), Command: f.command, Machine: mdreport.ThisMachine(), Seed: f.seed}
	start := time.Now()

	if want("storm") {
		r.StormConfig = bench.ScaledStormConfig(f.stormScale)
		if r.Storm, err = runStormShapes(ctx, env, r.StormConfig); err != nil {
			return fmt.Errorf("commit storm: %w", err)
		}
		if f.stormS3 != "" {
			cfg := r.StormConfig
			cfg.S3URL = f.stormS3
			if r.StormS3, err = runStormShapes(ctx, env, cfg); err != nil {
				return fmt.Errorf("commit storm on %s: %w", f.stormS3, err)
			}
			r.StormS3URL = f.stormS3
		}
		for _, cfg := range bench.FanOutThroughputConfigs() {
			for _, shape := range []bench.StormShape{bench.NewShapeSerialFanOut, bench.NewShapeGatherFanOut} {
				res, err := bench.RunStorm(ctx, env, cfg, shape)
				if err != nil {
					return fmt.Errorf("fan-out throughput: %w", err)
				}
				r.FanOutRuns = append(r.FanOutRuns, bench.FanOutThroughput{Config: cfg, Result: res})
			}
		}
	}
	if want("ingest") {
		for _, cfg := range bench.IngestConfigs(f.ingestDuration, f.ingestShort, f.ingestWorkers) {
			for _, mode := range ingestShapes {
				res, err := bench.RunIngest(ctx, env, cfg, mode)
				if err != nil {
					return fmt.Errorf("sustained ingest: %w", err)
				}
				r.IngestRuns = append(r.IngestRuns, bench.IngestRun{Config: cfg, Result: res})
			}
		}
	}
	if want("skew") {
		cfg := bench.DefaultSkewConfig(f.skewDuration)
		res, err := bench.RunSkew(ctx, env, cfg, fanout.Gather)
		if err != nil {
			return fmt.Errorf("skewed ingest: %w", err)
		}
		r.SkewRuns = append(r.SkewRuns, bench.SkewRun{Config: cfg, Result: res})
	}
	if want("overload") {
		res, err := bench.RunOverload(ctx, env, f.overload, fanout.Gather)
		if err != nil {
			return fmt.Errorf("overload: %w", err)
		}
		r.Overload = &bench.OverloadRun{Config: f.overload, Result: res}
	}
	if want("lock") {
		r.LockConfig = bench.DefaultLockConfig()
		for _, mergers := range []int{1, 2} {
			cfg := r.LockConfig
			cfg.Mergers = mergers
			for _, shape := range []bench.LockShape{bench.OldShapeLockAcrossRead, bench.NewShapePrepareCommit} {
				res, err := bench.RunLock(ctx, env, cfg, shape)
				if err != nil {
					return fmt.Errorf("lock across the read (%d merging workers): %w", mergers, err)
				}
				r.Lock = append(r.Lock, res)
			}
		}
	}
	if want("fanout") {
		r.FanoutCfg = bench.DefaultFanoutConfig()
		if r.Fanout, err = bench.RunFanout(ctx, env, r.FanoutCfg); err != nil {
			return err
		}
	}
	if want("throughput") {
		r.ThroughCfg = bench.DefaultThroughputConfig()
		res, err := bench.RunThroughput(ctx, env, r.ThroughCfg)
		if err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
		r.Throughput = &res
	}
	if want("memory") {
		r.MemoryCfg = bench.DefaultMemoryConfig()
		r.MemoryCfg.BacklogBytes = f.memoryBytes
		res, err := bench.RunMemory(ctx, env, r.MemoryCfg)
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
		r.Memory = &res
	}
	r.Duration = time.Since(start)
	section := r.Markdown()
	fmt.Print(section)
	if f.write != "" {
		write := func() error { return bench.WriteSection(f.write, section) }
		if f.keepOthers {
			write = func() error { return r.UpdateSections(f.write) }
		}
		if err := write(); err != nil {
			return fmt.Errorf("write %s: %w", f.write, err)
		}
		log.Info("section written", "file", f.write)
	}
	return nil
}

func newMemoryBuildCmd() *cobra.Command {
	var (
		dir         string
		bytes       int64
		seed        uint64
		words, toks int
	)
	cmd := &cobra.Command{
		Use:    "memory-build",
		Short:  "Write the memory scenario's backlog (a process of its own)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := bench.MemoryBuild(cmd.Context(), dir, bytes, seed, bench.RowShape{ContentWords: words, Tokens: toks})
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", "", "directory of the file:// bucket")
	fs.Int64Var(&bytes, "bytes", 1<<30, "generation bytes to write")
	fs.Uint64Var(&seed, "seed", 1, "row generator seed")
	fs.IntVar(&words, "content-words", bench.RealisticRow.ContentWords, "content length in words")
	fs.IntVar(&toks, "tokens", bench.RealisticRow.Tokens, "output tokens per record")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func newMemoryMergeCmd() *cobra.Command {
	var (
		dir, heapProfile string
		r                bench.MemoryRun
	)
	cmd := &cobra.Command{
		Use:    "memory-merge",
		Short:  "Merge the memory scenario's backlog as one worker and report the peak RSS (a process of its own)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := bench.MemoryMerge(cmd.Context(), dir, r, heapProfile)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", "", "directory of the file:// bucket")
	fs.StringVar(&r.Name, "name", "", "configuration name (echoed)")
	fs.IntVar(&r.MaxGenerations, "max-generations", 8, "MERGE_MAX_GENERATIONS")
	fs.Int64Var(&r.MaxBytes, "max-bytes", 1<<30, "MERGE_MAX_BYTES")
	fs.Int64Var(&r.Budget, "budget", 2<<30, "MERGE_MEMORY_BUDGET")
	fs.StringVar(&heapProfile, "heap-profile", "", "write the heap profile taken at the peak Go heap here")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// runStormShapes runs the commit storm of cfg in every shape, old first.
func runStormShapes(ctx context.Context, env *bench.Env, cfg bench.StormConfig) ([]bench.StormResult, error) {
	var out []bench.StormResult
	for _, shape := range []bench.StormShape{bench.OldShapePerWorkerTimers, bench.NewShapeSerialFanOut, bench.NewShapeGatherFanOut} {
		res, err := bench.RunStorm(ctx, env, cfg, shape)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}
