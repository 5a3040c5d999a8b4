package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// MaintainResult is what one worker's maintenance task reports.
type MaintainResult struct {
	// Summary is one line for the task's detail.
	Summary string
	// Stats are the counts of the worker's answer (compaction, cleanup, verify
	// and repair), for the task's stats.
	Stats tasks.Stats
	// Problems are what a verify or repair found ("<path>: missing").
	Problems []string
}

// MaintainCaller is a Caller that can run a maintenance task on a worker (the
// GRPCCaller can). Maintain returns an error wrapping ErrUnreachable when the
// worker could not be reached before it admitted the call.
type MaintainCaller interface {
	Maintain(ctx context.Context, w Worker, kind tasks.Kind, target registry.Target, fencingToken int64) (MaintainResult, error)
}

// Maintenance runs compact, verify and repair tasks: each on one live worker, the
// same one for a target while the live workers stay the same (its caches hold the
// target's footers and filters), or the next in ring order when that one cannot be
// reached. The task's fencing token goes with the call, as for merges: the
// target's maintenance lock keeps maintenance of a store one task at a time (a
// merge may run beside it, on the other lock; see tasks.Kind.Lane).
type Maintenance struct {
	Discovery Discovery
	Caller    MaintainCaller
	Logger    *slog.Logger
}

// Ready implements Gate like FanOut.Ready: maintenance waits for a live worker.
func (m *Maintenance) Ready(ctx context.Context) error { return anyWorker(ctx, m.Discovery) }

// Run implements Runner. A verify or repair that found problems fails its task,
// naming them: a missing or damaged object needs a human.
func (m *Maintenance) Run(ctx context.Context, c *tasks.Claim) (tasks.Report, error) {
	workers, err := m.Discovery.Workers(ctx)
	if err != nil {
		return tasks.Report{}, fmt.Errorf("discover workers: %w", err)
	}
	if len(workers) == 0 {
		return tasks.Report{}, ErrNoLiveWorkers
	}
	log := m.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("task", c.Task.ID, "kind", c.Task.Kind, "target", c.Task.Target, "fencing_token", c.FencingToken)
	var unreachable []string
	for _, w := range ringFrom(c.Task.Target.String(), workers) {
		r, err := m.Caller.Maintain(ctx, w, c.Task.Kind, c.Task.Target, c.FencingToken)
		switch {
		case errors.Is(err, ErrUnreachable):
			log.Warn("maintenance: worker unreachable, asking the next", "worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
			unreachable = append(unreachable, w.InstanceID)
			continue
		case err != nil && errclass.Of(err) == errclass.Gone:
			return tasks.Report{}, errclass.Wrap(errclass.Gone, fmt.Errorf("worker %s (%s): %w", w.InstanceID, w.GRPCAddr, err))
		case err != nil:
			return tasks.Report{}, fmt.Errorf("worker %s (%s): %w", w.InstanceID, w.GRPCAddr, err)
		}
		report := tasks.Report{Detail: r.Summary + " (on " + w.InstanceID + ")", Stats: r.Stats}
		if len(r.Problems) > 0 && c.Task.Kind == tasks.KindVerify {
			return report, fmt.Errorf("%s: %d missing or damaged objects: %s", w.InstanceID, len(r.Problems), strings.Join(r.Problems, "; "))
		}
		return report, nil
	}
	return tasks.Report{}, fmt.Errorf("no worker could be reached: %s", strings.Join(unreachable, ", "))
}
