package history

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind string

// The operation kinds.
const (
	Add  Kind = "add"
	Get  Kind = "get"
	List Kind = "list"
)

// Outcome is what a client learnt of an operation.
type Outcome string

// The outcomes. A failed or unknown add may or may not be stored; a failed or
// unknown read observed nothing and is not checked.
const (
	OK      Outcome = "ok"
	Failed  Outcome = "failed"  // an error answer
	Unknown Outcome = "unknown" // no answer (timeout, connection lost)
)

// Row is one id and its value: the row an add wrote, or one a read returned.
// Value "" in a read is "no row".
type Row struct {
	ID    string `json:"id"`
	Value string `json:"value"`
}

// Op is one operation of a client.
type Op struct {
	Client int    `json:"client"`
	Worker string `json:"worker"`
	Kind   Kind   `json:"kind"`
	// Rows: an add's one row; a get's id and value; every row a list returned (a
	// list returns the whole store: an id it leaves out has no row).
	Rows    []Row     `json:"rows"`
	Flush   bool      `json:"flush,omitempty"`
	After   uint64    `json:"after,omitempty"` // the causal token sent (0: none)
	Seq     uint64    `json:"seq,omitempty"`   // the token an add answered: its row's _seq
	Call    time.Time `json:"call"`
	Return  time.Time `json:"return"`
	Outcome Outcome   `json:"outcome"`
	Err     string    `json:"err,omitempty"`
}

func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client %d %s via %s", o.Client, o.Kind, o.Worker)
	if o.Kind != List || len(o.Rows) <= 3 {
		for _, r := range o.Rows {
			fmt.Fprintf(&b, " %s=%q", r.ID, r.Value)
		}
	} else {
		fmt.Fprintf(&b, " (%d rows)", len(o.Rows))
	}
	if o.Flush {
		b.WriteString(" flush")
	}
	if o.After != 0 {
		fmt.Fprintf(&b, " after=%d", o.After)
	}
	if o.Seq != 0 {
		fmt.Fprintf(&b, " seq=%d", o.Seq)
	}
	fmt.Fprintf(&b, " %s", o.Outcome)
	if o.Err != "" {
		fmt.Fprintf(&b, " (%s)", o.Err)
	}
	return b.String()
}

// Recorder collects operations from concurrent clients.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
}

// Record adds a finished operation.
func (r *Recorder) Record(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
}

// Ops returns the operations recorded so far, ordered by call time (the index of
// an operation in this slice is how violations name it).
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	ops := slices.Clone(r.ops)
	r.mu.Unlock()
	slices.SortStableFunc(ops, func(a, b Op) int { return a.Call.Compare(b.Call) })
	return ops
}
