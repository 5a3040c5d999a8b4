package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

// feedVersion is one version of a row: its value and its _seq.
type feedVersion struct {
	n   int64
	seq uint64
}

// feedConsumer is one named consumer of the history test, following the store
// through any live worker, committing now and then, and losing its state (a
// consumer process killed) now and then.
type feedConsumer struct {
	name string
	// seen is the newest version of each id it was given, over all its lives;
	// mu guards it (the test's final check reads it while the consumer runs).
	mu   sync.Mutex
	seen map[string]feedVersion
	// cursor is where this life reads next ("": a new life, from the committed
	// cursor), floor the committed cursor this life started from: every position
	// it is given must be above it, and above the one before.
	cursor string
	floor  rowkey.Position
	last   rowkey.Position
	lives  int
	pages  int
}

// TestFeedConsumersSeeEveryAcknowledgedRowThroughKillsMergesAndAdoption is issue
// 32's history test. Three writers add rows (overwriting ids, with and without
// flush) through three workers, one of them with a clock 3 s behind; the master
// merges on demand and compacts; w2 is SIGKILLed and restarted, w3 is SIGKILLed
// for good and its shard adopted. Three named consumers follow the store's change
// feed through any live worker with random page sizes, commit now and then, and
// are "killed" (their state dropped, resumed from the committed cursor).
// Invariants: every position a consumer is given is above the one before and
// above the cursor its life resumed from (the feed never goes back past a commit);
// an id's versions come in _seq order; at the end each consumer has seen the final
// value of every row, which holds every acknowledged write or a newer one.
func TestFeedConsumersSeeEveryAcknowledgedRowThroughKillsMergesAndAdoption(t *testing.T) {
	t.Parallel()
	skipShort(t)
	c := newCluster(t, map[string]string{"FEED_HORIZON_INTERVAL": "200ms"},
		map[string]string{"ORPHAN_GRACE": orphanGrace, "MERGE_MAX_DELAY": "2s"})
	m := c.startMaster("m1", nil)
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")
	w3 := c.startWorkerWith("w3", chaosWorker(t), map[string]string{chaos.ClockOffsetEnv: "-3s"})
	const store = "feed"
	client := &http.Client{Timeout: 30 * time.Second}
	mustSend(t, client, http.MethodPost, w1.url()+"/api/v1/generic", fmt.Sprintf(`{"name":%q,"schema":%s}`, store, churnSpec), http.StatusCreated)
	rows := "/api/v1/generic/" + store + "/rows"

	var (
		mu    sync.Mutex
		live  = []*workerProc{w1, w2, w3}
		acked = map[string]feedVersion{} // the newest acknowledged version of each id
		n     atomic.Int64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	pick := func(rng *rand.Rand) *workerProc {
		mu.Lock()
		defer mu.Unlock()
		return live[rng.IntN(len(live))]
	}
	for wr := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(wr), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				w := pick(rng)
				id := fmt.Sprintf("id-%03d", rng.IntN(150))
				v := n.Add(1)
				path := w.url() + rows
				if rng.IntN(3) == 0 {
					path += "?flush=true"
				}
				a, err := send(client, http.MethodPost, path, fmt.Sprintf(`{"rows":[{"id":%q,"n":%d}]}`, id, v))
				if err != nil || a.status != http.StatusCreated {
					continue // a worker being killed; not acknowledged
				}
				seq, err := strconv.ParseUint(a.header.Get(httpjson.SeqHeader), 10, 64)
				if err != nil {
					t.Errorf("add through %s: %s header: %v", w.id, httpjson.SeqHeader, err)
					return
				}
				mu.Lock()
				if cur, ok := acked[id]; !ok || seq > cur.seq {
					acked[id] = feedVersion{v, seq}
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
		})
	}

	consumers := []*feedConsumer{{name: "c1", seen: map[string]feedVersion{}}, {name: "c2", seen: map[string]feedVersion{}}, {name: "c3", seen: map[string]feedVersion{}}}
	var cwg sync.WaitGroup
	consumersStop := make(chan struct{})
	for i, fc := range consumers {
		cwg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for {
				select {
				case <-consumersStop:
					return
				default:
				}
				if err := fc.page(client, pick(rng), store, rng); err != nil {
					t.Errorf("consumer %s: %v", fc.name, err)
					return
				}
			}
		})
	}

	// The events, while everyone writes and follows.
	time.Sleep(4 * time.Second)
	w2.kill()
	time.Sleep(2 * time.Second)
	c.startWorker("w2")
	compact := func() {
		if _, err := c.adminCmd(m, "compact", "generic:"+store, "--timeout", "60s").CombinedOutput(); err != nil {
			t.Logf("compact: %v", err)
		}
	}
	compact()
	time.Sleep(2 * time.Second)
	mu.Lock()
	live = []*workerProc{w1, w2}
	mu.Unlock()
	time.Sleep(200 * time.Millisecond) // no new add goes to w3; some are in flight
	w3.kill()
	t.Log("w3 killed for good: its shard holds the feed back until a survivor adopts it")
	time.Sleep(4 * time.Second)
	compact()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	// The final value of every row, as the store lists it once everything is sealed
	// and w3's orphan adopted.
	truth := map[string]int64{}
	testwait.ForEvery(t, 3*time.Minute, poll, "the store lists every acknowledged row at its newest acknowledged value or a newer one", func() (bool, string) {
		got, err := listGenericValues(w1.url() + rows)
		if err != nil {
			return false, err.Error()
		}
		mu.Lock()
		defer mu.Unlock()
		for id, v := range acked {
			if got[id] < v.n { // n grows with every write: a smaller n is an older one
				return false, fmt.Sprintf("%s listed as %d, acknowledged %d", id, got[id], v.n)
			}
		}
		truth = got
		return true, ""
	})
	testwait.ForEvery(t, 3*time.Minute, poll, "every consumer has seen the final value of every row", func() (bool, string) {
		for _, fc := range consumers {
			fc.mu.Lock()
			missing := 0
			var example string
			for id, want := range truth {
				if fc.seen[id].n != want {
					missing++
					example = fmt.Sprintf("%s: seen %d, final %d", id, fc.seen[id].n, want)
				}
			}
			fc.mu.Unlock()
			if missing > 0 {
				return false, fmt.Sprintf("%s misses %d rows (%s)", fc.name, missing, example)
			}
		}
		return true, ""
	})
	close(consumersStop)
	cwg.Wait()
	for _, fc := range consumers {
		t.Logf("consumer %s: %d pages over %d lives, %d ids", fc.name, fc.pages, fc.lives, len(fc.seen))
	}
}

// page reads one page through w and checks it, then maybe commits, maybe dies.
func (fc *feedConsumer) page(client *http.Client, w *workerProc, store string, rng *rand.Rand) error {
	base := w.url() + "/api/v1/"
	q := url.Values{"limit": {strconv.Itoa(1 + rng.IntN(40))}, "wait": {"500ms"}}
	if fc.cursor == "" {
		// A new life: from the committed cursor.
		a, err := send(client, http.MethodGet, base+"consumers/"+fc.name+"/generic/"+store, "")
		if err != nil || (a.status != http.StatusOK && a.status != http.StatusNotFound) {
			return nil // a worker being killed: try another
		}
		fc.floor = rowkey.Position{}
		if a.status == http.StatusOK {
			var rec struct{ Cursor string }
			if err := json.Unmarshal([]byte(a.body), &rec); err != nil {
				return fmt.Errorf("committed cursor %s: %w", a.body, err)
			}
			p, err := rowkey.ParseCursor(rec.Cursor)
			if err != nil {
				return err
			}
			fc.floor = p
		}
		fc.last, fc.cursor = fc.floor, fc.floor.Cursor()
		fc.lives++
	}
	q.Set("cursor", fc.cursor)
	a, err := send(client, http.MethodGet, base+"generic/"+store+"/changes?"+q.Encode(), "")
	if err != nil || a.status != http.StatusOK {
		if err == nil && a.status/100 == 4 {
			return fmt.Errorf("changes through %s: %d %s", w.id, a.status, a.body)
		}
		return nil
	}
	var page struct {
		Changes []struct {
			Cursor string
			Row    struct {
				ID string
				N  int64
			}
		}
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(a.body), &page); err != nil {
		return fmt.Errorf("changes page %s: %w", a.body, err)
	}
	fc.pages++
	for _, ch := range page.Changes {
		p, err := rowkey.ParseCursor(ch.Cursor)
		if err != nil {
			return err
		}
		if !fc.last.Less(p) {
			return fmt.Errorf("through %s: position %+v after %+v (life %d resumed from %+v): the feed went back", w.id, p, fc.last, fc.lives, fc.floor)
		}
		if p.ID != ch.Row.ID {
			return fmt.Errorf("position %+v of row %s", p, ch.Row.ID)
		}
		fc.mu.Lock()
		prev := fc.seen[p.ID]
		if prev.seq <= p.Seq {
			fc.seen[p.ID] = feedVersion{ch.Row.N, p.Seq}
		}
		fc.mu.Unlock()
		if prev.seq > p.Seq {
			return fmt.Errorf("through %s: %s at _seq %d after _seq %d: an older version after a newer one", w.id, p.ID, p.Seq, prev.seq)
		}
		fc.last = p
	}
	next, err := rowkey.ParseCursor(page.NextCursor)
	if err != nil {
		return err
	}
	if next.Less(fc.last) {
		return fmt.Errorf("next_cursor %+v before the last row %+v", next, fc.last)
	}
	fc.cursor = page.NextCursor
	if rng.IntN(2) == 0 {
		_, _ = send(client, http.MethodPost, base+"consumers/"+fc.name+"/generic/"+store+"/commit", fmt.Sprintf(`{"cursor":%q}`, page.NextCursor))
	}
	if rng.IntN(25) == 0 {
		fc.cursor = "" // killed: the next life resumes from the committed cursor
	}
	return nil
}

// listGenericValues lists every row of a generic store through one worker: id -> n.
func listGenericValues(u string) (map[string]int64, error) {
	code, body, err := httpGet(u)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", u, code, body)
	}
	var page struct {
		Rows []struct {
			ID string
			N  int64
		}
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(page.Rows))
	for _, r := range page.Rows {
		out[r.ID] = r.N
	}
	return out, nil
}
