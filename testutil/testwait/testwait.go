// Package testwait is the one way tests wait for something to happen: they poll a
// condition with a deadline instead of sleeping for a fixed time or spinning
// without one.
//
// Invariants: a condition that holds is seen within MaxInterval of holding (the
// interval of ForEvery, for a costly condition); a
// condition that never holds fails the test after its timeout, naming what was
// awaited and the last reason the condition gave, instead of hanging until the
// test binary's timeout. The timeout is a liveness bound, never a timing
// assertion: pick one generous enough for a loaded machine running -race.
package testwait

import (
	"testing"
	"time"
)

// The time between two checks of a condition starts at MinInterval (a test that
// must act while a 50 ms request is in flight sees its cue in time) and doubles
// up to MaxInterval (a slow condition, an etcd read, is not run in a hot loop).
const (
	MinInterval = time.Millisecond
	MaxInterval = 10 * time.Millisecond
)

// For checks cond at once and then again, MinInterval apart at first and
// MaxInterval at most, until it reports true. If it has not after timeout, For
// fails t with what and cond's last reason. Call it from the goroutine running
// the test (it calls t.Fatalf).
func For(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ForEvery(t, timeout, MaxInterval, what, cond)
}

// ForEvery is For with checks at most interval apart instead of MaxInterval: for a
// condition that costs a process or a round trip through processes (the e2e
// suite's: an etcdctl, a `master admin`, an HTTP request to every worker), which
// MaxInterval would run a hundred times a second beside the processes it waits
// for.
func ForEvery(t testing.TB, timeout, interval time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := min(MinInterval, interval)
	for {
		ok, reason := cond()
		if ok {
			return
		}
		if !time.Now().Before(deadline) {
			if reason == "" {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, reason)
		}
		time.Sleep(wait)
		wait = min(2*wait, interval)
	}
}

// Until is For for a condition that has no reason to give.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	For(t, timeout, what, func() (bool, string) { return cond(), "" })
}
