package tasks

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ErrInvalidArgument means a kind, state, target, task id or option that the store
// refuses; the wrapping error names the value and the problem. A malformed target
// also wraps registry.ErrInvalidName.
var ErrInvalidArgument = errclass.New(errclass.Invalid, "invalid argument")

// Kind is what a task does to its target.
type Kind string

// The task kinds.
const (
	// KindMergeWAL merges the target's pending WAL generations into its base table,
	// calling the workers one after another.
	KindMergeWAL Kind = "merge_wal"
	// KindCompact rewrites the target's small fragments and fragments with many
	// deleted rows into fewer, then deletes the manifests retention lets go and the
	// files nothing kept references (the base table's and its WAL shards').
	KindCompact Kind = "compact"
	// KindVerify checks that every object the target's newest base table version
	// references exists with the right size and decodes; it reports, changes nothing.
	KindVerify Kind = "verify"
	// KindRepair is a verify that then commits a version without the fragments it
	// found missing or damaged. Only an operator enqueues it: silent data removal is
	// never automatic.
	KindRepair Kind = "repair"
	// KindExport writes a snapshot of the target's live rows (at a version, or
	// now) to a bucket as Parquet files and a manifest (Task.Export says where and
	// what). Each enqueue is a task of its own, idempotent by its id: two exports
	// of one store to two destinations are two tasks (Kind.Deduplicated).
	KindExport Kind = "export"
)

// SkippedDetail is the detail of a task recorded done without running because its
// store was deleted before or while it ran.
const SkippedDetail = "skipped: store deleted"

// Kinds lists every task kind, in a fixed order.
//
// There is no id index kind: a point lookup reads the bounds and bloom filter of
// each fragment (cached, a few KiB each) and opens only fragments whose filter
// admits the id, and compaction keeps the fragment count under twice its
// threshold, so a table-level index would save a bounded number of cached filter
// probes per lookup while adding a second structure every commit must update.
func Kinds() []Kind { return []Kind{KindMergeWAL, KindCompact, KindVerify, KindRepair, KindExport} }

// Lane is which of a target's two locks a task of a kind runs under: merges
// under one, maintenance under the other, so that a store's merges go on while it
// is compacted, verified or repaired.
type Lane string

const (
	// LaneMerge is merge_wal's: P/target-locks/<target>.
	LaneMerge Lane = "merge"
	// LaneMaintenance is compact's, verify's, repair's and export's:
	// P/maintenance-locks/<target>. An export reads a version's files for its
	// whole run, so it must not run beside the compaction whose cleanup deletes
	// the files retention let go.
	LaneMaintenance Lane = "maintenance"
)

// Lane is the lane tasks of k run in.
func (k Kind) Lane() Lane {
	if k == KindMergeWAL {
		return LaneMerge
	}
	return LaneMaintenance
}

// Deduplicated reports whether an enqueue of k returns the live task of its kind
// and target instead of adding one (Enqueue's dedupe key). Every kind but export
// is: an export names its destination, so each is its own task, made idempotent
// by its id instead (EnqueueExport).
func (k Kind) Deduplicated() bool { return k != KindExport }

// CancelsRunning reports whether a running task of k can be cancelled (Cancel
// records the request, and its runner stops the work): an export may run for an
// hour, so an operator must be able to stop it. Merges and maintenance run to
// their end.
func (k Kind) CancelsRunning() bool { return k == KindExport }

// Requeued reports whether a failure of k that a retry may mend (a worker that
// died mid-run, a throttled store: errclass.Class.Retryable) puts the task back
// in the queue (Queue.Retry) rather than failing it, up to MaxAttempts claims.
// Kinds that sweeps enqueue again are retried by the next sweep instead; nothing
// enqueues an export again but its client.
func (k Kind) Requeued() bool { return k == KindExport }

// MaxAttempts bounds the claims of a task of a Requeued kind: the claim that
// fails with a retryable error for the MaxAttempts-th time fails the task.
const MaxAttempts = 5

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return slices.Contains(Kinds(), k) }

// ParseKind returns the kind named s, or an ErrInvalidArgument naming s.
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if err := validateKind(k); err != nil {
		return "", err
	}
	return k, nil
}

func validateKind(k Kind) error {
	if k.Valid() {
		return nil
	}
	names := make([]string, 0, len(Kinds()))
	for _, known := range Kinds() {
		names = append(names, string(known))
	}
	return fmt.Errorf("%w: unknown task kind %q (known: %s)", ErrInvalidArgument, string(k), strings.Join(names, ", "))
}

// State is where a task is in its life: queued -> running -> done | failed.
// running -> queued happens only by orphan recovery or Release.
type State string

// The task states.
const (
	StateQueued  State = "queued"
	StateRunning State = "running"
	StateDone    State = "done"
	StateFailed  State = "failed"
)

// States lists every state, in life order.
func States() []State { return []State{StateQueued, StateRunning, StateDone, StateFailed} }

// Valid reports whether s is a known state.
func (s State) Valid() bool { return slices.Contains(States(), s) }

// Live reports whether a task in state s can still run: queued or running.
func (s State) Live() bool { return s == StateQueued || s == StateRunning }

// Finished reports whether s is final: done or failed.
func (s State) Finished() bool { return s == StateDone || s == StateFailed }

// ParseState returns the state named s, or an ErrInvalidArgument naming s.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("%w: unknown task state %q (known: queued, running, done, failed)", ErrInvalidArgument, s)
	}
	return st, nil
}

// Task is the record stored as JSON at P/tasks/<id>, and copied to P/queue/<id>
// while queued and to P/running/<id> while running.
type Task struct {
	// ID is a UUIDv7: ids sort in enqueue order, so P/queue/ in key order is FIFO.
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Target is stored as its text ("<name>", "generic:<name>").
	Target registry.Target `json:"target"`
	State  State           `json:"state"`
	// Error says why a failed task failed ("cancelled", "dependency <id> did not
	// complete", or the runner's error).
	Error string `json:"error,omitempty"`
	// Detail is the runner's summary, e.g. "merged 12 generations across 3/3 workers".
	Detail string `json:"detail,omitempty"`
	// Stats are the same facts as numbers (Report.Stats), for programs; left out
	// until the task finishes, and in records written before it existed.
	Stats      Stats     `json:"stats,omitzero"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// DueAt is when the task should start at the latest, as its enqueuer judged
	// (EnqueueDue): merges on demand set it to when the store's oldest pending
	// generation reaches the age its merge must start at to land by
	// MERGE_MAX_DELAY, or, when its count made it due, to when the count reached
	// the threshold. Zero (every other enqueue, and records written before it
	// existed) means due at EnqueuedAt. Claim takes the task due first.
	DueAt time.Time `json:"due_at,omitzero"`
	// StartedAt is when the current or last claim started it.
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// DependsOn are tasks that must be done before this one may be claimed; if one
	// of them fails, this one fails too.
	DependsOn []string `json:"depends_on,omitempty"`
	// Attempts counts claims, including ones lost to an expired lease.
	Attempts int `json:"attempts"`
	// ClaimToken is the token of the claim it runs under, while running. It lets
	// orphan recovery remove a target lock of this claim and never another's.
	ClaimToken string `json:"claim_token,omitempty"`
	// FencingToken is the fencing token of the claim that finished the task.
	FencingToken int64 `json:"fencing_token,omitempty"`

	// Export is what an export task writes where: package exportfmt's Spec as
	// JSON (the queue stores it and compares it, nothing more); export tasks
	// only.
	Export json.RawMessage `json:"export,omitempty"`
	// Progress is how far the current or last run got, as its runner reported
	// it while running (UpdateProgress) and when it ended; nil until reported.
	Progress *Progress `json:"progress,omitempty"`
	// CancelRequested is set by Cancel on a running task of a kind that stops
	// when cancelled (Kind.CancelsRunning): its runner stops the work and the
	// task fails with "cancelled".
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Exported is a done export's manifest in brief.
	Exported *ExportResult `json:"exported,omitempty"`
}

// Due is when the task should start at the latest: DueAt, or EnqueuedAt when
// its enqueuer set none.
func (t Task) Due() time.Time {
	if t.DueAt.IsZero() {
		return t.EnqueuedAt
	}
	return t.DueAt
}

// validateTarget checks a target the way the registry does: a known kind and a
// valid store name, so the keys built from it are the registry's.
func validateTarget(target registry.Target) error {
	if err := target.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

// validateID checks that id is a task id (a UUID), which also keeps '/' and
// friends out of keys built from it.
func validateID(what, id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return fmt.Errorf("%w: %s %q is not a task id (a UUID)", ErrInvalidArgument, what, id)
	}
	return nil
}

// maxDependencies bounds depends_on so the enqueue transaction stays within
// etcd's --max-txn-ops (128 by default): one compare per dependency.
const maxDependencies = 64

func validateDependencies(ids []string) ([]string, error) {
	if len(ids) > maxDependencies {
		return nil, fmt.Errorf("%w: %d dependencies, at most %d", ErrInvalidArgument, len(ids), maxDependencies)
	}
	var out []string
	for _, id := range ids {
		if err := validateID("dependency", id); err != nil {
			return nil, err
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}
