package chaos

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// FaultsFileEnv names the environment variable that turns the hook on in a chaos
// build: the path of the JSON Spec to poll.
const FaultsFileEnv = "TIDEMARK_CHAOS_FAULTS_FILE"

// ClockOffsetEnv names the environment variable that skews a chaos build's wall
// clock for _seq by a Go duration ("2s", "-2s"), read once at start.
const ClockOffsetEnv = "TIDEMARK_CHAOS_CLOCK_OFFSET"

// StatsSuffix is appended to the faults file's path to name the file the hook
// writes its counters to.
const StatsSuffix = ".stats.json"

// Spec is the content of a faults file: the misbehaviour of one process's bucket.
// The zero Spec injects nothing.
type Spec struct {
	// ErrorRate fails each request of ErrorOps (every kind if empty) with this
	// probability (0 to 1).
	ErrorRate float64       `json:"error_rate,omitempty"`
	ErrorOps  []objstore.Op `json:"error_ops,omitempty"`
	// WritePhase says when an error drawn by ErrorRate hits a put: "before" (the
	// default), "after" (the write happened, the answer is lost) or "both" (either,
	// at random).
	WritePhase string `json:"write_phase,omitempty"`
	// Latency plus a uniform [0, Jitter) delays every request ("5ms", "1s").
	Latency Duration `json:"latency,omitzero"`
	Jitter  Duration `json:"jitter,omitzero"`
	// MaxConcurrent caps the requests in flight (0: no cap); Throttle says what a
	// request over the cap does: "wait" (the default) or "reject" (fails at once,
	// like a 503 SlowDown).
	MaxConcurrent int    `json:"max_concurrent,omitempty"`
	Throttle      string `json:"throttle,omitempty"`
	// Rules fail or hang chosen requests, tried in order before the error rate.
	Rules []RuleSpec `json:"rules,omitempty"`
}

// RuleSpec is an objstore.Rule in JSON. Hang makes a matching request block until
// its context ends (a stuck store); otherwise a matching request fails at once.
type RuleSpec struct {
	Ops         []objstore.Op `json:"ops,omitempty"`
	KeyPrefix   string        `json:"key_prefix,omitempty"`
	KeyContains string        `json:"key_contains,omitempty"`
	Times       int           `json:"times,omitempty"`
	AfterWrite  bool          `json:"after_write,omitempty"`
	Hang        bool          `json:"hang,omitempty"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

// MarshalJSON writes d as "1.5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"250ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// ParseSpec reads a faults file's content; blank content is the zero Spec. Unknown
// fields, request kinds and modes are refused, so a typo in a campaign does not
// silently run it without its faults.
func ParseSpec(data []byte) (Spec, error) {
	var s Spec
	if strings.TrimSpace(string(data)) == "" {
		return s, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, err
	}
	if err := s.check(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func (s Spec) check() error {
	if s.ErrorRate < 0 || s.ErrorRate > 1 {
		return fmt.Errorf("error_rate %v: want 0 to 1", s.ErrorRate)
	}
	if s.Latency < 0 || s.Jitter < 0 || s.MaxConcurrent < 0 {
		return fmt.Errorf("latency, jitter and max_concurrent must not be negative")
	}
	if _, err := s.writePhase(); err != nil {
		return err
	}
	if _, err := s.throttleMode(); err != nil {
		return err
	}
	ops := append([]objstore.Op(nil), s.ErrorOps...)
	for _, r := range s.Rules {
		ops = append(ops, r.Ops...)
	}
	for _, op := range ops {
		if !knownOp(op) {
			return fmt.Errorf("request kind %q: want one of %v", op, objstore.Ops())
		}
	}
	return nil
}

func knownOp(op objstore.Op) bool {
	for _, o := range objstore.Ops() {
		if o == op {
			return true
		}
	}
	return false
}

func (s Spec) writePhase() (objstore.WritePhase, error) {
	switch s.WritePhase {
	case "", "before":
		return objstore.FailBeforeWrite, nil
	case "after":
		return objstore.FailAfterWrite, nil
	case "both":
		return objstore.FailBeforeOrAfterWrite, nil
	}
	return 0, fmt.Errorf("write_phase %q: want before, after or both", s.WritePhase)
}

func (s Spec) throttleMode() (objstore.ThrottleMode, error) {
	switch s.Throttle {
	case "", "wait":
		return objstore.ThrottleWait, nil
	case "reject":
		return objstore.ThrottleReject, nil
	}
	return 0, fmt.Errorf("throttle %q: want wait or reject", s.Throttle)
}

// Apply replaces every fault of f with s; f's counters are kept. s must have come
// from ParseSpec (or be the zero Spec).
func (s Spec) Apply(f *objstore.Faults) {
	phase, _ := s.writePhase()
	mode, _ := s.throttleMode()
	f.Clear()
	f.SetLatency(time.Duration(s.Latency), time.Duration(s.Jitter))
	f.SetErrorRate(s.ErrorRate, s.ErrorOps...)
	f.SetWritePhase(phase)
	f.SetMaxConcurrent(s.MaxConcurrent, mode)
	for _, r := range s.Rules {
		f.AddRule(objstore.Rule{
			Ops: r.Ops, KeyPrefix: r.KeyPrefix, KeyContains: r.KeyContains,
			Times: r.Times, AfterWrite: r.AfterWrite, Hang: r.Hang,
		})
	}
}

// Stats are the counters a hook writes to <faults file>.stats.json.
type Stats struct {
	Requests     int64                 `json:"requests"`
	ByOp         map[objstore.Op]int64 `json:"by_op"`
	Injected     int64                 `json:"injected"`
	Throttled    int64                 `json:"throttled"`
	PeakInFlight int                   `json:"peak_in_flight"`
	Spec         Spec                  `json:"spec"`
	UpdatedAt    time.Time             `json:"updated_at"`
}

// StatsOf reads f's counters, with the spec in force.
func StatsOf(f *objstore.Faults, spec Spec, now time.Time) Stats {
	return Stats{
		Requests: f.TotalRequests(), ByOp: f.RequestCounts(), Injected: f.Injected(),
		Throttled: f.Throttled(), PeakInFlight: f.PeakInFlight(), Spec: spec, UpdatedAt: now.UTC(),
	}
}
