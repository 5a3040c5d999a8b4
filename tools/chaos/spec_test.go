package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

var testNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestParseSpecRefusesWhatWouldSilentlyInjectNothing(t *testing.T) {
	for _, bad := range []string{
		`{"eror_rate": 0.1}`,
		`{"error_rate": 1.5}`,
		`{"error_ops": ["gett"]}`,
		`{"rules": [{"ops": ["PUT"], "hang": true}]}`,
		`{"write_phase": "during"}`,
		`{"throttle": "drop"}`,
		`{"latency": 5}`,
		`{"latency": "-1s"}`,
		`{"error_rate": 0.1`,
	} {
		if _, err := ParseSpec([]byte(bad)); err == nil {
			t.Errorf("ParseSpec(%s) accepted it", bad)
		}
	}
	for _, blank := range []string{"", "  \n", "{}"} {
		s, err := ParseSpec([]byte(blank))
		if err != nil || s.ErrorRate != 0 || len(s.Rules) != 0 {
			t.Errorf("ParseSpec(%q) = %+v, %v; want the zero Spec", blank, s, err)
		}
	}
}

// TestApplyReplacesEveryFaultAndKeepsTheCounters: a campaign turns faults on and
// off by rewriting the file, and reports counters over the whole run.
func TestApplyReplacesEveryFaultAndKeepsTheCounters(t *testing.T) {
	ctx := context.Background()
	base, err := objstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(base, f)

	on, err := ParseSpec([]byte(`{"error_rate": 1, "error_ops": ["put"], "rules": [{"key_contains": "gone/", "ops": ["get"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	on.Apply(f)
	if err := b.Put(ctx, "a", []byte("x")); !errors.Is(err, objstore.ErrInjected) {
		t.Errorf("put under error_rate 1 = %v, want ErrInjected", err)
	}
	if _, err := b.Get(ctx, "gone/a"); !errors.Is(err, objstore.ErrInjected) {
		t.Errorf("get matching a rule = %v, want ErrInjected", err)
	}
	if _, err := b.Stat(ctx, "a"); !errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrInjected) {
		t.Errorf("stat (not in error_ops) = %v, want a real not-found", err)
	}

	Spec{}.Apply(f)
	if err := b.Put(ctx, "gone/a", []byte("x")); err != nil {
		t.Errorf("put after the zero Spec = %v", err)
	}
	if _, err := b.Get(ctx, "gone/a"); err != nil {
		t.Errorf("get after the zero Spec removed the rule = %v", err)
	}
	st := StatsOf(f, Spec{}, testNow)
	if st.Injected != 2 || st.Requests != 5 || st.ByOp[objstore.OpPut] != 2 {
		t.Errorf("stats = %+v, want 2 injected of 5 requests, 2 puts", st)
	}
}
