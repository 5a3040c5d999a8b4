package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/client/tail"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/tools/loadgen"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// The change feed (issue 32) as a trainer follows it: a real cluster of processes
// (devcluster: an embedded etcd, a master and Workers worker processes on one
// file:// bucket, every worker sealing every SealEvery), a writer (loadgen)
// adding generic rows through every worker at a steady rate, and ONE consumer
// (pkg/client/tail, what `worker tail --follow --consumer` runs) long-polling the
// store through the first worker and committing each page as a named consumer.
//
// Measured: each row's delay from its acknowledgement (the writer's wall clock
// when the 201 arrived) to its delivery (the consumer's wall clock when the page
// holding it arrived); the store's horizon behind wall time, sampled from etcd
// with the workers' own horizon.View; and, on a second store of CatchUpRows rows
// merged into its base table, the rows/s a new consumer reads from the beginning
// next to the rows/s of the list route paged by cursor over the same store.
//
// Checks before it reports: every acknowledged row of the followed store was
// delivered (within DrainTimeout after the load), and each catch-up read, feed and
// list alike, answered exactly CatchUpRows rows.

// FeedConfig sizes the scenario.
type FeedConfig struct {
	// Workers is the number of worker processes; SealEvery their FLUSH_INTERVAL.
	Workers   int
	SealEvery time.Duration
	// Rate is the writer's rows/s over every worker, Batch its rows per add
	// request (batch k goes to worker k mod Workers).
	Rate  float64
	Batch int
	// Duration is the followed load's length; rows acknowledged in its first
	// Warmup (the workers opening the store, the first promises) are checked
	// but left out of the delays.
	Duration, Warmup time.Duration
	// Limit is the consumer's page size, Wait its long poll (?wait=).
	Limit int
	Wait  time.Duration
	// DrainTimeout bounds how long after the load the consumer may take to
	// deliver every acknowledged row.
	DrainTimeout time.Duration
	// HorizonEvery is the horizon's sampling interval during the load.
	HorizonEvery time.Duration
	// CatchUpRows is the size of the catch-up store, written BuildBatch rows a
	// request as fast as BuildConcurrency requests in flight allow; Rounds is how
	// many times each of the feed and the list reads it (alternating).
	CatchUpRows      int64
	BuildBatch       int
	BuildConcurrency int
	Rounds           int
	// StartTimeout bounds the cluster's start, SettleTimeout the wait for the
	// catch-up store to be merged and under the horizon.
	StartTimeout, SettleTimeout time.Duration
	// BinDir, if set, holds the master and worker binaries; empty: they are
	// built (go build) into scratch space.
	BinDir string
}

// FeedWorkers is the scenario's default number of worker processes (issue 32:
// "20 workers sealing every second").
const FeedWorkers = 20

// DefaultFeedConfig is the run, sized for a 2-core machine: 400 rows/s
// in requests of 20 rows for 2 minutes (with 20 workers, one request per worker
// per second, so every worker seals every second), pages of 1,000 with 10 s
// long polls, and a catch-up store of 200,000 rows read twice each way.
func DefaultFeedConfig(workers int) FeedConfig {
	return FeedConfig{
		Workers: workers, SealEvery: time.Second, Rate: 400, Batch: 20,
		Duration: 2 * time.Minute, Warmup: 10 * time.Second,
		Limit: 1000, Wait: 10 * time.Second, DrainTimeout: time.Minute, HorizonEvery: 250 * time.Millisecond,
		CatchUpRows: 200_000, BuildBatch: 1000, BuildConcurrency: 4, Rounds: 2,
		StartTimeout: 2 * time.Minute, SettleTimeout: 3 * time.Minute,
	}
}

// FeedResult is one run of the scenario.
type FeedResult struct {
	Config  FeedConfig
	Date    time.Time
	Command string
	Machine mdreport.Machine
	Seed    uint64
	// Duration is the whole run (cluster start to stop); LoadEnd the load
	// average when the catch-up reads ended.
	Duration time.Duration
	LoadEnd  string

	// Follow is the followed load and its consumer.
	Follow FeedFollow
	// CatchUp is the catch-up store and its reads.
	CatchUp FeedCatchUp
}

// FeedFollow is what the followed load and its consumer did.
type FeedFollow struct {
	// Acked is the rows acknowledged, AckedRate their rate over Elapsed;
	// FailedRequests the add requests that failed (their rows may or may not be
	// delivered).
	Acked          int64
	AckedRate      float64
	FailedRequests int64
	Elapsed        time.Duration
	// Delivered counts the distinct rows the consumer received, Repeated those it
	// received again, Unacknowledged those no acknowledgement was seen for.
	Delivered, Repeated, Unacknowledged int64
	// Delay is acknowledgement to delivery of every acknowledged row after the
	// warm-up; BeforeAck counts rows delivered before their acknowledgement was
	// seen (delay 0: the 201 and a page raced on the client).
	Delay     Quantiles
	BeforeAck int64
	// Drain is the time from the load's end to the last acknowledged row's
	// delivery.
	Drain time.Duration
	// Pages and Commits are the consumer's (tail.Stats).
	Pages, Commits int
	// HorizonLag is wall time minus the wall time of the store's horizon
	// (wal.SeqTime), sampled during the load after the warm-up.
	HorizonLag Quantiles
}

// FeedCatchUp is the catch-up store and its reads.
type FeedCatchUp struct {
	Rows int64
	// Build is the writing of the rows, Settle the wait until they were merged
	// (every worker's shard flushed and merged through its merge-wal route) and
	// under the horizon.
	Build, Settle time.Duration
	// Fragments is the base table's fragment count once settled: a feed page
	// from the beginning reads the id and _seq columns of every fragment whose
	// _seq range reaches its cursor.
	Fragments int
	// Feed and List are each round's time to read every row: a new named
	// consumer from the beginning (pages of Limit, a commit after each), and the
	// list route paged by cursor (limit Limit).
	Feed, List []time.Duration
	// FeedPages and ListPages are the pages of one round.
	FeedPages, ListPages int
}

// Best returns the fastest of ds.
func best(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	b := ds[0]
	for _, d := range ds[1:] {
		b = min(b, d)
	}
	return b
}

// FeedRate and ListRate are the rows/s of the fastest round of each.
func (c FeedCatchUp) FeedRate() float64 { return rate(c.Rows, best(c.Feed)) }

// ListRate is the list route's rows/s in its fastest round.
func (c FeedCatchUp) ListRate() float64 { return rate(c.Rows, best(c.List)) }

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Store names of the scenario; the consumers are feedConsumer and
// feedCatchUpConsumer-<round>.
const (
	feedFollowStore     = "feed_follow"
	feedCatchUpStore    = "feed_catchup"
	feedConsumer        = "bench"
	feedCatchUpConsumer = "catchup"
)

func (c FeedConfig) check() error {
	if c.Workers < 1 || c.SealEvery <= 0 || c.Rate <= 0 || c.Batch < 1 || c.Duration <= 0 || c.Warmup < 0 ||
		c.Warmup >= c.Duration || c.Limit < 1 || c.Wait <= 0 || c.DrainTimeout <= 0 || c.HorizonEvery <= 0 ||
		c.CatchUpRows < 1 || c.BuildBatch < 1 || c.BuildConcurrency < 1 || c.Rounds < 1 {
		return fmt.Errorf("feed: config %+v: sizes, rates and intervals must be positive, the warm-up shorter than the load", c)
	}
	return nil
}

// RunFeed runs the scenario once.
func RunFeed(ctx context.Context, env *Env, cfg FeedConfig) (res FeedResult, err error) {
	res.Config, res.Seed = cfg, env.Seed
	if err := cfg.check(); err != nil {
		return res, err
	}
	start := time.Now()
	cl, err := startFeedCluster(ctx, env, cfg)
	if err != nil {
		return res, err
	}
	defer func() {
		if stopErr := cl.stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("feed: cluster shutdown: %w", stopErr)
		}
		res.Duration = time.Since(start)
	}()
	env.log().Info("feed: cluster up", "workers", cfg.Workers, "dir", cl.ep.Dir)
	if res.Follow, err = runFeedFollow(ctx, env, cfg, cl); err != nil {
		return res, err
	}
	env.log().Info("feed: followed", "acked", res.Follow.Acked, "delay_p50", res.Follow.Delay.P50,
		"delay_p99", res.Follow.Delay.P99, "delay_max", res.Follow.Delay.Max, "horizon_lag_p50", res.Follow.HorizonLag.P50,
		"horizon_lag_p99", res.Follow.HorizonLag.P99)
	if res.CatchUp, err = runFeedCatchUp(ctx, env, cfg, cl); err != nil {
		return res, err
	}
	res.LoadEnd = mdreport.ThisMachine().LoadAvg
	env.log().Info("feed: caught up", "rows", res.CatchUp.Rows, "feed_rows_per_s", int(res.CatchUp.FeedRate()),
		"list_rows_per_s", int(res.CatchUp.ListRate()))
	return res, nil
}

// runFeedFollow writes the followed store at the steady rate while the consumer
// follows it, then waits for every acknowledged row to be delivered.
func runFeedFollow(ctx context.Context, env *Env, cfg FeedConfig, cl *feedCluster) (FeedFollow, error) {
	var out FeedFollow
	if err := loadgen.EnsureStores(ctx, cl.workers[0], "", feedFollowStore); err != nil {
		return out, fmt.Errorf("feed: %w", err)
	}
	tr := newFeedTracker()
	consCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	type tailEnd struct {
		st  tail.Stats
		err error
	}
	consumerDone := make(chan tailEnd, 1)
	go func() {
		st, err := tail.Run(consCtx, tail.Config{
			Worker: cl.workers[0], Kind: client.Generic, Name: feedFollowStore, Consumer: feedConsumer,
			Follow: true, Wait: cfg.Wait, Limit: cfg.Limit, Out: tr,
		})
		consumerDone <- tailEnd{st, err}
	}()

	start := time.Now()
	tr.setWarmupEnd(start.Add(cfg.Warmup))
	target := registry.NewTarget(registry.KindGeneric, feedFollowStore)
	var lags durations
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	sampled := make(chan error, 1)
	go func() { sampled <- cl.sampleHorizon(loadCtx, target, start.Add(cfg.Warmup), cfg.HorizonEvery, &lags) }()

	var failed atomic.Int64
	st, err := loadgen.Run(loadCtx, loadgen.Config{
		Workers: cl.addrs, Rate: cfg.Rate, Batch: cfg.Batch, GenericStore: feedFollowStore,
		RunID: "follow" + strconv.FormatUint(env.Seed, 10), Client: cl.http,
		OnBatch: func(b loadgen.Batch) {
			if b.Err != nil {
				failed.Add(1)
				return
			}
			tr.acked(b.IDs, time.Now())
		},
	})
	if err != nil {
		return out, fmt.Errorf("feed: load: %w", err)
	}
	loadEnd := time.Now()
	if err := <-sampled; err != nil {
		return out, err
	}
	out.Elapsed, out.Acked, out.FailedRequests = st.Elapsed, st.Rows, failed.Load()
	out.AckedRate = rate(st.Rows, st.Elapsed)

	// Every acknowledged row must reach the consumer: the feed's promise.
	deadline := time.NewTimer(cfg.DrainTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for tr.waiting() > 0 {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case end := <-consumerDone:
			return out, fmt.Errorf("feed: the consumer stopped with %d acknowledged rows undelivered: %v", tr.waiting(), end.err)
		case <-deadline.C:
			return out, fmt.Errorf("feed: %d of %d acknowledged rows not delivered %s after the load ended",
				tr.waiting(), out.Acked, cfg.DrainTimeout)
		case <-tick.C:
		}
	}
	out.Drain = max(0, tr.lastDelivery().Sub(loadEnd))
	stopConsumer()
	end := <-consumerDone
	if end.err != nil {
		return out, fmt.Errorf("feed: consumer: %w", end.err)
	}
	if err := tr.err(); err != nil {
		return out, err
	}
	out.Pages, out.Commits = end.st.Pages, end.st.Commits
	tr.mu.Lock()
	out.Delivered, out.Repeated, out.Unacknowledged = int64(len(tr.delivered)), tr.repeated, tr.unacked()
	out.Delay, out.BeforeAck = tr.delays.quantiles(), tr.beforeAck
	tr.mu.Unlock()
	out.HorizonLag = lags.quantiles()
	return out, nil
}

// runFeedCatchUp writes CatchUpRows rows, has every worker merge them, and reads
// them from the beginning through the feed and through the list, alternating.
func runFeedCatchUp(ctx context.Context, env *Env, cfg FeedConfig, cl *feedCluster) (FeedCatchUp, error) {
	out := FeedCatchUp{Rows: cfg.CatchUpRows}
	start := time.Now()
	st, err := loadgen.Run(ctx, loadgen.Config{
		Workers: cl.addrs, Batch: cfg.BuildBatch, Concurrency: cfg.BuildConcurrency, MaxRows: cfg.CatchUpRows,
		GenericStore: feedCatchUpStore, RunID: "catchup" + strconv.FormatUint(env.Seed, 10), Client: cl.http,
	})
	if err != nil {
		return out, fmt.Errorf("feed: catch-up store: %w", err)
	}
	if st.Rows != cfg.CatchUpRows || st.Failed > 0 {
		return out, fmt.Errorf("feed: catch-up store: %d of %d rows acknowledged, %d requests failed (last: %s)",
			st.Rows, cfg.CatchUpRows, st.Failed, st.LastError)
	}
	out.Build = time.Since(start)
	env.log().Info("feed: catch-up store written", "rows", st.Rows, "took", out.Build)

	start = time.Now()
	if out.Fragments, err = cl.settle(ctx, feedCatchUpStore, cfg.CatchUpRows, cfg.SettleTimeout); err != nil {
		return out, err
	}
	out.Settle = time.Since(start)

	for round := range cfg.Rounds {
		t0 := time.Now()
		pages, err := cl.listAll(ctx, feedCatchUpStore, cfg.Limit, cfg.CatchUpRows)
		if err != nil {
			return out, err
		}
		out.List, out.ListPages = append(out.List, time.Since(t0)), pages

		t0 = time.Now()
		var lines lineCount
		fst, err := tail.Run(ctx, tail.Config{
			Worker: cl.workers[0], Kind: client.Generic, Name: feedCatchUpStore,
			Consumer: feedCatchUpConsumer + "-" + strconv.Itoa(round), Limit: cfg.Limit, Out: &lines,
		})
		if err != nil {
			return out, fmt.Errorf("feed: catch-up consumer: %w", err)
		}
		if fst.Rows != int(cfg.CatchUpRows) || lines.n != cfg.CatchUpRows {
			return out, fmt.Errorf("feed: the catch-up consumer read %d rows (%d lines), want %d", fst.Rows, lines.n, cfg.CatchUpRows)
		}
		out.Feed, out.FeedPages = append(out.Feed, time.Since(t0)), fst.Pages
		env.log().Info("feed: catch-up round", "round", round, "list", out.List[round], "feed", out.Feed[round])
	}
	return out, nil
}

// feedTracker is the consumer's output (tail writes one JSON row a line) and the
// writer's acknowledgements, matched by id.
type feedTracker struct {
	mu        sync.Mutex
	warmupEnd time.Time
	ackAt     map[string]time.Time // acknowledged, not yet delivered
	delivered map[string]time.Time
	ackedAll  map[string]bool // every id acknowledged
	early     map[string]bool // delivered before their acknowledgement was seen
	delays    durations
	beforeAck int64
	repeated  int64
	last      time.Time
	partial   []byte
	bad       error
}

func newFeedTracker() *feedTracker {
	return &feedTracker{ackAt: map[string]time.Time{}, delivered: map[string]time.Time{}, ackedAll: map[string]bool{},
		early: map[string]bool{}}
}

func (t *feedTracker) setWarmupEnd(at time.Time) {
	t.mu.Lock()
	t.warmupEnd = at
	t.mu.Unlock()
}

// acked records ids acknowledged at at.
func (t *feedTracker) acked(ids []string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.ackedAll[id] = true
		if t.early[id] {
			delete(t.early, id)
			t.beforeAck++
			if !at.Before(t.warmupEnd) {
				t.delays = append(t.delays, 0)
			}
			continue
		}
		t.ackAt[id] = at
	}
}

// Write takes the consumer's lines; a page's rows arrive in one Flush.
func (t *feedTracker) Write(p []byte) (int, error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := indexNewline(t.partial)
		if i < 0 {
			break
		}
		var row struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(t.partial[:i], &row); err != nil || row.ID == "" {
			t.bad = errors.Join(t.bad, fmt.Errorf("feed: the consumer wrote a line without an id: %q", t.partial[:i]))
		} else {
			t.deliveredLocked(row.ID, now)
		}
		t.partial = t.partial[i+1:]
	}
	return len(p), nil
}

func (t *feedTracker) deliveredLocked(id string, at time.Time) {
	if _, ok := t.delivered[id]; ok {
		t.repeated++
		return
	}
	t.delivered[id], t.last = at, at
	ack, ok := t.ackAt[id]
	if !ok {
		t.early[id] = true
		return
	}
	delete(t.ackAt, id)
	if !ack.Before(t.warmupEnd) {
		t.delays = append(t.delays, at.Sub(ack))
	}
}

// waiting is the number of acknowledged rows not delivered yet.
func (t *feedTracker) waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ackAt)
}

func (t *feedTracker) lastDelivery() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// unacked counts delivered ids never acknowledged (rows of failed requests).
func (t *feedTracker) unacked() int64 { return int64(len(t.early)) }

func (t *feedTracker) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bad
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// lineCount counts the lines written to it.
type lineCount struct{ n int64 }

func (l *lineCount) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' {
			l.n++
		}
	}
	return len(p), nil
}

// listAll reads every row of the generic store through the list route, limit
// rows a page by cursor, as a client copying the store would, and checks it got
// want rows. It returns the pages read.
func (cl *feedCluster) listAll(ctx context.Context, store string, limit int, want int64) (int, error) {
	var rows int64
	pages := 0
	cursor := ""
	for {
		page, err := cl.workers[0].ListRows(ctx, client.Generic, store, client.ListOptions{Limit: limit, Cursor: cursor})
		if err != nil {
			return pages, fmt.Errorf("feed: list: %w", err)
		}
		pages++
		rows += int64(len(page.Rows))
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if rows != want {
		return pages, fmt.Errorf("feed: the list answered %d rows, want %d", rows, want)
	}
	return pages, nil
}

// sampleHorizon appends wall time minus the horizon's wall time of target to
// out every interval from from until ctx ends.
func (cl *feedCluster) sampleHorizon(ctx context.Context, target registry.Target, from time.Time, every time.Duration, out *durations) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			h, ok, err := cl.view.Horizon(ctx, target)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("feed: horizon of %s: %w", target, err)
			}
			if ok && !now.Before(from) {
				*out = append(*out, now.Sub(wal.SeqTime(h)))
			}
		}
	}
}
