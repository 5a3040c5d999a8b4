//go:build chaos

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// TestChaosStandbyMasterTakesOverARunningMerge is the master failover campaign:
// two master replicas, and trials (TIDEMARK_CHAOS_FAILOVER_TRIALS, 5) that each
// give the workers a backlog of generations, slow their object store down (the
// chaos faults file) so that the merge_wal task runs for seconds, requeue the
// merge, and SIGKILL the master that holds its claim (read from the task record
// in etcd) at a random moment of its fan-out. The other master must claim the
// task once the killed one's lease expires (LEASE_TTL 3 s) and finish it
// across every worker; the rows end up merged exactly once. The killed master is
// restarted as the standby of the next trial.
//
// "Never merged by two masters at once" is checked on the workers' logs: every
// merge a worker ran for the target under the killed master's fencing token
// ended before the first merge under a newer claim started, and a fencing refusal
// (WorkerService's stale-token check) refused only the token of a superseded
// claim: the killed master's, or, on a loaded machine, the claim of a live master
// whose lease expired and whose task was claimed again.
func TestChaosStandbyMasterTakesOverARunningMerge(t *testing.T) {
	cc := startChaosReport(t, "master failover")
	trials := chaosInt(t, "TIDEMARK_CHAOS_FAILOVER_TRIALS", 5)
	t.Logf("%d trials", trials)
	rng := chaosRand(t)

	faults := filepath.Join(t.TempDir(), "faults.json")
	c := newCluster(t, map[string]string{
		chaos.FaultsFileEnv: faults,
		// One generation per merge pass: a backlog takes many commits to merge.
		"MERGE_MAX_GENERATIONS": "1",
		"FLUSH_INTERVAL":        "1h", // only ?flush=true seals: the backlog is exact
	}, map[string]string{
		// Only the requeued task runs: neither the sweep nor merges on demand find a store due.
		"MERGE_WAL_MIN_GENERATIONS": "1000000",
		"MERGE_MAX_DELAY":           "1h", // nor merges on demand
	})
	keepChaosLogs(t, c)
	names := [2]string{"m1", "m2"}
	for _, n := range names {
		c.startMaster(n, nil)
	}
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		c.startWorker(id)
	}

	var claimTimes, doneTimes []time.Duration
	overlaps, refusedKilled, refusedLost, badRefusals := 0, 0, 0, 0
	for trial := range trials {
		store := fmt.Sprintf("chaos_failover_%d", trial)
		l := newLedger()
		// 12 generations in each worker's shard.
		st, err := loadgen.Run(context.Background(), loadgen.Config{
			Workers: c.workerURLs(), MaxRows: 360, Batch: 10, Concurrency: 3,
			RolloutStore: store, RunID: store, Flush: true, OnBatch: l.record,
		})
		if err != nil || st.Failed > 0 {
			t.Fatalf("trial %d: backlog: %+v, %v", trial, st, err)
		}
		writeFaults(t, faults, `{"latency": "15ms", "jitter": "10ms"}`)

		anyMaster := c.masters[names[trial%2]]
		id := c.requeueMerge(anyMaster, store)
		testwait.ForEvery(c.t, 15*time.Second, poll, "task "+id+" runs", func() (bool, string) {
			tk := c.taskRecord(id)
			return tk.State == "running", tk.State
		})
		// Into the fan-out, which takes about 3 s per worker here: the first
		// worker's merge, or a later one.
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(7*time.Second))))
		// The holder now: on a loaded machine a master may have lost its lease
		// and the task been claimed again since it started.
		tk := c.taskRecord(id)
		holder, _, _ := strings.Cut(tk.ClaimToken, "/")
		killed := c.masters[holder]
		lock := c.targetLock(store)
		if tk.State != "running" || killed == nil || lock == 0 {
			t.Fatalf("trial %d: task %s is %s, claimed by %q (lock %d) before the kill: want running under m1 or m2 (detail %q)",
				trial, id, tk.State, holder, lock, tk.Detail)
		}
		killed.kill()
		killedAt := time.Now()
		successor := names[0]
		if holder == successor {
			successor = names[1]
		}

		// Taken over: the target lock is created again, by a newer claim.
		var claimAfter time.Duration
		testwait.ForEvery(c.t, 30*time.Second, poll, "another claim of task "+id, func() (bool, string) {
			tok := c.targetLock(store)
			if tok > lock || c.taskRecord(id).State == "done" {
				claimAfter = time.Since(killedAt)
				return true, ""
			}
			return false, fmt.Sprintf("lock %d", tok)
		})
		var rec claimedTask
		testwait.ForEvery(c.t, time.Minute, poll, "task "+id+" done after the takeover", func() (bool, string) {
			rec = c.taskRecord(id)
			if rec.State == "failed" {
				t.Fatalf("trial %d: task %s failed after the takeover: %s", trial, id, rec.Error)
			}
			return rec.State == "done", rec.State
		})
		doneAfter := time.Since(killedAt)
		writeFaults(t, faults, "")
		claimTimes, doneTimes = append(claimTimes, claimAfter), append(doneTimes, doneAfter)
		if rec.Attempts < 2 || !strings.Contains(rec.Detail, "across 3/3 workers") || rec.FencingToken <= lock {
			t.Errorf("trial %d: task record %+v: want done across 3/3 workers on attempt 2+, under a fencing token above the killed master's %d", trial, rec, lock)
		}

		// What the workers did for the target, under which claim's token. Every
		// claim of the task is in the masters' logs.
		claims := c.claimTokens(names[:], id)
		merges := c.workerMergeLog(ids, store)
		var lastOld, firstNew time.Time
		doneBefore := 0 // workers the killed master's fan-out had finished
		for _, ml := range merges {
			switch {
			case ml.refused:
				switch {
				case ml.token == lock:
					refusedKilled++
				case claims[ml.token] && ml.token < rec.FencingToken:
					refusedLost++ // a live master's claim whose lease expired, taken over
				default:
					badRefusals++
					t.Errorf("trial %d: %s refused token %d at %s: not a superseded claim of task %s (claims %v, final %d)",
						trial, ml.worker, ml.token, ml.at.Format(time.StampMilli), id, claims, rec.FencingToken)
				}
			case ml.token == lock:
				if ml.done {
					doneBefore++
				}
				if ml.at.After(lastOld) {
					lastOld = ml.at
				}
			case ml.token > lock:
				if firstNew.IsZero() || ml.start.Before(firstNew) {
					firstNew = ml.start
				}
			}
		}
		if !lastOld.IsZero() && !firstNew.IsZero() && !lastOld.Before(firstNew) {
			overlaps++
			t.Errorf("trial %d: a merge under the killed master's token %d ended at %s, after a merge under a newer claim started at %s",
				trial, lock, lastOld.Format(time.StampMilli), firstNew.Format(time.StampMilli))
		}
		t.Logf("trial %d: %s killed during task %s (fencing token %d) after its fan-out merged %d/3 workers; taken over after %s, done after %s under token %d (claims %v): %s",
			trial, holder, id, lock, doneBefore, claimAfter.Round(time.Millisecond), doneAfter.Round(time.Millisecond),
			rec.FencingToken, claims, rec.Detail)
		cc.add(fmt.Sprintf("trial %d: killed in the call to worker, takeover claim / done after the kill", trial+1),
			fmt.Sprintf("%d of 3, %s / %s", doneBefore+1, claimAfter.Round(time.Millisecond), doneAfter.Round(time.Millisecond)))

		c.awaitMergedExactlyOnce(c.masters[successor], l, loadgen.KindRollout, store, 30*time.Second)
		c.startMaster(holder, nil) // the standby of the next trial
	}
	cc.add("trials", trials)
	cc.add("takeover claim after the kill, p50 / max", fmt.Sprintf("%s / %s", percentile(claimTimes, 50).Round(time.Millisecond), percentile(claimTimes, 100).Round(time.Millisecond)))
	cc.add("takeover done after the kill, p50 / max", fmt.Sprintf("%s / %s", percentile(doneTimes, 50).Round(time.Millisecond), percentile(doneTimes, 100).Round(time.Millisecond)))
	cc.add("merges of the killed master overlapping the successor's", overlaps)
	cc.add("fencing refusals: of the killed master's token / of claims lost with a live master's lease / other",
		fmt.Sprintf("%d / %d / %d", refusedKilled, refusedLost, badRefusals))
}

// targetLock returns the fencing token of target's lock (the create revision of
// P/target-locks/<target>), 0 when unlocked or etcd does not answer.
func (c *cluster) targetLock(target string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.client.Get(ctx, c.prefix+"/target-locks/"+target)
	if err != nil || len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].CreateRevision
}

// claimTokens reads the fencing tokens of every claim of task id from the masters'
// logs (restarts included).
func (c *cluster) claimTokens(masters []string, id string) map[int64]bool {
	out := map[int64]bool{}
	for _, name := range masters {
		f, err := os.Open(filepath.Join(c.dir, name+".log"))
		if err != nil {
			c.t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l struct {
				Msg   string `json:"msg"`
				Task  string `json:"task"`
				Token int64  `json:"fencing_token"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "task claimed" && l.Task == id {
				out[l.Token] = true
			}
		}
		f.Close()
	}
	return out
}

// mergeLogLine is one merge of a target by a worker, from its log: done, failed,
// or refused for a stale fencing token.
type mergeLogLine struct {
	worker    string
	token     int64
	start, at time.Time
	refused   bool
	done      bool // "merge done": the worker's merge of the call finished
}

// workerMergeLog reads every worker process's log (restarts included) for the
// merges of target.
func (c *cluster) workerMergeLog(workers []string, target string) []mergeLogLine {
	var out []mergeLogLine
	for _, id := range workers {
		f, err := os.Open(filepath.Join(c.dir, id+".log"))
		if err != nil {
			c.t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l struct {
				Time     time.Time `json:"time"`
				Msg      string    `json:"msg"`
				Target   string    `json:"target"`
				Token    int64     `json:"fencing_token"`
				Duration string    `json:"duration"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Target != target || l.Token == 0 {
				continue
			}
			ml := mergeLogLine{worker: id, token: l.Token, at: l.Time, start: l.Time}
			switch {
			case strings.HasPrefix(l.Msg, "merge refused"):
				ml.refused = true
			case l.Msg == "merge done" || l.Msg == "merge failed":
				ml.done = l.Msg == "merge done"
				if d, err := time.ParseDuration(l.Duration); err == nil {
					ml.start = l.Time.Add(-d)
				}
			default:
				continue
			}
			out = append(out, ml)
		}
		f.Close()
	}
	return out
}
