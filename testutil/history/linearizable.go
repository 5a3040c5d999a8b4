package history

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// RuleLinearizable names the violations Linearizable finds.
const RuleLinearizable = "not linearizable"

// Config tunes Linearizable.
type Config struct {
	// Staleness is how old a read's snapshot may be for the writes its causal
	// token does not cover: the snapshot lifetime (SNAPSHOT_TTL) plus a margin for
	// the refresh itself.
	Staleness time.Duration
	// Timeout bounds the search per id (0: none); an id not decided in time is
	// reported in Result.Undecided, not as a violation.
	Timeout time.Duration
	// VisualizeDir, if set, receives porcupine's HTML visualization of each id
	// that is not linearizable (history-<id>.html).
	VisualizeDir string
}

// Result is what Linearizable found.
type Result struct {
	IDs            int
	Violations     []Violation
	Undecided      []string // ids whose search timed out
	Visualizations []string // paths of the HTML files written
}

// Report is a Result as text, for a check run in a process of its own
// (cmd/history-check): each violation as its String gives it.
type Report struct {
	IDs            int      `json:"ids"`
	Undecided      []string `json:"undecided"`
	Visualizations []string `json:"visualizations"`
	Violations     []string `json:"violations"`
}

// Report returns r as a Report.
func (r Result) Report() Report {
	out := Report{IDs: r.IDs, Undecided: r.Undecided, Visualizations: r.Visualizations}
	for _, v := range r.Violations {
		out.Violations = append(out.Violations, v.String())
	}
	return out
}

// writeInput is an add of the register; seq 0 is an unknown _seq above lower.
// Shard is the worker it was sent to (its INSTANCE_ID names its shard).
type writeInput struct {
	Value string
	Seq   uint64
	Lower uint64
	Shard string
}

// regState is the register: the value of the newest write applied (highest _seq,
// then shard). When that write's _seq is unknown, Seq is a lower bound of it
// (Exact false).
type regState struct {
	Value string
	Seq   uint64
	Shard string
	Exact bool
}

// registerModel is last-writer-wins by rowkey.Version (_seq, then shard). A write
// whose _seq is unknown is applied both ways where its order against the state is
// undecided.
var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{Exact: true}} },
	Step: func(state, input, output any) []any {
		st := state.(regState)
		w, ok := input.(writeInput)
		if !ok { // a read
			if output.(string) == st.Value {
				return []any{st}
			}
			return nil
		}
		if w.Seq != 0 {
			switch {
			case st.Exact && w.Seq == st.Seq:
				// Two workers' clocks gave one _seq: the shard that sorts last
				// wins, everywhere and for good.
				if w.Shard > st.Shard {
					return []any{regState{Value: w.Value, Seq: w.Seq, Shard: w.Shard, Exact: true}}
				}
				return []any{st}
			case w.Seq <= st.Seq: // the state is newer (its _seq is st.Seq, or above)
				return []any{st}
			case st.Exact:
				return []any{regState{Value: w.Value, Seq: w.Seq, Shard: w.Shard, Exact: true}}
			default: // the state's _seq is unknown but above st.Seq: either may be newer
				return []any{regState{Value: w.Value, Seq: w.Seq, Shard: w.Shard, Exact: true}, regState{Value: st.Value, Seq: w.Seq, Exact: false}}
			}
		}
		bound := max(st.Seq, w.Lower)
		wins := regState{Value: w.Value, Seq: bound, Exact: false}
		if st.Exact && st.Seq <= w.Lower {
			return []any{wins} // its _seq is above its token, which is at least the state's
		}
		loses := st
		if !st.Exact {
			loses.Seq = bound
		}
		return []any{wins, loses}
	},
	DescribeOperation: func(input, output any) string {
		if w, ok := input.(writeInput); ok {
			if w.Seq == 0 {
				return fmt.Sprintf("add %q (_seq unknown, > %d)", w.Value, w.Lower)
			}
			return fmt.Sprintf("add %q (_seq %d, shard %s)", w.Value, w.Seq, w.Shard)
		}
		return "read " + describe(output.(string))
	},
	DescribeState: func(state any) string {
		st := state.(regState)
		if st.Exact {
			return fmt.Sprintf("%s (_seq %d)", describe(st.Value), st.Seq)
		}
		return fmt.Sprintf("%s (_seq > %d)", describe(st.Value), st.Seq)
	},
}

// readInput marks a read; its output is the value returned.
type readInput struct{}

// Linearizable checks each id's register with porcupine, reads modelled as the
// package doc says.
func Linearizable(ops []Op, cfg Config) Result {
	x, _ := newIndex(ops)
	model := registerModel.ToModel()
	model.DescribeOperationMetadata = func(info any) string {
		if info == nil {
			return ""
		}
		i := info.(int)
		return fmt.Sprintf("op #%d: %s", i, ops[i])
	}
	var t0 time.Time
	for _, op := range ops {
		if t0.IsZero() || op.Call.Before(t0) {
			t0 = op.Call
		}
	}
	ns := func(t time.Time) int64 { return int64(t.Sub(t0)) }
	res := Result{IDs: len(x.ids)}
	for _, id := range x.ids {
		// A write that may appear at any time after its call, or never (unsealed,
		// or of unknown outcome), must appear before the first return of a read
		// that saw it; one that no read saw can be placed after every read, so it
		// is left out: the verdict is the same and the search far smaller.
		seenBy := map[string]time.Time{}
		for _, r := range x.reads[id] {
			if first, ok := seenBy[r.value]; r.value != "" && (!ok || r.ret.Before(first)) {
				seenBy[r.value] = r.ret
			}
		}
		var hist []porcupine.Operation
		for _, w := range x.writes[id] {
			var ret int64
			switch first, seen := seenBy[w.value]; {
			case w.sealed:
				ret = ns(w.ret)
			case seen:
				ret = ns(first)
			default:
				continue
			}
			hist = append(hist, porcupine.Operation{ClientId: ops[w.op].Client, Input: writeInput{Value: w.value, Seq: w.seq, Lower: w.lower, Shard: ops[w.op].Worker},
				Call: ns(w.call), Output: "", Return: ret, Metadata: w.op})
		}
		for _, r := range x.reads[id] {
			hist = append(hist, porcupine.Operation{ClientId: ops[r.op].Client, Input: readInput{},
				Call: ns(x.boundCall(r, cfg.Staleness)), Output: r.value, Return: ns(r.ret), Metadata: r.op})
		}
		verdict, info := porcupine.CheckOperationsVerbose(model, hist, cfg.Timeout)
		switch verdict {
		case porcupine.Unknown:
			res.Undecided = append(res.Undecided, id)
			continue
		case porcupine.Ok:
			continue
		}
		v := x.violation(RuleLinearizable, id, "no order of the writes and reads explains the values read", x.culprits(hist, info)...)
		if cfg.VisualizeDir != "" {
			path := filepath.Join(cfg.VisualizeDir, "history-"+unsafeChars.ReplaceAllString(id, "_")+".html")
			err := os.MkdirAll(cfg.VisualizeDir, 0o755)
			if err == nil {
				err = porcupine.VisualizePath(model, info, path)
			}
			if err == nil {
				v.Detail += "; visualization: " + path
				res.Visualizations = append(res.Visualizations, path)
			} else {
				v.Detail += fmt.Sprintf("; visualization not written: %v", err)
			}
		}
		res.Violations = append(res.Violations, v)
	}
	return res
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// boundCall is the call time porcupine gets for a read: its real call, moved back
// to the first answer it is not bound to see (a sealed write its token does not
// cover, answered less than staleness before it), and by the whole staleness when
// a write of the id that it need not see yet (unsealed, or of unknown outcome)
// started before it: another read may have seen that write through a fresher
// snapshot.
func (x *index) boundCall(r read, staleness time.Duration) time.Time {
	call := r.call
	for _, w := range x.writes[r.id] {
		if !w.call.Before(r.call) {
			continue
		}
		switch {
		case !w.sealed:
			call = minTime(call, r.call.Add(-staleness))
		case w.seq > r.after && w.ret.Before(r.call) && !w.ret.Before(r.call.Add(-staleness)):
			call = minTime(call, w.ret)
		}
	}
	return call
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// culprits names the operations at the point where porcupine gave up: the last
// ones of the longest order it found, and the earliest one it could not place.
func (x *index) culprits(hist []porcupine.Operation, info porcupine.LinearizationInfo) []int {
	parts := info.PartialLinearizations()
	if len(parts) == 0 {
		return nil
	}
	var longest []int
	for _, l := range parts[0] {
		if len(l) > len(longest) {
			longest = l
		}
	}
	placed := map[int]bool{}
	for _, i := range longest {
		placed[i] = true
	}
	var out []int
	for _, i := range longest[max(0, len(longest)-2):] {
		out = append(out, hist[i].Metadata.(int))
	}
	first := -1
	for i := range hist {
		if !placed[i] && (first < 0 || hist[i].Call < hist[first].Call) {
			first = i
		}
	}
	if first >= 0 {
		out = append(out, hist[first].Metadata.(int))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
