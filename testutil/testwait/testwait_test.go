package testwait

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the testing package's does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own (Fatalf ends it) and
// returns the recorded failure, "" when there was none.
func run(f func(tb testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	msg := run(func(tb testing.TB) {
		For(tb, 10*time.Second, "the third check", func() (bool, string) {
			return n.Add(1) == 3, "not yet"
		})
	})
	if msg != "" {
		t.Fatalf("failed: %s", msg)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("checked %d times, want 3", got)
	}
}

// A condition that never holds fails the test (it does not hang it), naming what
// was awaited and the last reason.
func TestForFailsAfterTheTimeoutWithTheLastReason(t *testing.T) {
	var n atomic.Int32
	msg := run(func(tb testing.TB) {
		For(tb, 20*time.Millisecond, "the impossible", func() (bool, string) {
			return false, fmt.Sprintf("check %d", n.Add(1))
		})
	})
	want := fmt.Sprintf("waiting for the impossible: check %d", n.Load())
	if !strings.Contains(msg, want) {
		t.Fatalf("failure %q, want it to contain %q", msg, want)
	}
}

// A costly condition (a process, a round trip through a cluster) is not run in
// the hot loop For's MaxInterval would give it.
func TestForEveryChecksNoMoreOftenThanItsInterval(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	msg := run(func(tb testing.TB) {
		ForEvery(tb, 10*time.Second, 100*time.Millisecond, "300 ms", func() (bool, string) {
			n.Add(1)
			return time.Since(start) >= 300*time.Millisecond, ""
		})
	})
	if msg != "" {
		t.Fatalf("failed: %s", msg)
	}
	// 1, 2, 4, ... 64 ms apart, then 100 ms: about 10 checks in 300 ms; a
	// loaded machine only sleeps longer. For would check about 35 times.
	if got := n.Load(); got > 12 {
		t.Fatalf("checked %d times in 300 ms, want at most 12 at 100 ms apart", got)
	}
}

func TestUntilFailsWithoutAReason(t *testing.T) {
	msg := run(func(tb testing.TB) {
		Until(tb, time.Millisecond, "nothing", func() bool { return false })
	})
	if !strings.HasSuffix(msg, "waiting for nothing") {
		t.Fatalf("failure %q, want it to end with %q", msg, "waiting for nothing")
	}
}

func TestLogCountsRecordsOfEachMessageThroughDerivedLoggers(t *testing.T) {
	var l Log
	log := l.Logger().With("component", "x").WithGroup("g")
	log.Warn("lost", "n", 1)
	log.Info("lost")
	log.Info("other")
	if got := l.Count("lost"); got != 2 {
		t.Errorf("Count(lost) = %d, want 2", got)
	}
	if got := l.Count("never"); got != 0 {
		t.Errorf("Count(never) = %d, want 0", got)
	}
}
