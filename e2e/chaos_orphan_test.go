//go:build chaos

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// The orphan campaign's kill schedule: a SIGKILL every orphanKillMin plus up to
// orphanKillJitter, and a worker that returns under its own id does so within
// orphanReturnMax of its kill: before its lease (4 s) and ORPHAN_GRACE (3 s) ran
// out, while its shard is being adopted, or after it was retired (an adoption
// under churn takes tens of seconds: the RELIABILITY.md figures).
const (
	orphanKillMin    = 3 * time.Second
	orphanKillJitter = 5 * time.Second
	orphanReturnMax  = 30 * time.Second
	// orphanSegment is how many requests of one client go to a store before it
	// moves on to the next: two clients of two rows keep a store well within
	// one listing page (listIDs), however long the campaign runs.
	orphanSegment = 1500
)

// The fates of a killed worker.
const (
	fateGone   = "never restarted"
	fateNewID  = "restarted under a new id"
	fateSameID = "restarted under its id"
)

// TestChaosOrphanedShardsAreAdoptedAndLoseNoAcknowledgedRow is the orphan
// campaign: three workers and a master (ORPHAN_GRACE 3s) under adds from two
// clients through whichever workers are live (a third of the requests with
// ?flush=true), and for TIDEMARK_CHAOS_ORPHAN_DURATION (2m) a SIGKILL of a random
// worker every 3-8 s. A third of the killed workers never come back, a third are
// replaced at once by a worker under a new id (a Deployment's new pod), a third
// come back under their own id 0-30 s later, so some return before their shard
// is orphaned, some while it is being adopted, some after it was retired. The cluster keeps three workers (a new id joins
// when one is missing) and never fewer than one.
//
// Measured per kill: the time until every row the killed process acknowledged is
// listed through every other live worker (its unsealed rows need the adoption, or
// its return, to be sealed), and, for the workers that do not come back under
// their id, the time until their shard is retired (out of the stats rows'
// active_shards). At the end every acknowledged row must be listed exactly once
// through every live worker, nothing pending, and only live workers' shards
// active.
//
// The guarded failures: a shard whose worker never returns stranding its unsealed
// rows and its generations (DESIGN.md problem 5), an adoption that repeats rows a
// merge already committed, and a worker that returns during its shard's adoption
// losing or repeating rows (the adopter fences it, or it fences the adopter).
func TestChaosOrphanedShardsAreAdoptedAndLoseNoAcknowledgedRow(t *testing.T) {
	cc := startChaosReport(t, "orphaned shards")
	duration := chaosDuration(t, "TIDEMARK_CHAOS_ORPHAN_DURATION", 2*time.Minute)
	rng := chaosRand(t)
	c := newCluster(t, nil, map[string]string{
		"ORPHAN_GRACE": orphanGrace,
		// A shard's last generation must not wait for a second one once the
		// clients stop.
		"MERGE_WAL_MIN_GENERATIONS": "1",
	})
	started := time.Now()
	m := c.startMaster("m1", nil)

	f := &fleet{}
	led := newOrphanLedger()
	nextID := 1
	startNew := func() *workerProc {
		w := c.startWorker(fmt.Sprintf("w%d", nextID))
		nextID++
		led.born(w)
		f.add(w)
		return w
	}
	for range 3 {
		startNew()
	}

	client := &http.Client{Timeout: 30 * time.Second}
	stores := &orphanStores{c: c, f: f, client: client}
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var load sync.WaitGroup
	for g := range 2 {
		load.Go(func() {
			addThroughFleet(ctx, client, f, g, func(n int64) string { return stores.ensure(ctx, t, n/orphanSegment) }, led.record)
		})
	}
	mon := &orphanMonitor{c: c, m: m, f: f, led: led, stores: stores}
	monCtx, stopMon := context.WithCancel(context.Background())
	defer stopMon()
	monDone := make(chan struct{})
	go func() { defer close(monDone); mon.run(monCtx) }()

	testwait.ForEvery(c.t, 30*time.Second, poll, "the clients have rows acknowledged", func() (bool, string) {
		a, _ := led.counts()
		return a > 0, fmt.Sprintf("%d acked", a)
	})

	type returning struct {
		id string
		at time.Time
	}
	var (
		returns   []returning
		fates     = map[string]int{}
		delays    []time.Duration
		skipped   int
		killPhase = time.Now()
		deadline  = killPhase.Add(duration)
		nextKill  = killPhase.Add(orphanKillMin + time.Duration(rng.Int64N(int64(orphanKillJitter))))
	)
	for time.Now().Before(deadline) || len(returns) > 0 {
		for len(returns) > 0 && !time.Now().Before(returns[0].at) {
			w := c.startWorker(returns[0].id)
			led.born(w)
			f.add(w)
			returns = returns[1:]
		}
		if now := time.Now(); now.Before(deadline) && !now.Before(nextKill) {
			nextKill = now.Add(orphanKillMin + time.Duration(rng.Int64N(int64(orphanKillJitter))))
			if len(f.live())+len(returns) < 3 {
				startNew()
			}
			live := f.live()
			if len(live) < 2 {
				skipped++ // the last live worker stays: the clients need one
				continue
			}
			victim := live[rng.IntN(len(live))]
			fate := []string{fateGone, fateNewID, fateSameID}[rng.IntN(3)]
			if fate == fateGone && len(live) < 3 {
				fate = fateNewID
			}
			f.remove(victim.id)
			victim.kill()
			mon.killed(led.died(victim.id), fate, time.Now())
			fates[fate]++
			acked, maybe := led.counts()
			t.Logf("%s killed (%s); %d rows acknowledged, %d maybe so far", victim.id, fate, acked, maybe)
			switch fate {
			case fateNewID:
				startNew()
			case fateSameID:
				d := time.Duration(rng.Int64N(int64(orphanReturnMax)))
				delays = append(delays, d)
				returns = append(returns, returning{victim.id, time.Now().Add(d)})
				slices.SortFunc(returns, func(a, b returning) int { return a.at.Compare(b.at) })
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	killsTook := time.Since(killPhase)
	stopLoad()
	load.Wait()
	loadStopped := time.Now()

	// Drain: the survivors' sweepers seal, the master merges and has the last
	// orphans adopted. The wait does not fail the test by itself: the figures say
	// what is wrong, and the checks after them fail it.
	var (
		n       rowCounts
		status  string
		drained time.Duration
	)
	for {
		n, status = orphanCompare(c, m, f, led, stores.names())
		if status == "" && mon.settled() {
			drained = time.Since(loadStopped)
			break
		}
		if time.Since(loadStopped) > 3*time.Minute {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopMon()
	<-monDone

	acked, maybe := led.counts()
	cc.addf("kill phase", "%s: a SIGKILL of a random worker every %s-%s, ORPHAN_GRACE %s, worker lease TTL 4s, FLUSH_INTERVAL 1s",
		killsTook.Round(time.Second), orphanKillMin, orphanKillMin+orphanKillJitter, orphanGrace)
	cc.addf("kills: never restarted / new id / own id", "%d / %d / %d", fates[fateGone], fates[fateNewID], fates[fateSameID])
	if len(delays) > 0 {
		cc.addf("own-id returns after the kill, min / max", "%s / %s", percentile(delays, 0).Round(100*time.Millisecond), percentile(delays, 100).Round(100*time.Millisecond))
	}
	cc.add("workers started in all", nextID-1+fates[fateSameID])
	cc.addf("load", "2 clients, 2 rows a request, every third with ?flush=true, through the live workers in turn; %d stores", len(stores.names()))
	cc.add("acknowledged rows", acked)
	cc.add("maybe rows (add failed or in flight at a kill)", maybe)
	cc.add("adds answered, by status (0: no answer)", fmt.Sprint(led.statuses()))
	cc.add("lost acknowledged rows", n.lost)
	cc.add("duplicated rows", n.dup)
	cc.add("rows never sent", n.unknown)
	cc.add("maybe rows present (at most once each)", n.maybePresent)
	for _, fs := range [][]string{{fateGone, fateNewID}, {fateSameID}} {
		ds, late, open := mon.visibleAfter(fs...)
		cc.addf("kill to its acknowledged rows listed through every other live worker, p50 / max ("+strings.Join(fs, " or ")+")",
			"%s / %s over %d kills (%d of them left rows the first look after the kill did not find); %d never",
			percentile(ds, 50).Round(100*time.Millisecond), percentile(ds, 100).Round(100*time.Millisecond), len(ds), late, open)
	}
	ds, open := mon.retiredAfter()
	cc.addf("kill to shard retired (out of active_shards), p50 / max (never restarted or new id)",
		"%s / %s over %d kills; %d never", percentile(ds, 50).Round(100*time.Millisecond), percentile(ds, 100).Round(100*time.Millisecond), len(ds), open)
	if drained > 0 {
		cc.add("drain after the clients stopped (merged, exactly once, only live shards active, every kill measured)", drained.Round(100*time.Millisecond))
	} else {
		cc.add("drain after the clients stopped (merged, exactly once, only live shards active, every kill measured)", "not within 3m: "+status)
	}
	cc.add("worker log lines about a fenced WAL writer (an adopter and a returned worker taking a shard from each other)", fencedLines(c))
	adopted, tasksDone, tasksFailed, adoptFailed := orphanTasks(c)
	cc.add("shards adopted (merge_wal task details)", adopted)
	cc.addf("merge_wal tasks done / failed, of them with an adoption error", "%d / %d, %d", tasksDone, tasksFailed, adoptFailed)
	cc.add("total time (from the cluster start)", time.Since(started).Round(time.Second))
	if skipped > 0 {
		cc.add("kills skipped (one worker live)", skipped)
	}

	if acked == 0 {
		t.Fatal("no row was acknowledged")
	}
	if n.lost+n.dup+n.unknown > 0 {
		t.Errorf("%d acknowledged rows lost, %d duplicated, %d never sent", n.lost, n.dup, n.unknown)
	}
	if status != "" {
		t.Errorf("not drained 3m after the clients stopped: %s", status)
	}
	if _, _, open := mon.visibleAfter(fateGone, fateNewID, fateSameID); open > 0 {
		t.Errorf("%d killed workers' acknowledged rows never all became listed through the other workers", open)
	}
	if _, open := mon.retiredAfter(); open > 0 {
		t.Errorf("%d shards of workers that never came back under their id were never retired", open)
	}
}

// life is one process of a worker: the rows it acknowledged, by store.
type life struct {
	id    string
	mu    sync.Mutex
	acked map[string][]string
}

func (l *life) ackedByStore() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]string, len(l.acked))
	for s, ids := range l.acked {
		out[s] = slices.Clone(ids)
	}
	return out
}

// orphanLedger is what the clients were answered: per store, acknowledged and
// maybe ids, and per worker process, the ids it acknowledged.
type orphanLedger struct {
	mu       sync.Mutex
	stores   map[string]*rowLedger
	current  map[string]*life // worker id -> its live process
	byStatus map[int]int
}

func newOrphanLedger() *orphanLedger {
	return &orphanLedger{stores: map[string]*rowLedger{}, current: map[string]*life{}, byStatus: map[int]int{}}
}

// born starts the life of w's new process. Until the next born of its id, a 200
// from w is its: an answer of the killed process is read before it died, and the
// new one starts long after.
func (o *orphanLedger) born(w *workerProc) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.current[w.id] = &life{id: w.id, acked: map[string][]string{}}
}

// died returns the life of id's killed process.
func (o *orphanLedger) died(id string) *life {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.current[id]
}

func (o *orphanLedger) record(w *workerProc, store string, ids []string, status int) {
	o.mu.Lock()
	l := o.stores[store]
	if l == nil {
		l = &rowLedger{}
		o.stores[store] = l
	}
	o.byStatus[status]++
	lf := o.current[w.id]
	o.mu.Unlock()
	l.record(w, store, ids, status)
	if status == http.StatusCreated && lf != nil {
		lf.mu.Lock()
		lf.acked[store] = append(lf.acked[store], ids...)
		lf.mu.Unlock()
	}
}

func (o *orphanLedger) store(name string) (acked, maybe map[string]bool) {
	o.mu.Lock()
	l := o.stores[name]
	o.mu.Unlock()
	if l == nil {
		return nil, nil
	}
	return l.snapshot()
}

func (o *orphanLedger) counts() (acked, maybe int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range o.stores {
		a, m := l.counts()
		acked, maybe = acked+a, maybe+m
	}
	return acked, maybe
}

func (o *orphanLedger) statuses() map[int]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[int]int{}
	for k, v := range o.byStatus {
		out[k] = v
	}
	return out
}

// orphanStores creates the campaign's stores as the clients reach them.
type orphanStores struct {
	c      *cluster
	f      *fleet
	client *http.Client
	mu     sync.Mutex
	made   []string
}

// ensure returns the name of segment seg's store, creating it through a live
// worker first if no client has (201, or 409 when it exists).
func (s *orphanStores) ensure(ctx context.Context, t *testing.T, seg int64) string {
	name := fmt.Sprintf("chaos_orphan_%d", seg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.made, name) {
		return name
	}
	for i := 0; ctx.Err() == nil; i++ {
		if w := s.f.pick(); w != nil {
			a, err := send(s.client, http.MethodPost, w.url()+"/api/v1/generic", fmt.Sprintf(`{"name":%q,"schema":%s}`, name, churnSpec))
			if err == nil && (a.status == http.StatusCreated || a.status == http.StatusConflict) {
				s.made = append(s.made, name)
				return name
			}
			if i > 100 {
				t.Errorf("create store %s: %d %s %v", name, a.status, a.body, err)
				return name
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return name
}

func (s *orphanStores) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.made)
}

// orphanKill is one kill and what became of it.
type orphanKill struct {
	l       *life
	fate    string
	at      time.Time
	visible time.Duration // 0: not yet
	retired time.Duration // 0: not yet (or not measured: fateSameID)
	nothing bool          // the process had acknowledged nothing
	looks   int           // polls that looked for its rows
}

// orphanMonitor measures each kill by polling the other live workers' listings
// and the master's stats rows every orphanPoll: a figure is the kill's time to
// the first poll that saw it, so it overstates by up to a poll.
type orphanMonitor struct {
	c      *cluster
	m      *masterProc
	f      *fleet
	led    *orphanLedger
	stores *orphanStores

	mu    sync.Mutex
	kills []*orphanKill
}

const orphanPoll = 500 * time.Millisecond

func (o *orphanMonitor) killed(l *life, fate string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kills = append(o.kills, &orphanKill{l: l, fate: fate, at: at})
}

func (o *orphanMonitor) run(ctx context.Context) {
	t := time.NewTicker(orphanPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			o.poll()
		}
	}
}

// poll looks once at every kill not yet measured.
func (o *orphanMonitor) poll() {
	o.mu.Lock()
	var open []*orphanKill
	for _, k := range o.kills {
		if !k.done() {
			open = append(open, k)
		}
	}
	o.mu.Unlock()
	if len(open) == 0 {
		return
	}
	now := time.Now()
	rows := orphanStats(o.c, o.m)
	listings := map[string]map[string]bool{} // store \x00 worker -> ids
	list := func(store string, w *workerProc) map[string]bool {
		key := store + "\x00" + w.id
		if ids, ok := listings[key]; ok {
			return ids
		}
		ids, err := listIDs(w.url(), loadgen.KindGeneric, store)
		var set map[string]bool
		if err == nil {
			set = make(map[string]bool, len(ids))
			for _, id := range ids {
				set[id] = true
			}
		}
		listings[key] = set
		return set
	}
	for _, k := range open {
		acked := k.l.ackedByStore()
		if k.visible == 0 {
			o.mu.Lock()
			k.looks++
			o.mu.Unlock()
			var others []*workerProc
			for _, w := range o.f.live() {
				if w.id != k.l.id {
					others = append(others, w)
				}
			}
			all := len(others) > 0
			for store, ids := range acked {
				for _, w := range others {
					set := list(store, w)
					for _, id := range ids {
						if !set[id] {
							all = false
							break
						}
					}
				}
			}
			if all {
				o.mu.Lock()
				k.visible, k.nothing = now.Sub(k.at), len(acked) == 0
				o.mu.Unlock()
			}
		}
		if k.fate != fateSameID && k.retired == 0 && rows != nil {
			retired := true
			for _, store := range o.stores.names() {
				r, ok := rows[target(loadgen.KindGeneric, store)]
				_, wrote := acked[store]
				switch {
				case wrote && (!ok || !r.ScannedAt.After(k.at)):
					retired = false // no look at its shard since the kill yet
				case ok && slices.Contains(r.ActiveShards, k.l.id):
					retired = false
				}
			}
			if retired {
				o.mu.Lock()
				k.retired = now.Sub(k.at)
				o.mu.Unlock()
			}
		}
	}
}

func (k *orphanKill) done() bool {
	return k.visible > 0 && (k.fate == fateSameID || k.retired > 0)
}

// settled reports whether every kill is measured.
func (o *orphanMonitor) settled() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range o.kills {
		if !k.done() {
			return false
		}
	}
	return true
}

// visibleAfter returns the kill-to-visible times of the kills of those fates whose
// process had acknowledged rows, how many of those were not visible at the first
// look (rows only in WAL entries: a ?flush=true add seals every row before it, so
// a process may die with nothing unsealed), and how many were never all visible.
func (o *orphanMonitor) visibleAfter(fates ...string) (ds []time.Duration, late, open int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range o.kills {
		switch {
		case !slices.Contains(fates, k.fate) || k.nothing:
		case k.visible == 0:
			open++
		default:
			ds = append(ds, k.visible)
			if k.looks > 1 {
				late++
			}
		}
	}
	return ds, late, open
}

// retiredAfter returns the kill-to-retired times of the workers that did not come
// back under their id and had acknowledged rows (so have a shard), and how many
// shards were never retired.
func (o *orphanMonitor) retiredAfter() (ds []time.Duration, open int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range o.kills {
		switch {
		case k.fate == fateSameID || k.nothing:
		case k.retired == 0:
			open++
		default:
			ds = append(ds, k.retired)
		}
	}
	return ds, open
}

// orphanRow is the part of a stats row the campaign reads.
type orphanRow struct {
	PendingWALGenerations int            `json:"pending_wal_generations"`
	PendingByShard        map[string]int `json:"pending_by_shard"`
	ActiveShards          []string       `json:"active_shards"`
	RowCount              int64          `json:"row_count"`
	ScannedAt             time.Time      `json:"scanned_at"`
}

// orphanStats returns the master's stats rows by target, nil when it does not answer.
func orphanStats(c *cluster, m *masterProc) map[string]orphanRow {
	code, body, err := c.get(c.base(m.httpAddr) + "/api/v1/stats?limit=1000")
	if err != nil || code != http.StatusOK {
		return nil
	}
	var page struct {
		Stats []struct {
			Target string `json:"target"`
			orphanRow
		} `json:"stats"`
	}
	if json.Unmarshal(body, &page) != nil {
		return nil
	}
	out := map[string]orphanRow{}
	for _, r := range page.Stats {
		out[r.Target] = r.orphanRow
	}
	return out
}

// orphanCompare lists every store through every live worker and compares it with
// the ledger: the sums over the stores of the worst worker's counts, and "" when
// every store is merged, readable exactly once everywhere and has only live
// workers' shards active, else what is not yet.
func orphanCompare(c *cluster, m *masterProc, f *fleet, led *orphanLedger, stores []string) (rowCounts, string) {
	var total rowCounts
	var status []string
	rows := orphanStats(c, m)
	live := f.ids()
	for _, store := range stores {
		acked, maybe := led.store(store)
		var worst rowCounts
		listed := -1
		for _, w := range f.live() {
			ids, err := listIDs(w.url(), loadgen.KindGeneric, store)
			if err != nil {
				status = append(status, fmt.Sprintf("%s through %s: %v", store, w.id, err))
				continue
			}
			n := countRows(ids, acked, maybe)
			worst = rowCounts{max(worst.lost, n.lost), max(worst.dup, n.dup), max(worst.unknown, n.unknown), max(worst.maybePresent, n.maybePresent)}
			if n.lost+n.dup+n.unknown > 0 {
				status = append(status, fmt.Sprintf("%s through %s: %+v", store, w.id, n))
			}
			if listed >= 0 && listed != len(ids) {
				status = append(status, fmt.Sprintf("%s: workers list %d and %d rows", store, listed, len(ids)))
			}
			listed = len(ids)
		}
		total = rowCounts{total.lost + worst.lost, total.dup + worst.dup, total.unknown + worst.unknown, total.maybePresent + worst.maybePresent}
		r, ok := rows[target(loadgen.KindGeneric, store)]
		var stranded []string
		for _, s := range r.ActiveShards {
			if !slices.Contains(live, s) {
				stranded = append(stranded, s)
			}
		}
		if !ok || r.PendingWALGenerations > 0 || r.RowCount != int64(listed) || len(stranded) > 0 {
			status = append(status, fmt.Sprintf("%s: stats %d rows, %d pending %v, active shards of no live worker %v; workers list %d rows",
				store, r.RowCount, r.PendingWALGenerations, r.PendingByShard, stranded, listed))
		}
	}
	return total, strings.Join(status, "; ")
}

var adoptedDetail = regexp.MustCompile(`adopted (\d+) orphaned shards?`)

// orphanTasks sums the merge_wal tasks' adoptions and outcomes, as etcd holds them.
func orphanTasks(c *cluster) (adopted, done, failed, adoptFailed int) {
	for _, tk := range c.tasksNow() {
		if tk.Kind != "merge_wal" {
			continue
		}
		text := tk.Detail + " " + tk.Error
		if mt := adoptedDetail.FindStringSubmatch(text); mt != nil {
			n, _ := strconv.Atoi(mt[1])
			adopted += n
		}
		switch tk.State {
		case "done":
			done++
		case "failed":
			failed++
			if strings.Contains(tk.Error, "adopt shard") {
				adoptFailed++
			}
		}
	}
	return adopted, done, failed, adoptFailed
}

// fencedLines counts the workers' log lines that mention fencing of a WAL writer.
func fencedLines(c *cluster) int {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	n := 0
	seen := map[string]bool{}
	for _, p := range procs {
		if seen[p.logPath] || !strings.HasPrefix(p.name, "w") {
			continue
		}
		seen[p.logPath] = true // a worker id's processes append to one log
		data, _ := os.ReadFile(p.logPath)
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(strings.ToLower(line), "fenced") {
				n++
			}
		}
	}
	return n
}
