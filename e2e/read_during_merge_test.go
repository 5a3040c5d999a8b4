package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

// TestReadsDuringAnotherWorkersMergeNeverGoBack runs the setup that showed the read
// anomaly with real processes: rows sealed through w2 and already visible through
// w1 must stay visible through w1, never missing and never at an older value, while
// w2 merges its shard in many passes and three readers on w1 get single ids and list
// the whole store in a tight loop. Production failure: a refresh that read the base
// before a merge's commit and the shard manifests after its drain answered
// {"record": null} or the previous value for acked, visible rows.
func TestReadsDuringAnotherWorkersMergeNeverGoBack(t *testing.T) {
	t.Parallel()
	start := time.Now()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	// Small passes: many commits and drains per merge. The reader w1 refreshes its
	// snapshot at every read, on a store 3 ms slower per request than w2's: a
	// refresh then spans a whole commit and drain of w2 often, as it does on a real
	// object store, and a refresh in the unsafe order is caught within the test. Its
	// table cache holds no key index (4 KiB): every read finds its rows through key
	// index tops and blocks read from storage, as a worker does on a store whose
	// indexes outgrow the cache.
	c := newCluster(t, map[string]string{"MERGE_MAX_GENERATIONS": "2", "FLUSH_INTERVAL": "1h"}, nil)
	faults := filepath.Join(t.TempDir(), "w1-faults.json")
	if err := os.WriteFile(faults, []byte(`{"latency": "3ms"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	w1 := c.startWorkerWith("w1", chaosWorker(t), map[string]string{"SNAPSHOT_TTL": "1ms", "CACHE_BYTES": "16384", chaos.FaultsFileEnv: faults})
	w2 := c.startWorker("w2")
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	const name = "reads_during_merge"
	if code, body, err := postWith(http.DefaultClient, w2.url()+"/api/v1/rollouts", "", `{"name":"`+name+`"}`); err != nil || code/100 != 2 {
		t.Fatalf("create store: %d %s %v", code, body, err)
	}
	records := "/api/v1/rollouts/" + name + "/records"
	const hot = 5 // ids overwritten every cycle with an increasing value

	visible := map[string]int{} // id -> the value w1 has shown (never to be undercut)
	value := 0
	passes := 0
	for cycle := 0; passes < 40; cycle++ {
		if cycle == 6 {
			t.Fatalf("only %d merge passes in %d cycles", passes, cycle)
		}
		// About 60 sealed generations through w2, four requests at a time: new ids
		// and the hot ids.
		written := map[string]int{}
		var bodies []string
		for g := 0; g < 50+rng.IntN(20); g++ {
			value++
			var recs []string
			for i := 0; i < 3; i++ {
				id := fmt.Sprintf("c%d-%d", cycle, rng.IntN(1_000_000))
				recs = append(recs, record(id, value))
				written[id] = value
			}
			id := fmt.Sprintf("hot-%d", rng.IntN(hot))
			recs = append(recs, record(id, value))
			written[id] = value
			bodies = append(bodies, `{"records":[`+strings.Join(recs, ",")+`]}`)
		}
		// A hot id written by two requests in flight at once may end at either value.
		for id := range written {
			if strings.HasPrefix(id, "hot-") {
				written[id] = 0
			}
		}
		var adds errgroup.Group
		adds.SetLimit(4)
		for _, body := range bodies {
			adds.Go(func() error {
				code, out, err := postWith(http.DefaultClient, w2.url()+records+"?flush=true", "", body)
				if err != nil || code/100 != 2 {
					return fmt.Errorf("add through w2: %d %s %v", code, out, err)
				}
				return nil
			})
		}
		if err := adds.Wait(); err != nil {
			t.Fatal(err)
		}
		t.Logf("cycle %d: %d adds through w2 done (%v since start)", cycle, len(bodies), time.Since(start).Round(time.Millisecond))
		// Wait until w1 shows every one of them: from here on they must never go back.
		testwait.ForEvery(c.t, 30*time.Second, poll, "w1 shows the rows sealed through w2", func() (bool, string) {
			listed, err := listValues(w1.url() + records)
			if err != nil {
				return false, err.Error()
			}
			for id, v := range written {
				if got, ok := listed[id]; !ok || got < v {
					return false, fmt.Sprintf("%s: %d %v (want %d)", id, got, ok, v)
				}
				if v == 0 { // a hot id: what w1 shows now is the floor from here on
					written[id] = listed[id]
				}
			}
			return true, ""
		})
		for id, v := range written {
			if v > visible[id] {
				visible[id] = v
			}
		}
		ids := make([]string, 0, len(visible))
		for id := range visible {
			ids = append(ids, id)
		}

		var (
			mu         sync.Mutex
			violations []string
			reads      int
			stop       = make(chan struct{})
			wg         sync.WaitGroup
		)
		report := func(s string) {
			mu.Lock()
			defer mu.Unlock()
			if len(violations) < 20 {
				violations = append(violations, s)
			}
		}
		for r := 0; r < 3; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				rr := rand.New(rand.NewPCG(uint64(seed), uint64(100*cycle+r)))
				seen := map[string]int{}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if r == 0 && i%10 == 0 { // one reader also lists everything
						listed, err := listValues(w1.url() + records)
						if err != nil {
							report(fmt.Sprintf("list: %v", err))
							continue
						}
						for id, v := range visible {
							if listed[id] < v {
								report(fmt.Sprintf("list: %s = %d (missing if 0), was visible at %d", id, listed[id], v))
							}
						}
						continue
					}
					id := ids[rr.IntN(len(ids))]
					got, ok, err := getValue(w1.url()+records, id, "")
					mu.Lock()
					reads++
					mu.Unlock()
					switch {
					case err != nil:
						report(fmt.Sprintf("get %s: %v", id, err))
					case !ok:
						report(fmt.Sprintf("get %s: missing, was visible at %d", id, visible[id]))
					case got < visible[id] || got < seen[id]:
						report(fmt.Sprintf("get %s: %d, older than %d seen before", id, got, max(visible[id], seen[id])))
					default:
						seen[id] = got
					}
				}
			}(r)
		}
		code, out, err := postWith(http.DefaultClient, w2.url()+"/api/v1/internal/merge-wal/"+url.PathEscape(name), e2eToken, "")
		time.Sleep(200 * time.Millisecond) // reads right after the last drain count too
		close(stop)
		wg.Wait()
		if err != nil || code != http.StatusOK {
			t.Fatalf("merge through w2: %d %s %v", code, out, err)
		}
		var ans struct{ Generations, Passes int }
		if err := json.Unmarshal([]byte(out), &ans); err != nil {
			t.Fatal(err)
		}
		passes += ans.Passes
		t.Logf("cycle %d: %d generations merged in %d passes, %d gets on w1 meanwhile (%v since start)", cycle, ans.Generations, ans.Passes, reads, time.Since(start).Round(time.Millisecond))
		if len(violations) > 0 {
			t.Fatalf("cycle %d: reads through w1 went back during w2's merge:\n%s", cycle, strings.Join(violations, "\n"))
		}
	}
}

func record(id string, v int) string {
	return fmt.Sprintf(`{"id":%q,"rollout_id":"r","content":"%d"}`, id, v)
}

// getValue reads one record's value (its content) through a worker; query, if not
// empty, is appended ("?after=...").
func getValue(base, id, query string) (v int, ok bool, err error) {
	code, body, err := httpGet(base + "/" + url.PathEscape(id) + query)
	if err != nil {
		return 0, false, err
	}
	if code != http.StatusOK {
		return 0, false, fmt.Errorf("GET %s: %d %s", id, code, body)
	}
	var ans struct {
		Record *struct {
			Content string `json:"content"`
		} `json:"record"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return 0, false, err
	}
	if ans.Record == nil {
		return 0, false, nil
	}
	v, err = strconv.Atoi(ans.Record.Content)
	return v, true, err
}

// listValues lists every record through a worker: id -> value.
func listValues(u string) (map[string]int, error) {
	recs, err := listRecords(&http.Client{Timeout: 10 * time.Second}, u, url.Values{})
	if err != nil {
		return nil, err
	}
	out, _, err := recordValues(recs)
	return out, err
}

// recordValues is each listed record's value by id, and the first id listed
// twice ("" if none), which a list must never hold.
func recordValues(recs []listedRecord) (values map[string]int, twice string, err error) {
	values = make(map[string]int, len(recs))
	for _, r := range recs {
		v, err := strconv.Atoi(r.Content)
		if err != nil {
			return nil, "", fmt.Errorf("record %s: content %q", r.ID, r.Content)
		}
		if _, ok := values[r.ID]; ok && twice == "" {
			twice = r.ID
		}
		values[r.ID] = v
	}
	return values, twice, nil
}

// listedRecord is a record of a list answer: its id and its value (content).
type listedRecord struct {
	ID      string `json:"id"`
	Content string `json:"content"`
}

// listRecords lists every record of a rollout store through a worker (no limit:
// one streamed answer from one snapshot), with the query's other parameters
// (?after=).
func listRecords(httpc *http.Client, u string, q url.Values) ([]listedRecord, error) {
	code, body, err := httpGetWith(httpc, u+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("list: %d %s", code, body)
	}
	var ans struct {
		Records []listedRecord `json:"records"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, err
	}
	return ans.Records, nil
}
