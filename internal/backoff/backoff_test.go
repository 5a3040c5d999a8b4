package backoff

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// The delays double from Min to Max and stay there; jitter only shortens them,
// by at most its fraction.
func TestDelaysDoubleUpToMaxAndJitterStaysInItsBand(t *testing.T) {
	exact := Policy{Min: 250 * time.Millisecond, Max: 2 * time.Second}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second}
	b := exact.Start()
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Fatalf("delay %d: %s, want %s", i+1, got, w)
		}
	}
	b.Reset()
	if got := b.Next(); got != want[0] {
		t.Fatalf("after Reset: %s, want %s", got, want[0])
	}
	if got := exact.Delay(1000); got != exact.Max {
		t.Fatalf("delay 1000: %s, want the cap %s (no overflow)", got, exact.Max)
	}

	jittered := Policy{Min: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}
	for n := 1; n <= 6; n++ {
		d := Policy{Min: jittered.Min, Max: jittered.Max}.Delay(n)
		for range 200 {
			got := jittered.Delay(n)
			if got > d || got < d/2 {
				t.Fatalf("delay %d: %s outside [%s, %s]", n, got, d/2, d)
			}
		}
	}
}

// Sleep waits on the injected clock, and a context that ends stops the wait.
func TestSleepWaitsOnTheClockAndStopsWithTheContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	done := make(chan error, 1)
	go func() { done <- Sleep(context.Background(), clk, time.Second) }()
	testwait.For(t, 10*time.Second, "Sleep waiting on the clock", func() (bool, string) { return clk.HasWaiters(), "" })
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before the clock moved", err)
	default:
	}
	clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Sleep: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Sleep(ctx, clk, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep after cancel: %v, want context.Canceled", err)
	}
}
