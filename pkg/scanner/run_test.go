package scanner

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

func newFakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, cond)
}

// scannerGoroutines returns the stacks of goroutines running this package's code,
// other than test functions. (Counting all goroutines would count the embedded
// etcd's too, which come and go on their own.)
func scannerGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "tidemark/pkg/scanner.") && !strings.Contains(g, "testing.tRunner") {
			out = append(out, g)
		}
	}
	return out
}

// waitForTimers waits until n loops sleep on the fake clock.
func waitForTimers(t *testing.T, clk *clocktesting.FakeClock, n int) {
	t.Helper()
	waitFor(t, "the loops to wait for their next round", func() bool { return clk.Waiters() == n })
}

func TestRunScansAtOnceThenEveryIntervalAndReleasesTheLock(t *testing.T) {
	e := newEnv(t)
	g := e.createGeneric("g", 1)
	e.createGeneric("big", 8)
	clk := newFakeClock()

	ctx, cancel := context.WithCancel(e.ctx)
	s := e.scanner(e.grant(), Config{Clock: clk, Interval: time.Minute})
	sw := e.sweeper(e.grant(), MergeSweepConfig{Clock: clk, Interval: time.Minute})
	done := make(chan struct{}, 2)
	go func() { s.Run(ctx); done <- struct{}{} }()
	go func() { sw.Run(ctx); done <- struct{}{} }()

	// The first rounds run at once (the first sweep may or may not see the rows).
	waitFor(t, "the first scan", func() bool { r, _ := e.row("generic:g"); return r.PendingWALGenerations == 1 })
	waitFor(t, "the first sweep", func() bool {
		return testutil.ToFloat64(sw.metrics.rounds.WithLabelValues("done")) == 1
	})

	// Nothing happens before the interval; the next rounds run after it.
	e.sealedAdd(g)
	waitForTimers(t, clk, 2) // the scanner's and the sweeper's
	clk.Step(59 * time.Second)
	// Step fires (and forgets) the timers it passes: both still waiting means
	// neither loop started a round.
	if n := clk.Waiters(); n != 2 {
		t.Fatalf("%d of 2 loops still wait after 59 s of a 1 min interval", n)
	}
	if r, _ := e.row("generic:g"); r.PendingWALGenerations != 1 {
		t.Fatalf("scanned before the interval: pending %d", r.PendingWALGenerations)
	}
	clk.Step(time.Second)
	waitFor(t, "the second scan", func() bool { r, _ := e.row("generic:g"); return r.PendingWALGenerations == 2 })
	waitFor(t, "the second sweep", func() bool {
		return testutil.ToFloat64(sw.metrics.rounds.WithLabelValues("done")) == 2
	})
	if got := e.queuedTargets(); !slices.Equal(got, []string{"generic:big"}) {
		t.Fatalf("queued merge_wal targets = %v, want [generic:big]", got)
	}

	if n := len(scannerGoroutines()); n < 2 {
		t.Fatalf("the leak check sees %d running loops, want at least 2", n)
	}
	cancel()
	<-done
	<-done
	for _, lock := range []string{ScannerLock, MergeSweepLock} {
		resp, err := e.client.Get(e.ctx, e.ts.Prefix()+"/coordination/"+lock)
		if err != nil || len(resp.Kvs) != 0 {
			t.Fatalf("coordination lock %s still held after Run returned (%v)", lock, err)
		}
	}
	waitFor(t, "Run's goroutines to end", func() bool { return len(scannerGoroutines()) == 0 })
}
