package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// errWatchClosed means a watch channel closed without an error: its context
// ended, or the client closed.
var errWatchClosed = errors.New("etcd watch closed")

// History bounds.
const (
	// HistoryWindow is how far back the charts look.
	HistoryWindow = time.Hour
	// clusterPoints and storePoints bound the points kept per series.
	clusterPoints = 720
	storePoints   = 240
	// sampleEvery extends the cluster series while nothing changes, so a quiet
	// hour still draws as a line to now.
	sampleEvery = 30 * time.Second
	// subscriberBuffer is how many task events a slow browser may lag before its
	// stream is closed (it reconnects and reloads).
	subscriberBuffer = 64
)

// point is one sample of a series.
type point struct {
	at time.Time
	v  float64
}

// series is a bounded, time-ordered list of samples.
type series struct {
	pts []point
	max int
}

// add appends a sample and drops those older than the window (keeping the last
// one before it, where a step line starts) or beyond the bound.
func (s *series) add(at time.Time, v float64) {
	s.pts = append(s.pts, point{at, v})
	cut := 0
	for cut+1 < len(s.pts) && s.pts[cut+1].at.Before(at.Add(-HistoryWindow)) {
		cut++
	}
	if over := len(s.pts) - cut - s.max; over > 0 {
		cut += over
	}
	if cut > 0 {
		s.pts = slices.Delete(s.pts, 0, cut)
	}
}

func (s *series) copy() []point { return slices.Clone(s.pts) }

// storeHistory is one target's samples.
type storeHistory struct {
	pending, rows, fragments series
}

// taskEvent is one change of a task record, as sent to browsers.
type taskEvent struct {
	Task    tasks.Task `json:"task"`
	Deleted bool       `json:"deleted,omitempty"`
}

// Feed mirrors the stats rows and the recent tasks from etcd watches, keeps their
// history, and fans task changes out to subscribers. Its zero value is not usable:
// NewFeed builds one, Run feeds it.
type Feed struct {
	client *clientv3.Client
	keys   keys.Schema
	now    func() time.Time
	log    *slog.Logger
	// started is when the history starts: nothing before it was watched.
	started time.Time

	mu      sync.Mutex
	loaded  bool
	rows    map[registry.Target]stats.Row
	pending series // cluster-wide pending generations
	stores  map[registry.Target]*storeHistory
	// last is the most recent finished task per target and kind; recent holds
	// the live tasks and those finished within HistoryWindow.
	last   map[registry.Target]map[tasks.Kind]tasks.Task
	recent map[string]tasks.Task
	subs   map[chan taskEvent]struct{}
	// stopped is set when Run returns.
	stopped bool
}

// NewFeed returns a feed of the keys under keys.Prefix().
func NewFeed(client *clientv3.Client, keys keys.Schema, now func() time.Time, log *slog.Logger) *Feed {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Feed{
		client: client, keys: keys, now: now, log: log, started: now(),
		rows:    map[registry.Target]stats.Row{},
		pending: series{max: clusterPoints},
		stores:  map[registry.Target]*storeHistory{},
		last:    map[registry.Target]map[tasks.Kind]tasks.Task{},
		recent:  map[string]tasks.Task{},
		subs:    map[chan taskEvent]struct{}{},
	}
}

// Run loads the rows and tasks, then follows their changes until ctx is done. A
// watch that fails (etcd away, or its revision compacted) is restarted by a
// fresh load after a backoff, so nothing is missed for long.
//
// When Run returns, every subscriber's channel is closed and later ones get a
// closed channel: event streams end, so the server's graceful shutdown does not
// wait for browsers to go away.
func (f *Feed) Run(ctx context.Context) {
	defer f.stop()
	backoff := time.Second
	for ctx.Err() == nil {
		rev, err := f.load(ctx)
		if err == nil {
			backoff = time.Second
			err = f.follow(ctx, rev)
		}
		if ctx.Err() != nil {
			return
		}
		f.log.Warn("dashboard feed interrupted; reloading", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// load reads every stats row and task at one revision and replaces the mirror.
func (f *Feed) load(ctx context.Context) (int64, error) {
	sresp, err := f.client.Get(ctx, f.keys.StatsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	rev := sresp.Header.Revision
	tresp, err := f.client.Get(ctx, f.keys.TasksPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return 0, err
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = map[registry.Target]stats.Row{}
	for _, kv := range sresp.Kvs {
		if r, ok := f.decodeRow(kv.Key, kv.Value); ok {
			f.rows[r.Target] = r
			f.sampleStore(now, r)
		}
	}
	f.last = map[registry.Target]map[tasks.Kind]tasks.Task{}
	f.recent = map[string]tasks.Task{}
	for _, kv := range tresp.Kvs {
		if t, ok := f.decodeTask(kv.Key, kv.Value); ok {
			f.noteTask(now, t)
		}
	}
	f.samplePending(now)
	f.loaded = true
	return rev, nil
}

// follow applies the changes after rev until a watch fails or ctx is done.
func (f *Feed) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	stats := f.client.Watch(wctx, f.keys.StatsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	taskCh := f.client.Watch(wctx, f.keys.TasksPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			f.mu.Lock()
			f.samplePending(f.now())
			f.pruneRecent(f.now())
			f.mu.Unlock()
		case resp, ok := <-stats:
			if !ok {
				return errWatchClosed
			}
			if err := resp.Err(); err != nil {
				return err
			}
			f.applyStats(resp.Events)
		case resp, ok := <-taskCh:
			if !ok {
				return errWatchClosed
			}
			if err := resp.Err(); err != nil {
				return err
			}
			f.applyTasks(resp.Events)
		}
	}
}

func (f *Feed) applyStats(events []*clientv3.Event) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range events {
		if ev.Type == clientv3.EventTypeDelete {
			// The key is where the target's text enters: parsed here, once. A key
			// that names no target was never mirrored (its row did not decode).
			if target, err := registry.ParseTarget(strings.TrimPrefix(string(ev.Kv.Key), f.keys.StatsPrefix())); err == nil {
				delete(f.rows, target)
				delete(f.stores, target)
			}
			continue
		}
		if r, ok := f.decodeRow(ev.Kv.Key, ev.Kv.Value); ok {
			f.rows[r.Target] = r
			f.sampleStore(now, r)
		}
	}
	f.samplePending(now)
}

func (f *Feed) applyTasks(events []*clientv3.Event) {
	now := f.now()
	var out []taskEvent
	f.mu.Lock()
	for _, ev := range events {
		if ev.Type == clientv3.EventTypeDelete {
			id := strings.TrimPrefix(string(ev.Kv.Key), f.keys.TasksPrefix())
			if t, ok := f.recent[id]; ok {
				delete(f.recent, id)
				out = append(out, taskEvent{Task: t, Deleted: true})
			}
			continue
		}
		if t, ok := f.decodeTask(ev.Kv.Key, ev.Kv.Value); ok {
			f.noteTask(now, t)
			out = append(out, taskEvent{Task: t})
		}
	}
	for ch := range f.subs {
		f.send(ch, out)
	}
	f.mu.Unlock()
}

// send queues events on a subscriber's channel, and closes the channel of a
// subscriber too slow to keep up: its browser reconnects and reloads the page's
// tasks, which is cheaper than buffering without bound. Callers hold f.mu.
func (f *Feed) send(ch chan taskEvent, events []taskEvent) {
	for _, e := range events {
		select {
		case ch <- e:
		default:
			delete(f.subs, ch)
			close(ch)
			return
		}
	}
}

// decodeRow decodes a stats row; a corrupt one is logged and skipped (the
// scanner rewrites it).
func (f *Feed) decodeRow(key, value []byte) (stats.Row, bool) {
	var r stats.Row
	if err := json.Unmarshal(value, &r); err != nil || r.Target.IsZero() {
		f.log.Warn("dashboard: stats row skipped: it does not decode", "key", string(key), "err", err)
		return stats.Row{}, false
	}
	return r, true
}

func (f *Feed) decodeTask(key, value []byte) (tasks.Task, bool) {
	var t tasks.Task
	if err := json.Unmarshal(value, &t); err != nil || t.ID == "" {
		f.log.Warn("dashboard: task record skipped: it does not decode", "key", string(key), "err", err)
		return tasks.Task{}, false
	}
	return t, true
}

// Callers hold f.mu for the methods below.

func (f *Feed) sampleStore(now time.Time, r stats.Row) {
	h := f.stores[r.Target]
	if h == nil {
		h = &storeHistory{pending: series{max: storePoints}, rows: series{max: storePoints}, fragments: series{max: storePoints}}
		f.stores[r.Target] = h
	}
	h.pending.add(now, float64(r.PendingWALGenerations))
	h.rows.add(now, float64(r.RowCount))
	h.fragments.add(now, float64(r.FragmentCount))
}

func (f *Feed) samplePending(now time.Time) {
	total := 0
	for _, r := range f.rows {
		total += r.PendingWALGenerations
	}
	f.pending.add(now, float64(total))
}

func (f *Feed) noteTask(now time.Time, t tasks.Task) {
	if t.State.Finished() {
		byKind := f.last[t.Target]
		if byKind == nil {
			byKind = map[tasks.Kind]tasks.Task{}
			f.last[t.Target] = byKind
		}
		if prev, ok := byKind[t.Kind]; !ok || !t.FinishedAt.Before(prev.FinishedAt) {
			byKind[t.Kind] = t
		}
	}
	if t.State.Live() || now.Sub(t.FinishedAt) <= HistoryWindow {
		f.recent[t.ID] = t
	} else {
		delete(f.recent, t.ID)
	}
}

func (f *Feed) pruneRecent(now time.Time) {
	for id, t := range f.recent {
		if t.State.Finished() && now.Sub(t.FinishedAt) > HistoryWindow {
			delete(f.recent, id)
		}
	}
}

// stop closes every subscriber's channel and refuses new subscribers.
func (f *Feed) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	for ch := range f.subs {
		delete(f.subs, ch)
		close(ch)
	}
}

// subscribe returns a channel of task changes; cancel releases it. The channel
// is closed when the subscriber falls behind or the feed stops.
func (f *Feed) subscribe() (<-chan taskEvent, func()) {
	ch := make(chan taskEvent, subscriberBuffer)
	f.mu.Lock()
	if f.stopped {
		close(ch)
	} else {
		f.subs[ch] = struct{}{}
	}
	f.mu.Unlock()
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[ch]; ok {
			delete(f.subs, ch)
			close(ch)
		}
	}
}

// snapshot is what the pages read of the feed, copied under the lock.
type snapshot struct {
	Loaded  bool
	Rows    map[registry.Target]stats.Row
	Pending []point
	Recent  []tasks.Task
	Last    map[registry.Target]map[tasks.Kind]tasks.Task
}

func (f *Feed) snapshot() snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := snapshot{Loaded: f.loaded, Rows: make(map[registry.Target]stats.Row, len(f.rows)), Pending: f.pending.copy(),
		Last: make(map[registry.Target]map[tasks.Kind]tasks.Task, len(f.last))}
	for k, r := range f.rows {
		s.Rows[k] = r
	}
	for k, m := range f.last {
		c := make(map[tasks.Kind]tasks.Task, len(m))
		for kk, t := range m {
			c[kk] = t
		}
		s.Last[k] = c
	}
	for _, t := range f.recent {
		s.Recent = append(s.Recent, t)
	}
	slices.SortFunc(s.Recent, func(a, b tasks.Task) int { return strings.Compare(b.ID, a.ID) })
	return s
}

// storeSeries returns target's history.
func (f *Feed) storeSeries(target registry.Target) (pending, rows, fragments []point) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.stores[target]
	if h == nil {
		return nil, nil, nil
	}
	return h.pending.copy(), h.rows.copy(), h.fragments.copy()
}
