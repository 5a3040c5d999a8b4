package history

import (
	"fmt"
	"slices"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// The rules of Direct, as violations name them.
const (
	RuleNeverWritten = "value never written"
	RuleFuture       = "read a write that started after it"
	RuleWentBack     = "read through one worker went back"
	RuleToken        = "read missed a write its causal token covers"
)

// Direct checks the rules that need no search, over every read of ops: values come
// from adds that started before the read returned, reads through one worker never
// go back (gets and list rows alike), and a read carrying a causal token sees every
// write acknowledged with ?flush=true before its call that the token covers.
func Direct(ops []Op) []Violation {
	x, out := newIndex(ops)
	for _, id := range x.ids {
		reads := x.reads[id]
		for _, r := range reads {
			if r.value == "" {
				continue
			}
			w := x.byValue[r.value]
			switch {
			case w == nil || w.id != id:
				out = append(out, violation(ops, RuleNeverWritten, id, fmt.Sprintf("%s returned %q", r.kind, r.value), r.op))
			case w.call.After(r.ret):
				out = append(out, violation(ops, RuleFuture, id, fmt.Sprintf("%s returned %q before its add was called", r.kind, r.value), w.op, r.op))
			}
		}
		out = append(out, x.wentBack(id, reads)...)
		out = append(out, x.missedToken(id, reads)...)
	}
	return out
}

// wentBack checks, per worker, that no read is older than one that returned
// through the same worker before it was called. Older is by rowkey.Version, the
// order the store resolves writes by: _seq, then the shard (the writing worker).
// Two workers can give one id's writes the same _seq (clocks in the same
// millisecond, or both counting up from one observed _seq), so a read may move
// from the tied write of the shard that sorts first to the other one as the
// latter becomes visible, never back.
func (x *index) wentBack(id string, reads []read) []Violation {
	byWorker := map[string][]read{}
	for _, r := range reads {
		byWorker[r.worker] = append(byWorker[r.worker], r)
	}
	var out []Violation
	for _, worker := range sortedKeys(byWorker) {
		rs := byWorker[worker]
		byRet := slices.Clone(rs)
		slices.SortFunc(byRet, func(a, b read) int { return a.ret.Compare(b.ret) })
		slices.SortFunc(rs, func(a, b read) int { return a.call.Compare(b.call) })
		// floor: the newest read among those returned before the call.
		var floor *read
		var floorV rowkey.Version
		next := 0
		for _, r := range rs {
			for ; next < len(byRet) && byRet[next].ret.Before(r.call); next++ {
				if v, ok := x.order(byRet[next].value); ok && (floor == nil || v.Newer(floorV)) {
					floor, floorV = &byRet[next], v
				}
			}
			if floor == nil {
				continue
			}
			if v, ok := x.order(r.value); ok && floorV.Newer(v) {
				detail := fmt.Sprintf("%s through %s returned %s after a %s through it returned %s", r.kind, worker, describe(r.value), floor.kind, describe(floor.value))
				if v.Seq == floorV.Seq {
					detail += fmt.Sprintf(", writes of the same _seq %d through %s and %s", v.Seq, v.Shard, floorV.Shard)
				}
				out = append(out, x.violation(RuleWentBack, id, detail, floor.op, r.op))
			}
		}
	}
	return out
}

// missedToken checks that a read carrying a token returns, for its id, a value
// at least as new as the sealed writes acknowledged before its call that the
// token covers.
func (x *index) missedToken(id string, reads []read) []Violation {
	var out []Violation
	for _, r := range reads {
		if r.after == 0 {
			continue
		}
		var must *write
		for _, w := range x.writes[id] {
			if w.sealed && w.seq != 0 && w.seq <= r.after && w.ret.Before(r.call) && (must == nil || w.seq > must.seq) {
				must = w
			}
		}
		if must == nil {
			continue
		}
		if v, ok := x.order(r.value); ok && v.Seq < must.seq {
			out = append(out, x.violation(RuleToken, id,
				fmt.Sprintf("%s with token %d returned %s, older than the sealed write of %q", r.kind, r.after, describe(r.value), must.value),
				must.op, r.op))
		}
	}
	return out
}

func (x *index) violation(rule, id, detail string, idx ...int) Violation {
	return violation(x.ops, rule, id, detail, idx...)
}

func describe(value string) string {
	if value == "" {
		return "no row"
	}
	return fmt.Sprintf("%q", value)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
