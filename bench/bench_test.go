package bench

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

func testEnv(t *testing.T) *Env {
	t.Helper()
	dir := t.TempDir()
	e, err := StartEtcd(dir + "/etcd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return &Env{Dir: dir, Etcd: e.Client, Seed: 1}
}

func quickStorm() StormConfig {
	return StormConfig{Workers: 3, GenerationsPerWorker: 3, RowsPerGeneration: 5, Row: SmallRow,
		Latency: 2 * time.Millisecond, MaxConcurrent: 4, RetryTimeout: 2 * time.Second,
		RetryInterval: 100 * time.Millisecond, Deadline: 30 * time.Second}
}

// Both shapes of the commit storm drain the backlog and lose no row (the scenario
// checks the base table itself and fails otherwise).
func TestStormShapesDrainWithoutLoss(t *testing.T) {
	env := testEnv(t)
	for _, shape := range []StormShape{OldShapePerWorkerTimers, NewShapeSerialFanOut, NewShapeGatherFanOut} {
		res, err := RunStorm(context.Background(), env, quickStorm(), shape)
		if err != nil {
			t.Fatalf("%s: %v", shape, err)
		}
		if res.Rows != 3*3*5 {
			t.Fatalf("%s: %d rows", shape, res.Rows)
		}
		wantOK := 3 // a merge per worker
		if shape == NewShapeGatherFanOut {
			wantOK = 1 // one merge of the store; the others drain
		}
		if shape != OldShapePerWorkerTimers && (!res.Drained || res.MergesFailed > 0 || res.MergesOK != wantOK) {
			t.Fatalf("%s: %+v", shape, res)
		}
		t.Logf("%+v", res)
	}
}

func quickLock() LockConfig {
	return LockConfig{Rounds: 2, Generations: 3, RowsPerGeneration: 20, Row: SmallRow,
		Latency: time.Millisecond, Adders: 2, Getters: 4, Pause: time.Millisecond}
}

// Both lock shapes keep every acknowledged add and answer every get of a sealed
// row while merges run, with one merging worker and with two whose commits race
// (every round one of the two loses and rebases over the other's version).
func TestLockShapesLoseNothing(t *testing.T) {
	env := testEnv(t)
	for _, mergers := range []int{1, 2} {
		cfg := quickLock()
		cfg.Mergers = mergers
		for _, shape := range []LockShape{OldShapeLockAcrossRead, NewShapePrepareCommit} {
			res, err := RunLock(context.Background(), env, cfg, shape)
			if err != nil {
				t.Fatalf("%d mergers, %s: %v", mergers, shape, err)
			}
			lost := (mergers - 1) * cfg.Rounds
			if res.Rows < int64(mergers*2*3*20) || res.Commits.N != mergers*cfg.Rounds || res.Conflicted != lost ||
				res.Gets.Idle.N+res.Gets.Merge.N == 0 || res.PendingGets.Idle.N+res.PendingGets.Merge.N == 0 ||
				res.RebasedOver != lost || (res.LongestHold > 0) != (shape == OldShapeLockAcrossRead) {
				t.Fatalf("%d mergers, %s: %+v", mergers, shape, res)
			}
			t.Logf("%+v", res)
		}
	}
}

// The read fan-out scenario lists over pending generations and after their merge,
// and checks every row reached the base table.
func TestFanoutMeasuresPendingAndMerged(t *testing.T) {
	env := testEnv(t)
	cfg := FanoutConfig{Pending: []int{0, 5}, BaseRows: 10, RowsPerGeneration: 2, Row: SmallRow,
		ListRows: 10, Latency: time.Millisecond, Repeats: 2}
	points, err := RunFanout(context.Background(), env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[1].Pending != 5 || points[1].RequestsUncached <= points[0].RequestsUncached {
		t.Fatalf("%+v", points)
	}
	t.Logf("%+v", points)
}

// The throughput measurements run end to end at a tiny size and check their rows.
func TestThroughputSmall(t *testing.T) {
	env := testEnv(t)
	cfg := ThroughputConfig{Clients: []int{1, 4}, AddDuration: 200 * time.Millisecond, PoolRows: 200, Row: SmallRow,
		RawDuration: 50 * time.Millisecond, MergeGenerations: 2, MergeRowsPerGeneration: 20,
		ScannerStores: []int{20}, EtcdDuration: 100 * time.Millisecond}
	res, err := RunThroughput(context.Background(), env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Adds) != 2 || res.MergeRows != 40 || len(res.Scans) != 1 || res.TaskCycles == 0 || res.Puts == 0 {
		t.Fatalf("%+v", res)
	}
	t.Logf("%+v", res)
}

// The memory scenario's two processes, run in this one: the backlog is built and
// merged completely, and a peak RSS is read.
func TestMemoryBuildAndMerge(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	backlog, err := MemoryBuild(ctx, dir, 256<<10, 1, SmallRow)
	if err != nil {
		t.Fatal(err)
	}
	if backlog.Generations != 1 || backlog.Rows == 0 {
		t.Fatalf("%+v", backlog)
	}
	out, err := MemoryMerge(ctx, dir, MemoryRun{Name: "t", MaxGenerations: 8, MaxBytes: 1 << 30, Budget: 64 << 20}, "")
	if err != nil {
		t.Fatal(err)
	}
	if out.Rows != backlog.Rows || out.PeakRSS <= 0 || out.Passes != 1 || out.LargestPass != backlog.Bytes {
		t.Fatalf("backlog %+v, merge %+v", backlog, out)
	}
}

// WriteSection appends the section the first time and replaces it afterwards,
// keeping what comes before and after it.
func TestWriteSectionReplacesItsOwnSection(t *testing.T) {
	path := t.TempDir() + "/BENCHMARKS.md"
	head := "# Benchmarks\n\n## Base table\n\ntext\n"
	if err := os.WriteFile(path, []byte(head), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"first", "second"} {
		if err := WriteSection(path, SectionHeading+" (`bench/`)\n\n### 1. x\n\n"+run+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := head + "\n" + SectionHeading + " (`bench/`)\n\n### 1. x\n\nsecond\n"
	if string(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if err := os.WriteFile(path, []byte(want+"\n## Later\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSection(path, SectionHeading+"\n\nthird\n"); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	if want := head + "\n## Later\n\nkept\n\n" + SectionHeading + "\n\nthird\n"; string(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// UpdateSections replaces the subsections of the scenarios a report holds and
// keeps the section's header, the other scenarios' subsections and later sections.
func TestUpdateSectionsReplacesOnlyItsScenarios(t *testing.T) {
	path := t.TempDir() + "/BENCHMARKS.md"
	head := "# Benchmarks\n\n" + SectionHeading + " (`bench/`), 2026-11-29\n\nCommand: `make bench`.\n\n"
	storm := "### 1. Commit storm\n\nold storm\n\n"
	fanout := "### 3. Read fan-out\n\nold fan-out\n"
	later := "\n## Later\n\nkept\n"
	for _, c := range []struct{ doc, wantBefore, wantAfter string }{
		{head + storm + "### 2. Lock held across the read\n\nold lock\n\n" + fanout + later, head + storm, "\n" + fanout + later},
		{head + storm + "### 2. Lock held across the read\n\nold lock\n" + later, head + storm, later},
		{head + storm + "### 2. Lock held across the read\n\nold lock\n", head + storm, ""},
	} {
		if err := os.WriteFile(path, []byte(c.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		r := &Report{Date: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Command: "tidemark-bench run --only lock", Seed: 1,
			LockConfig: DefaultLockConfig(), Lock: []LockResult{{Shape: OldShapeLockAcrossRead, Mergers: 1}}}
		if err := r.UpdateSections(path); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		doc := string(got)
		lock := r.scenarioSections()[0]
		heading, _, _ := strings.Cut(lock, "\n")
		i := strings.Index(doc, heading+"\n\nRerun alone on 2026-12-01, after the run above: `tidemark-bench run --only lock`.")
		if i < 0 || doc[:i] != c.wantBefore || !strings.HasSuffix(doc, " |\n"+c.wantAfter) || strings.Contains(doc, "old lock") ||
			!strings.Contains(doc, "| 1 | old: exclusive lock across the read | gets of merged rows |") {
			t.Fatalf("got:\n%s", doc)
		}
	}
}

// A scenario the section does not have yet gets its subsection in the order of
// the numbered headings, and everything else stays: what guards a first run of a
// new scenario with --keep-others.
func TestUpdateSectionsInsertsANewScenarioInOrder(t *testing.T) {
	path := t.TempDir() + "/BENCHMARKS.md"
	head := "# Benchmarks\n\n" + SectionHeading + " (`bench/`), 2026-11-29\n\n"
	storm, ingest := "### 1. Commit storm\n\nold storm\n\n", "### 1b. Sustained ingest\n\nold ingest\n\n"
	lock := "### 2. Lock held across the read\n\nold lock\n"
	later := "\n## Later\n\nkept\n"
	r := &Report{Date: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), Command: "tidemark-bench run --only skew",
		SkewRuns: []SkewRun{{Config: DefaultSkewConfig(5 * time.Minute), Result: SkewResult{Mode: fanout.Gather}}}}
	for _, c := range []struct{ doc, before, after string }{
		{head + storm + ingest + lock + later, head + storm + ingest, lock + later},
		{head + storm + ingest + later, head + storm + ingest, later},
	} {
		if err := os.WriteFile(path, []byte(c.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := r.UpdateSections(path); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		doc := string(got)
		i := strings.Index(doc, "### 1c. Skewed ingest\n\nRerun alone on 2026-12-07")
		j := strings.Index(doc, "\n\n"+strings.TrimPrefix(c.after, "\n"))
		if i < 0 || doc[:i] != c.before || j < i || !strings.HasSuffix(doc, c.after) {
			t.Fatalf("got:\n%s", doc)
		}
	}
}

// The report renders every section from results, with ratios.
func TestReportMarkdown(t *testing.T) {
	r := &Report{Date: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), Command: "make bench", Machine: mdreport.ThisMachine(), Seed: 1,
		StormConfig: DefaultStormConfig(),
		Storm: []StormResult{{Shape: OldShapePerWorkerTimers, MergesOK: 20, MergesFailed: 4, TooManyWriters: 4, Drained: true,
			Elapsed: time.Minute, Requests: 5000, PutIfAbsent: 170, FirstError: "too many concurrent writers"},
			{Shape: NewShapeSerialFanOut, MergesOK: 20, Tasks: 1, Drained: true, Elapsed: 2 * time.Minute, Requests: 4000, PutIfAbsent: 40},
			{Shape: NewShapeGatherFanOut, MergesOK: 20, Tasks: 1, Drained: true, Elapsed: 20 * time.Second,
				Requests: 2400, Refused: 400, PutIfAbsent: 20}},
		StormS3: []StormResult{{Shape: OldShapePerWorkerTimers, MergesOK: 20, Drained: true, Elapsed: time.Minute, Requests: 1000, PutIfAbsent: 100},
			{Shape: NewShapeGatherFanOut, MergesOK: 20, Tasks: 1, Drained: true, Elapsed: 30 * time.Second, Requests: 900, Refused: 90, PutIfAbsent: 40}},
		StormS3URL: "s3://b?endpoint=http://127.0.0.1:9100",
		FanOutRuns: []FanOutThroughput{{Config: FanOutThroughputConfigs()[0],
			Result: StormResult{Shape: NewShapeGatherFanOut, Elapsed: 10 * time.Second, Requests: 100, Versions: 4}}},
		LockConfig: DefaultLockConfig(),
		Lock: []LockResult{
			{Shape: OldShapeLockAcrossRead, Mergers: 1, Gets: LockCalls{Held: Quantiles{N: 3, P50: time.Second, P99: 2 * time.Second, Max: 3 * time.Second}},
				Commits: Quantiles{N: 5, P50: 60 * time.Millisecond, P99: 70 * time.Millisecond, Max: 70 * time.Millisecond}, LongestHold: time.Second},
			{Shape: NewShapePrepareCommit, Mergers: 1, Gets: LockCalls{Held: Quantiles{N: 3, P50: time.Millisecond, P99: time.Millisecond, Max: time.Millisecond}}},
			{Shape: OldShapeLockAcrossRead, Mergers: 2, Conflicted: 5, RebasedOver: 5, LongestHold: 2 * time.Second},
			{Shape: NewShapePrepareCommit, Mergers: 2, Conflicted: 5, RebasedOver: 5}},
		FanoutCfg:  DefaultFanoutConfig(),
		Fanout:     []FanoutPoint{{Pending: 200, Cached: time.Second, MergedCached: time.Second, Uncached: 2 * time.Second, MergedUncached: time.Second}},
		ThroughCfg: DefaultThroughputConfig(),
		Throughput: &ThroughputResult{RowBytes: 4000, Adds: []AddsPoint{{Clients: 1, Rows: 100, Elapsed: time.Second}},
			Raw:       []RawPoint{{RowsPerObject: 64, Objects: 10, ObjectBytes: 1 << 18, Elapsed: time.Second}},
			MergeRows: 1000, MergeBytes: 1 << 20, MergeTime: time.Second, Scans: []ScanPoint{{Stores: 10000, First: time.Second}},
			TaskCycles: 10, TaskTime: time.Second, Puts: 100, PutTime: time.Second},
		MemoryCfg: DefaultMemoryConfig(),
		Memory: &MemoryResult{Backlog: MemoryBacklog{Generations: 16, Bytes: 1 << 30},
			Runs: []MemoryOutcome{{Run: DefaultMemoryConfig().Runs[0], PeakRSS: 1 << 30, Passes: 2, LargestPass: 512 << 20}}},
	}
	md := r.Markdown()
	for _, want := range []string{SectionHeading, "### 1. Commit storm", "| new: master task, serial fan-out / old | | | | | 2.00x | | | 0.80x | 0.24x | | |",
		"| new: master task, gather fan-out / old | | | | | 0.33x | | | 0.48x | 0.12x | | |",
		// The limit: the fewest requests served (2,400 - 400 refused) at 8 in flight
		// for 55 ms each (50 ms + half the 10 ms jitter): 2,000 / 145.45/s.
		"Store-bound limit: 13.75 s. The fewest requests the store served for any shape here are 2000, for " +
			"\"new: master task, gather fan-out\" (2400 requests minus 400 refused)",
		"| new: master task, gather fan-out | 20 / 0 (1 task) | 0 | 0 | yes | 20.00 s | 1.45x |",
		"The same storm on a real S3 store, `s3://b?endpoint=http://127.0.0.1:9100`",
		"| new: master task, gather fan-out / old | | | | | 0.50x | | | 0.90x | 0.40x | | |",
		"| 1,000 generations of 10 rows | new: master task, gather fan-out | 10.00 s | 100 | 1000 | 100 | 4 |",
		"### 2. Lock", "| 1 | old / new | gets of merged rows | p50 1000x, p99 2000x, max 3000x | - | - |",
		"| 1 | old: exclusive lock across the read | 0 | 60 ms / 70 ms / 70 ms (5) | 0 | 0 | 1.00 s |", "| 2 | new: prepare/commit split | 0 | none | 5 | 5 | none (no lock) |", "### 3. Read fan-out", "| 200 | 1.00 s / 1.00 s | 1.00x | 0 / 0 | 2.00 s / 1.00 s | 2.00x |",
		"### 4. Throughput", "| 10,000 |", "### Memory", "| 0.50 | -1.00 GiB | 2.0 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// The storm's bucket (8 requests in flight, 50 ms + up to 10 ms each) serves
// 8 / 55 ms requests a second.
func TestStormBucketRateAndPrepares(t *testing.T) {
	c := DefaultStormConfig()
	if got, want := c.RequestRate(), 8/0.055; math.Abs(got-want) > 1e-9 {
		t.Errorf("RequestRate() = %v, want %v", got, want)
	}
}

// largestPass chooses generations as merge.Merger does: the oldest first, up to
// both caps and what the budget pays for at merge.PassCostFactor, never splitting
// one, at least one a pass.
func TestLargestPassFollowsTheMergeCaps(t *testing.T) {
	gens := func(sizes ...int64) []wal.Generation {
		var out []wal.Generation
		for i, s := range sizes {
			out = append(out, wal.Generation{Generation: uint64(i + 1), Bytes: s})
		}
		return out
	}
	for _, c := range []struct {
		gens []wal.Generation
		run  MemoryRun
		want int64
	}{
		{gens(10, 10, 10, 10, 10), MemoryRun{MaxGenerations: 2}, 20},
		{gens(10, 10, 10, 10, 10), MemoryRun{MaxBytes: 25}, 20},
		{gens(10, 100, 10), MemoryRun{MaxBytes: 25}, 100},
		{gens(10, 10, 10), MemoryRun{}, 30},
		{gens(10, 10, 10, 10), MemoryRun{Budget: merge.PassCostFactor * 25}, 20},
		{gens(10, 100, 10), MemoryRun{Budget: merge.PassCostFactor * 25}, 100},
	} {
		if got := largestPass(c.gens, c.run); got != c.want {
			t.Errorf("largestPass(%+v) = %d, want %d", c.run, got, c.want)
		}
	}
}
