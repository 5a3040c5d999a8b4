//go:build chaos

package e2e

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestChaosHistoryOfRandomTrafficUnderEveryFaultIsConsistent is the long history
// campaign: the traffic of TestHistoryOfRandomTrafficUnderOneFaultIsConsistent for
// TIDEMARK_CHAOS_HISTORY_DURATION (10 min), cycling through every fault kind
// (worker and master SIGKILL and restart, object-store errors and latency, clock
// skew), each phase in a seeded order; every read of the history is checked and
// the figures (operations, reads checked, violations) go to RELIABILITY.md.
func TestChaosHistoryOfRandomTrafficUnderEveryFaultIsConsistent(t *testing.T) {
	cc := startChaosReport(t, "histories")
	duration := chaosDuration(t, "TIDEMARK_CHAOS_HISTORY_DURATION", 10*time.Minute)
	seed := historySeed(t)
	t.Logf("seed %d (%s=%d replays it)", seed, historySeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 21))
	// Two rounds of every kind when there is time for phases of a minute or more.
	rounds := 1
	if duration >= 8*time.Minute {
		rounds = 2
	}
	var phases []historyPhase
	var names []string
	for range rounds {
		order := append([]string(nil), historyFaults...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, f := range order {
			phases = append(phases, historyPhase{fault: f, length: duration / time.Duration(rounds*len(historyFaults))})
			names = append(names, f)
		}
	}
	cc.addf("traffic", "%s: 4 clients, each op on a random worker of 3: 45%% adds of one row (80%% with ?flush=true), 40%% gets, 15%% lists of the store; 16 ids; every request carries the client's highest causal token", duration)
	cc.addf("fault phases", "%s (seed %d)", strings.Join(names, ", "), seed)
	hc := newHistoryCampaign(t, rng, false)
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
