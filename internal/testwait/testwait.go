// Package testwait is the one way tests wait for something to happen: they poll a
// condition with a deadline instead of sleeping for a fixed time or spinning
// without one.
//
// Invariants: a condition that holds is seen within one Interval of holding; a
// condition that never holds fails the test after its timeout, naming what was
// awaited and the last reason the condition gave, instead of hanging until the
// test binary's timeout. The timeout is a liveness bound, never a timing
// assertion: pick one generous enough for a loaded machine running -race.
package testwait

import (
	"testing"
	"time"
)

// Interval is the time between two checks of a condition.
const Interval = 5 * time.Millisecond

// For checks cond at once and then every Interval until it reports true. If it
// has not after timeout, For fails t with what and cond's last reason. Call it
// from the goroutine running the test (it calls t.Fatalf).
func For(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
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
		time.Sleep(Interval)
	}
}

// Until is For for a condition that has no reason to give.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	For(t, timeout, what, func() (bool, string) { return cond(), "" })
}
