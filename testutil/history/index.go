package history

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// Violation is one way a history breaks the model, naming the operations involved
// by their index in the history and their description.
type Violation struct {
	Rule   string
	ID     string
	Ops    []int
	Detail string
	opText []string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, id %q: %s", v.Rule, v.ID, v.Detail)
	for i, n := range v.Ops {
		fmt.Fprintf(&b, "\n    op #%d: %s", n, v.opText[i])
	}
	return b.String()
}

func violation(ops []Op, rule, id, detail string, idx ...int) Violation {
	v := Violation{Rule: rule, ID: id, Ops: idx, Detail: detail}
	for _, i := range idx {
		v.opText = append(v.opText, fmt.Sprintf("%s [%s .. %s]", ops[i], ops[i].Call.Format("15:04:05.000"), ops[i].Return.Format("15:04:05.000")))
	}
	return v
}

// write is one add's row.
type write struct {
	op    int
	id    string
	value string
	seq   uint64 // its _seq when acknowledged; 0: unknown, greater than lower
	lower uint64
	// sealed: acknowledged with ?flush=true, so visible from its return on.
	sealed    bool
	call, ret time.Time
}

// read is one observation of one id: a get, or one id of a list.
type read struct {
	op        int
	worker    string
	kind      Kind
	id, value string
	after     uint64
	call, ret time.Time
}

// index is a history taken apart into writes and per-id reads.
type index struct {
	ops     []Op
	byValue map[string]*write
	writes  map[string][]*write // by id
	reads   map[string][]read   // by id
	ids     []string
}

func newIndex(ops []Op) (*index, []Violation) {
	x := &index{ops: ops, byValue: map[string]*write{}, writes: map[string][]*write{}, reads: map[string][]read{}}
	var bad []Violation
	for i, op := range ops {
		if op.Kind != Add {
			continue
		}
		for _, r := range op.Rows {
			w := &write{op: i, id: r.ID, value: r.Value, sealed: op.Outcome == OK && op.Flush, call: op.Call, ret: op.Return}
			if op.Outcome == OK && len(op.Rows) == 1 {
				w.seq = op.Seq
			} else {
				w.lower = op.After
			}
			if r.Value == "" {
				bad = append(bad, violation(ops, "history", r.ID, "an add wrote the empty value, which stands for no row", i))
				continue
			}
			if prev, ok := x.byValue[r.Value]; ok {
				bad = append(bad, violation(ops, "history", r.ID, "two adds wrote the same value: reads cannot tell them apart", prev.op, i))
				continue
			}
			x.byValue[r.Value] = w
			x.writes[r.ID] = append(x.writes[r.ID], w)
		}
	}
	// A list is a read of every id: every id written, and any id a list returned
	// that no add wrote (Direct names those).
	for _, op := range ops {
		if op.Kind == List && op.Outcome == OK {
			for _, r := range op.Rows {
				if _, ok := x.writes[r.ID]; !ok {
					x.writes[r.ID] = nil
				}
			}
		}
	}
	x.ids = make([]string, 0, len(x.writes))
	for id := range x.writes {
		x.ids = append(x.ids, id)
	}
	slices.Sort(x.ids)
	for i, op := range ops {
		if op.Outcome != OK {
			continue
		}
		switch op.Kind {
		case Get:
			for _, r := range op.Rows {
				x.reads[r.ID] = append(x.reads[r.ID], read{op: i, worker: op.Worker, kind: Get, id: r.ID, value: r.Value, after: op.After, call: op.Call, ret: op.Return})
			}
		case List:
			listed := map[string]string{}
			for _, r := range op.Rows {
				listed[r.ID] = r.Value
			}
			for _, id := range x.ids {
				x.reads[id] = append(x.reads[id], read{op: i, worker: op.Worker, kind: List, id: id, value: listed[id], after: op.After, call: op.Call, ret: op.Return})
			}
		}
	}
	return x, bad
}

// order is the version of the write a read's value came from: its _seq and the
// worker it was written through, whose shard it went into (the zero version for
// no row); ok is false when that write's _seq is unknown or the value was never
// written.
func (x *index) order(value string) (v rowkey.Version, ok bool) {
	if value == "" {
		return rowkey.Version{}, true
	}
	w := x.byValue[value]
	if w == nil || w.seq == 0 {
		return rowkey.Version{}, false
	}
	return rowkey.Version{Seq: w.seq, Shard: x.ops[w.op].Worker}, true
}

// Reads returns how many reads of one id (a get, or one id of a list) the history
// holds: what the checkers check.
func Reads(ops []Op) int {
	x, _ := newIndex(ops)
	n := 0
	for _, rs := range x.reads {
		n += len(rs)
	}
	return n
}
