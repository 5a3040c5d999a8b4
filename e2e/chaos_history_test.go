//go:build chaos

package e2e

import (
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChaosHistoryOfRandomTrafficUnderEveryFaultIsConsistent is the long history
// campaign: the traffic of TestHistoryOfRandomTrafficUnderOneFaultIsConsistent for
// TIDEMARK_CHAOS_HISTORY_DURATION (10 min), cycling through every fault kind
// (worker and master SIGKILL and restart, object-store errors and latency, clock
// skew, a partition of w3 from etcd, and etcd itself down and restarted), each
// phase in a seeded order; every read of the history is checked and
// the figures (operations, reads checked, violations) go to RELIABILITY.md.
// TIDEMARK_CHAOS_DATA=minio runs it on MinIO (historyStore), as a campaign of its own.
func TestChaosHistoryOfRandomTrafficUnderEveryFaultIsConsistent(t *testing.T) {
	store, storeName := historyStore(t)
	campaign := "histories"
	if storeName != historyStoreFile { // a block of its own beside the file:// figures
		campaign += " on " + storeName
	}
	cc := startChaosReport(t, campaign)
	duration := chaosDuration(t, "TIDEMARK_CHAOS_HISTORY_DURATION", 10*time.Minute)
	seed := historySeed(t)
	t.Logf("seed %d (%s=%d replays it)", seed, historySeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 21))
	// Two rounds of every kind when there is time for phases of a minute or more.
	rounds := 1
	if duration >= 8*time.Minute {
		rounds = 2
	}
	faults := append(append([]string(nil), historyFaults...), faultEtcdDown)
	var phases []historyPhase
	var names []string
	for range rounds {
		order := append([]string(nil), faults...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, f := range order {
			phases = append(phases, historyPhase{fault: f, length: duration / time.Duration(rounds*len(faults))})
			names = append(names, f)
		}
	}
	cc.addf("traffic", "%s: 4 clients, each op on a random worker of 3: 45%% adds of one row (80%% with ?flush=true), 40%% gets, 15%% lists of the store; 16 ids; every request carries the client's highest causal token", duration)
	cc.addf("fault phases", "%s (seed %d)", strings.Join(names, ", "), seed)
	cc.add("object store", storeName)
	hc := newHistoryCampaign(t, rng, false, store)
	hc.extra = map[string]func(*historyCampaign, time.Time){faultEtcdDown: etcdOutages}
	out := hc.run(phases)
	cc.add("operations recorded", out.summary)
	cc.add("reads checked (a get, or one id of a list)", out.reads)
	cc.add("faults injected", out.faults())
	cc.add("porcupine ids undecided (search timed out)", out.undecided)
	cc.add("violations", len(out.violations))
	if out.dir != "" {
		cc.add("history kept in", out.dir)
	}
	out.assert(t)
}

// faultEtcdDown stops the whole etcd (every worker's registration and the
// master's session, claims and scans lose it) for a few seconds, then starts it
// again: longer than the workers' lease TTL (4 s) at times, so their records
// expire and shards may be taken for orphans while their workers still serve.
const faultEtcdDown = "etcd down and restarted"

func etcdOutages(hc *historyCampaign, until time.Time) {
	c := hc.c
	for hc.pause(until, 3*time.Second, 6*time.Second) {
		if err := c.etcd.stop(syscall.SIGINT, 20*time.Second); err != nil {
			hc.t.Fatalf("stop etcd: %v", err)
		}
		hc.injected[faultEtcdDown]++
		hc.t.Log("etcd stopped")
		hc.pause(until.Add(time.Minute), 2*time.Second, 8*time.Second)
		c.restartEtcd()
		hc.t.Log("etcd answers again")
	}
}
