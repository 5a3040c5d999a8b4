package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// ExportCall is one export a worker runs: the task's target, fencing token, id
// (which names the export's files) and spec.
type ExportCall struct {
	Target       registry.Target
	FencingToken int64
	TaskID       string
	Spec         exportfmt.Spec
}

// ExportCaller is a Caller that can have a worker run an export (the GRPCCaller
// can). Export calls progress with each report the worker streams, and returns
// the manifest's summary and the last progress; an error wrapping ErrUnreachable
// when the worker could not be reached before it admitted the call.
type ExportCaller interface {
	Export(ctx context.Context, w Worker, call ExportCall, progress func(tasks.Progress)) (tasks.ExportResult, tasks.Progress, error)
}

// ExportTasks is the part of the task queue an export's run uses: recording its
// progress under its claim, and hearing of a cancel (tasks.Queue).
type ExportTasks interface {
	UpdateProgress(ctx context.Context, c *tasks.Claim, p tasks.Progress) (tasks.Task, error)
	WatchCancel(ctx context.Context, id string) <-chan struct{}
}

// DefaultExportProgressInterval is how often at most an export's progress is
// written to etcd: the worker streams it about every second, and an operator
// watching a long export needs no more.
const DefaultExportProgressInterval = 2 * time.Second

// progressWriteTimeout bounds one progress write, which holds up the reading of
// the worker's stream while it runs.
const progressWriteTimeout = 5 * time.Second

// Exporter runs export tasks: each on one live worker (any worker reads any
// store; none needs to own a shard of it), the first that can be reached, the
// worker of the previous attempt last. The call carries the task's fencing
// token of the target's maintenance lock, as Maintenance's do.
//
// While the worker streams progress, the run records it (at most every
// ProgressInterval, under the claim: tasks.Queue.UpdateProgress) and watches the
// task for a cancel request, which cancels the call: the worker stops writing
// and no manifest is written. What becomes of a failure is the scheduler's:
// one a retry may mend (the worker died mid-stream: UNAVAILABLE) puts the task
// back in the queue (tasks.ShouldRetry), one that blames the spec or the
// destination (INVALID_ARGUMENT, ALREADY_EXISTS, NOT_FOUND) fails it at once
// with the worker's message. A worker that predates Export (UNIMPLEMENTED) is
// passed over; if every live one does, the task fails saying so.
type Exporter struct {
	Discovery Discovery
	Caller    ExportCaller
	Tasks     ExportTasks
	// ProgressInterval spaces progress writes (DefaultExportProgressInterval).
	ProgressInterval time.Duration
	Logger           *slog.Logger
	// Now tells the time (time.Now).
	Now func() time.Time
}

// Ready implements Gate like Maintenance.Ready: exports wait for a live worker.
func (e *Exporter) Ready(ctx context.Context) error { return anyWorker(ctx, e.Discovery) }

// errNoExportWorker fails an export that no live worker can run: every one
// predates Export. Retrying cannot help until they are upgraded.
var errNoExportWorker = errclass.New(errclass.Precondition, "no live worker runs exports")

// errExportUnreachable is an export that found no live worker to reach: a
// retry (after discovery caught up) may.
var errExportUnreachable = errclass.New(errclass.Unavailable, "no worker could be reached")

// Run implements Runner for export tasks.
func (e *Exporter) Run(ctx context.Context, c *tasks.Claim) (tasks.Report, error) {
	spec, err := TaskExportSpec(c.Task)
	if err != nil {
		return tasks.Report{}, err
	}
	if c.Task.CancelRequested {
		// Asked to stop, then requeued (its master's lease ran out) before it did.
		return tasks.Report{Progress: c.Task.Progress}, tasks.ErrCancelled
	}
	workers, err := e.Discovery.Workers(ctx)
	if err != nil {
		return tasks.Report{}, fmt.Errorf("discover workers: %w", err)
	}
	if len(workers) == 0 {
		return tasks.Report{}, ErrNoLiveWorkers
	}
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("task", c.Task.ID, "kind", c.Task.Kind, "target", c.Task.Target, "fencing_token", c.FencingToken)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	rec := &exportRecorder{e: e, c: c, log: log, stop: stop}
	asked := e.Tasks.WatchCancel(runCtx, c.Task.ID)
	go func() {
		select {
		case <-asked:
			rec.cancel()
		case <-runCtx.Done():
		}
	}()

	call := ExportCall{Target: c.Task.Target, FencingToken: c.FencingToken, TaskID: c.Task.ID, Spec: spec}
	var unreachable, old []string
	for _, w := range exportOrder(workers, c.Task) {
		res, last, err := e.Caller.Export(runCtx, w, call, rec.progress)
		if err == nil {
			// Done, whatever a cancel that came after the manifest was written says.
			res.Manifest = exportfmt.Redact(res.Manifest)
			p := rec.final(last, w)
			p.Rows, p.Files, p.Bytes = res.Rows, res.Files, res.Bytes
			detail := fmt.Sprintf("exported %s in %s (%s) of version %d to %s (on %s)",
				plural(res.Rows, "row"), plural(res.Files, "file"), humanize.IBytes(uint64(max(res.Bytes, 0))), res.Version,
				exportfmt.Redact(spec.Destination), w.InstanceID)
			return tasks.Report{Detail: detail, Progress: &p, Exported: &res}, nil
		}
		switch {
		case rec.cancelled():
			p := rec.final(last, w)
			log.Info("export stopped: the task was cancelled", "worker", w.InstanceID, "rows", p.Rows)
			return tasks.Report{Progress: &p}, fmt.Errorf("%w (on %s after %s)", tasks.ErrCancelled, w.InstanceID, plural(p.Rows, "row"))
		case errors.Is(err, ErrUnreachable):
			log.Warn("export: worker unreachable, asking the next", "worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
			unreachable = append(unreachable, w.InstanceID)
		case status.Code(err) == codes.Unimplemented:
			log.Warn("export: worker predates exports, asking the next", "worker", w.InstanceID, "version", w.Version)
			old = append(old, w.InstanceID)
		default:
			p := rec.final(last, w)
			return tasks.Report{Progress: &p}, fmt.Errorf("worker %s (%s): %w", w.InstanceID, w.GRPCAddr, err)
		}
	}
	if len(old) > 0 && len(unreachable) == 0 {
		return tasks.Report{}, fmt.Errorf("%w: %s answered UNIMPLEMENTED (they predate exports): upgrade them", errNoExportWorker, strings.Join(old, ", "))
	}
	return tasks.Report{}, fmt.Errorf("%w: %s", errExportUnreachable, strings.Join(append(unreachable, old...), ", "))
}

// exportOrder is the order workers are asked in: discovery's, with the worker
// the previous attempt ran on (its progress names it) last, since that attempt
// failed there (the worker may be the one that died).
func exportOrder(workers []Worker, t tasks.Task) []Worker {
	out := slices.Clone(workers)
	if t.Progress == nil || t.Progress.Worker == "" {
		return out
	}
	slices.SortStableFunc(out, func(a, b Worker) int {
		aLast, bLast := a.InstanceID == t.Progress.Worker, b.InstanceID == t.Progress.Worker
		switch {
		case aLast == bLast:
			return 0
		case aLast:
			return 1
		}
		return -1
	})
	return out
}

// exportRecorder records one run's progress as the worker streams it, and
// stops the run when the task is cancelled or the claim lost.
type exportRecorder struct {
	e    *Exporter
	c    *tasks.Claim
	log  *slog.Logger
	stop context.CancelFunc

	mu        sync.Mutex
	asked     bool // cancel requested
	last      tasks.Progress
	written   time.Time
	writeErrs int
}

func (r *exportRecorder) now() time.Time {
	if r.e.Now != nil {
		return r.e.Now()
	}
	return time.Now()
}

// cancel marks the run cancelled and stops its call.
func (r *exportRecorder) cancel() {
	r.mu.Lock()
	r.asked = true
	r.mu.Unlock()
	r.stop()
}

func (r *exportRecorder) cancelled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked
}

// progress is the callback of the worker's stream: it keeps the last report
// and writes it at most every ProgressInterval. Called on the stream's reading
// goroutine only.
func (r *exportRecorder) progress(p tasks.Progress) {
	r.mu.Lock()
	r.last = p
	r.mu.Unlock()
	interval := r.e.ProgressInterval
	if interval <= 0 {
		interval = DefaultExportProgressInterval
	}
	now := r.now()
	if !r.written.IsZero() && now.Sub(r.written) < interval {
		return
	}
	r.written = now
	ctx, cancel := context.WithTimeout(context.Background(), progressWriteTimeout)
	defer cancel()
	t, err := r.e.Tasks.UpdateProgress(ctx, r.c, p)
	switch {
	case errors.Is(err, tasks.ErrClaimLost):
		// Another master may run the task now: this run's worker must stop.
		r.log.Warn("export: the claim is lost; stopping this run", "err", err)
		r.stop()
	case err != nil:
		if r.writeErrs++; r.writeErrs == 1 {
			r.log.Warn("export: recording progress failed (etcd unavailable?); the export goes on", "err", err)
		}
	case t.CancelRequested:
		r.cancel()
	}
}

// final is the progress to record at the end of the run on w: the last report,
// or what the call returned if it says more.
func (r *exportRecorder) final(last tasks.Progress, w Worker) tasks.Progress {
	r.mu.Lock()
	p := r.last
	r.mu.Unlock()
	if last.Rows >= p.Rows {
		p = last
	}
	if p.Worker == "" {
		p.Worker = w.InstanceID
	}
	p.UpdatedAt = time.Time{} // Finish stamps it
	return p
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return humanize.Comma(n) + " " + noun + "s"
}

// TaskExportSpec is the spec an export task holds (Task.Export). A task whose
// spec is missing or does not decode fails: nothing can run it.
func TaskExportSpec(t tasks.Task) (exportfmt.Spec, error) {
	var spec exportfmt.Spec
	if len(t.Export) == 0 {
		return spec, fmt.Errorf("%w: export task %s has no spec", exportfmt.ErrInvalidSpec, t.ID)
	}
	if err := json.Unmarshal(t.Export, &spec); err != nil {
		return spec, fmt.Errorf("%w: export task %s: its spec does not decode: %v", exportfmt.ErrInvalidSpec, t.ID, err)
	}
	return spec, nil
}

// ExportSpecProto is the wire form of an export's spec.
func ExportSpecProto(s exportfmt.Spec) *tidemarkv1.ExportSpec {
	return &tidemarkv1.ExportSpec{Destination: s.Destination, Version: s.Version, Columns: s.Columns, Filter: s.Filter}
}

// ExportSpecOf is the spec of its wire form (nil: the zero spec).
func ExportSpecOf(s *tidemarkv1.ExportSpec) exportfmt.Spec {
	return exportfmt.Spec{Destination: s.GetDestination(), Version: s.GetVersion(), Columns: s.GetColumns(), Filter: s.GetFilter()}
}
