// Package loadgen writes realistic load to Tidemark workers: rollout records (a
// few turns per rollout, with tokens, logprobs and grades) and generic rows
// (service events), spread over every worker and both kinds at a chosen rate,
// with a progress line. `worker load` runs it; the end-to-end tests use it to
// know exactly which rows were acknowledged.
//
// Invariants:
//
//   - Every worker gets both kinds: batch k goes to worker k mod N, and its kind
//     alternates every N batches.
//   - Row ids are <run id>-<n>, unique within a run; a row's content depends only
//     on the run id and n.
//   - The rate is an upper bound: batches are sent on a schedule, a slow cluster
//     makes the run fall behind it, and the schedule never bursts to catch up.
//   - A batch is reported acknowledged only on a 201 answer, which the worker sends
//     after the rows are durable.
//   - Requests go through pkg/client, which knows the routes.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
)

// Defaults of Config.
const (
	DefaultBatch         = 20
	DefaultConcurrency   = 4
	DefaultProgressEvery = time.Second
	DefaultRolloutStore  = "load_rollouts"
	DefaultGenericStore  = "load_events"
	requestTimeout       = 2 * time.Minute
)

// Kind is the kind of rows a batch holds.
type Kind string

// The kinds of rows.
const (
	KindRollout Kind = "rollout"
	KindGeneric Kind = "generic"
)

// Config is one run of the generator.
type Config struct {
	// Workers are the workers' HTTP addresses (host:port or http://host:port).
	Workers []string
	// Rate is rows per second over every worker and kind; 0 sends as fast as
	// Concurrency allows.
	Rate float64
	// Batch is rows per request (DefaultBatch); Concurrency requests in flight
	// (DefaultConcurrency).
	Batch, Concurrency int
	// Duration ends the run after this long; MaxRows after this many rows. Zero
	// means no bound: the run ends with ctx.
	Duration time.Duration
	MaxRows  int64
	// RolloutStore and GenericStore are the stores written, created if missing;
	// an empty name leaves that kind out. At least one is required.
	RolloutStore, GenericStore string
	// RunID prefixes every row id (default: the start time, so runs never collide).
	RunID string
	// Flush adds with ?flush=true: every request seals a generation.
	Flush bool
	// Client sends the requests (a client with a 2-minute timeout when nil).
	Client *http.Client

	// Progress, if set, gets a progress line every ProgressEvery, rewritten in
	// place when InPlace (a terminal), and a summary at the end.
	Progress      io.Writer
	ProgressEvery time.Duration
	InPlace       bool
	// OnBatch, if set, is called after every request (from several goroutines).
	OnBatch func(Batch)
}

// Batch is one add request and its outcome.
type Batch struct {
	Worker string // base URL
	Kind   Kind
	Store  string
	IDs    []string
	// Err is nil when the worker acknowledged the rows (201): they are durable.
	// Otherwise the rows may or may not have been written.
	Err error
}

// Stats sum up a run.
type Stats struct {
	Rows, RolloutRows, GenericRows int64 // acknowledged
	Requests, Failed               int64
	Elapsed                        time.Duration
	LastError                      string
}

// Run creates the stores if missing, then writes until ctx is done, Duration
// passed or MaxRows were sent. Failed requests are counted, not fatal; Run
// returns an error only if the configuration is wrong or a store cannot be made.
func Run(ctx context.Context, cfg Config) (Stats, error) {
	if err := cfg.check(); err != nil {
		return Stats{}, err
	}
	g := &generator{cfg: cfg}
	for _, base := range cfg.Workers {
		wc, err := client.New(base, client.WithHTTPClient(cfg.Client), client.WithTimeout(requestTimeout))
		if err != nil {
			return Stats{}, err
		}
		g.workers = append(g.workers, wc)
	}
	if err := EnsureStores(ctx, g.workers[0], cfg.RolloutStore, cfg.GenericStore); err != nil {
		return Stats{}, err
	}
	return g.run(ctx), nil
}

func (cfg *Config) check() error {
	if len(cfg.Workers) == 0 {
		return errors.New("loadgen: no workers")
	}
	urls := make([]string, 0, len(cfg.Workers))
	for _, w := range cfg.Workers {
		u, err := BaseURL(w)
		if err != nil {
			return err
		}
		urls = append(urls, u)
	}
	cfg.Workers = urls
	if cfg.RolloutStore == "" && cfg.GenericStore == "" {
		return errors.New("loadgen: no store: name a rollout store, a generic store, or both")
	}
	if cfg.Rate < 0 || cfg.Batch < 0 || cfg.Concurrency < 0 || cfg.MaxRows < 0 || cfg.Duration < 0 {
		return errors.New("loadgen: rate, batch, concurrency, rows and duration must not be negative")
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.RunID == "" {
		cfg.RunID = "load" + time.Now().UTC().Format("20060102T150405")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: requestTimeout}
	}
	return nil
}

// BaseURL turns a worker address (host:port or an http(s) URL) into a base URL.
func BaseURL(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("loadgen: worker address %q: want host:port or http://host:port", addr)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// DiscoverWorkers returns the HTTP addresses of the workers registered in etcd
// under prefix (P/workers/), in instance order.
func DiscoverWorkers(ctx context.Context, client *clientv3.Client, prefix string) ([]string, error) {
	workers, err := (&membership.Discovery{Client: client, Prefix: prefix}).Workers(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range workers {
		if w.HTTPAddr != "" {
			out = append(out, w.HTTPAddr)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no worker registered under %s", keys.Under(prefix).WorkersPrefix())
	}
	return out, nil
}

// EnsureStores creates the stores through the worker wc, accepting ones that
// exist. An empty name is skipped.
func EnsureStores(ctx context.Context, wc *client.Client, rolloutStore, genericStore string) error {
	create := func(k client.Kind, spec client.StoreSpec) error {
		_, err := wc.CreateStore(ctx, k, spec)
		var e *client.Error
		if err == nil || (errors.As(err, &e) && e.Status == http.StatusConflict) {
			return nil
		}
		return fmt.Errorf("create store %q: %w", spec.Name, err)
	}
	if rolloutStore != "" {
		if err := create(client.Rollouts, client.StoreSpec{Name: rolloutStore}); err != nil {
			return err
		}
	}
	if genericStore != "" {
		if err := create(client.Generic, client.StoreSpec{Name: genericStore, Schema: json.RawMessage(GenericSchema)}); err != nil {
			return err
		}
	}
	return nil
}

type generator struct {
	cfg     Config
	workers []*client.Client // cfg.Workers'
	kinds   []Kind

	rows, rollout, generic, requests, failed atomic.Int64
	// token is the highest causal token answered so far: every request carries it,
	// so the run's writes are ordered as it made them whatever the workers' clocks.
	token atomic.Uint64

	mu        sync.Mutex
	latencies []time.Duration // since the last progress line
	lastErr   string
	newErr    bool
}

func (g *generator) run(ctx context.Context) Stats {
	cfg := g.cfg
	if cfg.RolloutStore != "" {
		g.kinds = append(g.kinds, KindRollout)
	}
	if cfg.GenericStore != "" {
		g.kinds = append(g.kinds, KindGeneric)
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	start := time.Now()
	batches := make(chan int64)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for k := range batches {
				g.send(ctx, k)
			}
		})
	}
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() { defer close(progressDone); g.progress(start, stopProgress) }()

	g.dispatch(ctx, start, batches)
	close(batches)
	wg.Wait()
	close(stopProgress)
	<-progressDone

	st := g.stats(time.Since(start))
	if cfg.Progress != nil {
		if cfg.InPlace {
			fmt.Fprint(cfg.Progress, "\r\033[K")
		}
		fmt.Fprintf(cfg.Progress, "load done: %s\n", g.line(st, 0, nil))
		if st.LastError != "" {
			fmt.Fprintf(cfg.Progress, "load: last error: %s\n", st.LastError)
		}
	}
	return st
}

// dispatch hands out batch numbers on the rate's schedule until ctx is done or
// MaxRows are handed out. A schedule that fell behind restarts from now rather
// than bursting.
func (g *generator) dispatch(ctx context.Context, start time.Time, batches chan<- int64) {
	cfg := g.cfg
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(cfg.Batch) / cfg.Rate * float64(time.Second))
	}
	next := start
	timer := time.NewTimer(0)
	defer timer.Stop()
	for k := int64(0); ; k++ {
		if cfg.MaxRows > 0 && k*int64(cfg.Batch) >= cfg.MaxRows {
			return
		}
		if interval > 0 {
			if now := time.Now(); next.Before(now.Add(-interval)) {
				next = now
			}
			timer.Reset(time.Until(next))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			next = next.Add(interval)
		}
		select {
		case <-ctx.Done():
			return
		case batches <- k:
		}
	}
}

// send writes batch k.
func (g *generator) send(ctx context.Context, k int64) {
	cfg := g.cfg
	n := int64(len(cfg.Workers))
	wc := g.workers[k%n]
	kind := g.kinds[(k/n)%int64(len(g.kinds))]
	first := k * int64(cfg.Batch)
	count := int64(cfg.Batch)
	if cfg.MaxRows > 0 {
		count = min(count, cfg.MaxRows-first)
	}
	now := time.Now()
	ids := make([]string, 0, count)
	rows := make([]json.RawMessage, 0, count)
	for i := first; i < first+count; i++ {
		var row json.RawMessage
		if kind == KindRollout {
			row = RolloutRecord(cfg.RunID, i, now)
		} else {
			row = GenericRow(cfg.RunID, i, now)
		}
		rows = append(rows, row)
		ids = append(ids, fmt.Sprintf("%s-%d", cfg.RunID, i))
	}
	store, ck := cfg.RolloutStore, client.Rollouts
	if kind == KindGeneric {
		store, ck = cfg.GenericStore, client.Generic
	}
	// The request is not cancelled by ctx: a batch handed out is sent whole, so
	// that a run's end never leaves a request whose outcome is unknown.
	t0 := time.Now()
	res, err := wc.AddRows(context.WithoutCancel(ctx), ck, store, rows, client.AddOptions{Flush: cfg.Flush, After: g.token.Load()})
	took := time.Since(t0)
	for cur := g.token.Load(); res.Seq > cur; cur = g.token.Load() {
		if g.token.CompareAndSwap(cur, res.Seq) {
			break
		}
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", wc.URL(), err)
	}
	g.requests.Add(1)
	g.mu.Lock()
	g.latencies = append(g.latencies, took)
	if err != nil {
		g.lastErr, g.newErr = err.Error(), true
	}
	g.mu.Unlock()
	if err != nil {
		g.failed.Add(1)
	} else {
		g.rows.Add(count)
		if kind == KindRollout {
			g.rollout.Add(count)
		} else {
			g.generic.Add(count)
		}
	}
	if cfg.OnBatch != nil {
		cfg.OnBatch(Batch{Worker: wc.URL(), Kind: kind, Store: store, IDs: ids, Err: err})
	}
}

func (g *generator) stats(elapsed time.Duration) Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{
		Rows: g.rows.Load(), RolloutRows: g.rollout.Load(), GenericRows: g.generic.Load(),
		Requests: g.requests.Load(), Failed: g.failed.Load(), Elapsed: elapsed, LastError: g.lastErr,
	}
}

// progress writes a progress line every ProgressEvery until stop closes.
func (g *generator) progress(start time.Time, stop <-chan struct{}) {
	cfg := g.cfg
	if cfg.Progress == nil {
		return
	}
	t := time.NewTicker(cfg.ProgressEvery)
	defer t.Stop()
	lastRows, lastAt := int64(0), start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			st := g.stats(now.Sub(start))
			rate := float64(st.Rows-lastRows) / now.Sub(lastAt).Seconds()
			lastRows, lastAt = st.Rows, now
			g.mu.Lock()
			lat := g.latencies
			g.latencies = nil
			errText := ""
			if g.newErr {
				errText, g.newErr = g.lastErr, false
			}
			g.mu.Unlock()
			line := g.line(st, rate, lat)
			if cfg.InPlace {
				if errText != "" {
					fmt.Fprintf(cfg.Progress, "\r\033[Kload: error: %s\n", errText)
				}
				fmt.Fprintf(cfg.Progress, "\r\033[Kload %s", line)
			} else {
				if errText != "" {
					fmt.Fprintf(cfg.Progress, "load: error: %s\n", errText)
				}
				fmt.Fprintf(cfg.Progress, "load %s\n", line)
			}
		}
	}
}

// line is the text of a progress line; rate 0 means the average of the run.
func (g *generator) line(st Stats, rate float64, lat []time.Duration) string {
	if rate == 0 && st.Elapsed > 0 {
		rate = float64(st.Rows) / st.Elapsed.Seconds()
	}
	target := "max"
	if g.cfg.Rate > 0 {
		target = fmt.Sprintf("%.0f", g.cfg.Rate)
	}
	s := fmt.Sprintf("%5.0fs  rows %d (rollout %d, generic %d) to %d workers  %.0f rows/s (target %s)  requests %d  failed %d",
		st.Elapsed.Seconds(), st.Rows, st.RolloutRows, st.GenericRows, len(g.cfg.Workers), rate, target, st.Requests, st.Failed)
	if len(lat) > 0 {
		slices.Sort(lat)
		p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(time.Millisecond) }
		s += fmt.Sprintf("  latency p50 %s p99 %s", p(0.5), p(0.99))
	}
	return s
}
