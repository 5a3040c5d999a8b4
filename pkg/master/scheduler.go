package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Runner runs one claimed task and returns what it did, in words and numbers,
// and its error. A run that fails may report its partial progress too: it is
// recorded with the failure.
type Runner interface {
	Run(ctx context.Context, c *tasks.Claim) (tasks.Report, error)
}

// Gate is implemented by a Runner that can tell before a claim that no task of its
// kind could run now (merge_wal while no worker is registered). The scheduler then
// leaves the queue alone until a later round instead of claiming tasks only to fail
// them: a merge an operator requeued while the workers restart must wait, not be
// lost as "failed".
type Gate interface {
	Ready(ctx context.Context) error
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, c *tasks.Claim) (tasks.Report, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, c *tasks.Claim) (tasks.Report, error) { return f(ctx, c) }

// Defaults of the scheduler's settings (SchedulerConfig).
const (
	DefaultTaskConcurrency = 2
	// DefaultMergeConcurrency bounds merges of different stores at once. A gather
	// merge occupies one worker (and its merge slot) and the drains of the others,
	// so the bound is the cluster's, not a worker's: the skew benchmark (20
	// workers, one hot store and 50 quiet ones) found 4 slots all busy whenever a
	// merge waited in the queue, for up to 5 s past its store's MERGE_MAX_DELAY.
	DefaultMergeConcurrency = 8
	DefaultTaskTimeout      = time.Hour
	DefaultPollInterval     = time.Second
	DefaultFinishTimeout    = 10 * time.Second
)

// SchedulerConfig configures a Scheduler: its settings (zero fields take their
// defaults), and what it claims from and runs (which the master sets).
type SchedulerConfig struct {
	// TaskConcurrency bounds the running tasks of each kind but merge_wal,
	// TASK_CONCURRENCY (DefaultTaskConcurrency); MergeConcurrency the running
	// merge_wal tasks (DefaultMergeConcurrency; a master derives it from
	// TASK_CONCURRENCY, MergeConcurrencyFor). Tasks of
	// different targets may run at once; one target has at most one merge and one
	// maintenance task running (the task queue's locks of a target's two lanes,
	// tasks.Kind.Lane).
	TaskConcurrency  int
	MergeConcurrency int
	// TaskTimeout bounds one task run, TASK_TIMEOUT (DefaultTaskTimeout): a
	// merge_wal run calls every worker in turn, so it must allow for that.
	TaskTimeout time.Duration
	// PollInterval is how often the scheduler looks for work when idle
	// (DefaultPollInterval); an enqueue, by any replica, wakes it at once
	// (tasks.Queue.FollowEnqueues), so the poll is only the fallback.
	PollInterval time.Duration
	// FinishTimeout bounds one attempt to record a task's result
	// (DefaultFinishTimeout); attempts are repeated until one succeeds, the claim
	// is lost or the scheduler stops.
	FinishTimeout time.Duration

	Tasks *tasks.Queue
	// Lease returns the lease claims are made under (the master's session lease);
	// claims die with it.
	Lease func() clientv3.LeaseID
	// Runners by kind; kinds without a runner are never claimed.
	Runners map[tasks.Kind]Runner
	// OnFinish, if set, observes every finished task (metrics): its run's report and
	// error, and the outcome it made of the task (OutcomeDone, OutcomeSkipped,
	// OutcomeFailed).
	OnFinish func(kind tasks.Kind, outcome string, report tasks.Report, err error, d time.Duration)
	// OnPhase, if set, observes how long each phase of a task's life took
	// (metrics): PhaseClaim, PhasePermitWait, PhaseWork, PhaseCommit.
	OnPhase func(kind tasks.Kind, phase string, d time.Duration)
	// OnDone, if set, is called with every task that ran without error and whose
	// result was recorded, and its report: what a task's result makes due next
	// (a merge that left many level-0 fragments, a compaction). It runs on the
	// task's goroutine before its slot is freed; ctx is the scheduler's.
	OnDone func(ctx context.Context, t tasks.Task, report tasks.Report)
	Clock  clock.WithTicker
	Logger *slog.Logger
}

// Scheduler claims tasks and runs them.
type Scheduler struct {
	cfg   SchedulerConfig
	log   *slog.Logger
	slots map[tasks.Kind]chan struct{}
	wake  chan struct{}

	mu      sync.Mutex
	running map[string]*run // by task id

	gated map[tasks.Kind]bool // kinds whose Gate said not ready; claimRound's own

	// unsure is set when a claim round failed: a claim transaction may have
	// landed without its answer reaching us, leaving a task running under our
	// lease that nothing runs. Run's own; see releaseStrays.
	unsure bool
}

// run is a task this scheduler runs: its claim, and how to stop it when the
// claim's lease is gone.
type run struct {
	claim     *tasks.Claim
	cancel    context.CancelFunc
	abandoned bool // the lease is gone: the run was cancelled and must not finish
}

// NewScheduler returns a Scheduler; call Run.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	setDefault(&cfg.TaskConcurrency, DefaultTaskConcurrency)
	setDefault(&cfg.MergeConcurrency, DefaultMergeConcurrency)
	setDefault(&cfg.TaskTimeout, DefaultTaskTimeout)
	setDefault(&cfg.PollInterval, DefaultPollInterval)
	setDefault(&cfg.FinishTimeout, DefaultFinishTimeout)
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{cfg: cfg, log: cfg.Logger, slots: map[tasks.Kind]chan struct{}{},
		wake: make(chan struct{}, 1), running: map[string]*run{}, gated: map[tasks.Kind]bool{}}
	for kind := range cfg.Runners {
		s.slots[kind] = make(chan struct{}, s.concurrency(kind))
	}
	return s
}

// concurrency is how many tasks of kind may run at once.
func (s *Scheduler) concurrency(kind tasks.Kind) int {
	if kind == tasks.KindMergeWAL {
		return s.cfg.MergeConcurrency
	}
	return s.cfg.TaskConcurrency
}

// Wake makes the scheduler look for work now (after an enqueue, or a task of
// its own that ended).
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Running returns the ids of the tasks this scheduler is running.
func (s *Scheduler) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.running))
	for id := range s.running {
		ids = append(ids, id)
	}
	return ids
}

// claimRetry spaces claim rounds that etcd did not answer: from 500 ms to 30 s, so
// a long outage does not hammer etcd, reset by the first round that answers.
// finishRetry spaces the attempts to record a task's result: 250 ms to 5 s, since
// the target stays locked until it is recorded.
var (
	claimRetry  = backoff.Policy{Min: 500 * time.Millisecond, Max: 30 * time.Second}
	finishRetry = backoff.Policy{Min: 250 * time.Millisecond, Max: 5 * time.Second}
)

// Run claims and runs tasks until ctx is done. Then it stops claiming and waits for
// running tasks up to drain; tasks still running after that are released back to the
// queue (their runs are cancelled). etcd errors pause claiming with backoff; the
// scheduler resumes on its own when etcd answers again.
func (s *Scheduler) Run(ctx context.Context, drain time.Duration) {
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	var wg sync.WaitGroup
	ticker := s.cfg.Clock.NewTicker(s.cfg.PollInterval)
	defer ticker.Stop()
	followCtx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); s.cfg.Tasks.FollowEnqueues(followCtx, s.Wake) }()
	defer func() { stopFollowing(); <-followed }()
	retry := claimRetry.Start()
	for ctx.Err() == nil {
		if s.unsure {
			s.unsure = s.releaseStrays(ctx, nil) != nil
		}
		progressed, err := s.claimRound(ctx, runCtx, &wg)
		if err != nil {
			s.unsure = true
		}
		switch {
		case err != nil && ctx.Err() == nil:
			wait := retry.Next()
			s.log.Warn("scheduler: claiming paused (etcd unavailable?)", "err", err, "retry_in", wait.String())
			_ = backoff.Sleep(ctx, s.cfg.Clock, wait)
			continue
		case progressed:
			retry.Reset()
			continue // claim more while there is work and capacity
		}
		retry.Reset()
		select {
		case <-ctx.Done():
		case <-ticker.C():
		case <-s.wake:
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	select {
	case <-done:
		if s.unsure {
			_ = s.releaseStrays(rctx, nil)
		}
		return
	case <-s.cfg.Clock.After(drain):
	}
	// Give the rest back: cancel the runs and release their claims so another
	// master can take them at once instead of after the lease expires.
	s.mu.Lock()
	claims := make([]*tasks.Claim, 0, len(s.running))
	for _, r := range s.running {
		claims = append(claims, r.claim)
	}
	s.mu.Unlock()
	cancelRuns()
	s.release(rctx, claims)
	if s.unsure {
		_ = s.releaseStrays(rctx, claims)
	}
	<-done
}

// releaseStrays releases the claims under our lease that no run of ours holds
// (known are the ones being released already): claims whose transaction landed
// though Claim returned an error (cancelled by shutdown, timed out). Left alone,
// such a task would stay running, its target locked and never merged, for as
// long as this master's lease lives.
func (s *Scheduler) releaseStrays(ctx context.Context, known []*tasks.Claim) error {
	held, err := s.cfg.Tasks.Held(ctx, s.cfg.Lease())
	if err != nil {
		s.log.Warn("scheduler: looking for claims a failed claim round may have left", "err", err)
		return err
	}
	s.mu.Lock()
	var strays []*tasks.Claim
	for _, c := range held {
		_, running := s.running[c.Task.ID]
		if !running && !slices.ContainsFunc(known, func(k *tasks.Claim) bool { return k.Task.ID == c.Task.ID }) {
			strays = append(strays, c)
		}
	}
	s.mu.Unlock()
	for _, c := range strays {
		s.log.Warn("scheduler: releasing a task claimed by a claim round whose answer was lost",
			"task", c.Task.ID, "kind", c.Task.Kind, "target", c.Task.Target)
	}
	s.release(ctx, strays)
	return nil
}

// release gives claims back to the queue, logging the ones it could not.
func (s *Scheduler) release(ctx context.Context, claims []*tasks.Claim) {
	for _, c := range claims {
		if _, err := s.cfg.Tasks.Release(ctx, c); err != nil {
			s.log.Warn("scheduler: releasing a claimed task", "task", c.Task.ID, "err", err)
		}
	}
}

// claimRound claims at most one task per kind that has a free slot. It reserves the
// slot first, so a claimed task never waits for capacity while holding its lock.
func (s *Scheduler) claimRound(ctx, runCtx context.Context, wg *sync.WaitGroup) (bool, error) {
	progressed := false
	for kind, slots := range s.slots {
		select {
		case slots <- struct{}{}:
		default:
			continue // kind at capacity
		}
		if !s.ready(ctx, kind) {
			<-slots
			continue
		}
		claimStart := s.cfg.Clock.Now()
		c, err := s.cfg.Tasks.Claim(ctx, s.cfg.Lease(), tasks.ClaimFilter{Kinds: []tasks.Kind{kind}})
		if err == nil {
			s.phase(kind, PhaseClaim, s.cfg.Clock.Since(claimStart))
			// The slot was reserved before the claim, so a claimed task never waits
			// for one; the phase is kept so the reference's series is complete.
			s.phase(kind, PhasePermitWait, 0)
		}
		if err != nil {
			<-slots
			if errors.Is(err, tasks.ErrNoTask) {
				continue
			}
			return progressed, fmt.Errorf("claim %s: %w", kind, err)
		}
		progressed = true
		claimCtx, cancel := context.WithCancel(runCtx)
		r := &run{claim: c, cancel: cancel}
		s.mu.Lock()
		s.running[c.Task.ID] = r
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The freed slot, and the target lock the finish released, may make a
			// queued task claimable: look now, not at the next poll or enqueue.
			defer s.Wake()
			defer func() { <-slots }()
			defer cancel()
			s.run(runCtx, claimCtx, kind, r)
		}()
	}
	return progressed, nil
}

// ready asks kind's runner, if it is a Gate, whether a task could run now, logging
// when the answer changes (not every round).
func (s *Scheduler) ready(ctx context.Context, kind tasks.Kind) bool {
	g, ok := s.cfg.Runners[kind].(Gate)
	if !ok {
		return true
	}
	err := g.Ready(ctx)
	switch {
	case err != nil && !s.gated[kind]:
		s.log.Warn("scheduler: not claiming tasks of this kind until they can run; they stay queued", "kind", kind, "err", err)
	case err == nil && s.gated[kind]:
		s.log.Info("scheduler: claiming tasks of this kind again", "kind", kind)
	}
	s.gated[kind] = err != nil
	return err == nil
}

// AbandonLease cancels the runs of the claims made under lease, which is gone (the
// master's session had to start on a new lease): their claims and target locks died
// with it, another master may already run their tasks, and each further call of
// theirs to a worker would merge under a stale fencing token. The tasks are not
// finished here; orphan recovery has requeued them or will.
func (s *Scheduler) AbandonLease(lease clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.running {
		if r.claim.Lease != lease || r.abandoned {
			continue
		}
		r.abandoned = true
		r.cancel()
		s.log.Warn("task run cancelled: the lease of its claim is gone, so another master may run it",
			"task", id, "kind", r.claim.Task.Kind, "target", r.claim.Task.Target,
			"fencing_token", r.claim.FencingToken, "lease", leaseHex(lease))
	}
}

// run runs r's task under claimCtx (ctx, the scheduler's run context, or less when
// AbandonLease cancels it) and records its result.
func (s *Scheduler) run(ctx, claimCtx context.Context, kind tasks.Kind, r *run) {
	c := r.claim
	log := s.log.With("task", c.Task.ID, "kind", kind, "target", c.Task.Target, "fencing_token", c.FencingToken)
	log.Info("task started", "attempt", c.Task.Attempts)
	start := s.cfg.Clock.Now()
	tctx, cancel := context.WithTimeout(claimCtx, s.cfg.TaskTimeout)
	report, err := s.cfg.Runners[kind].Run(tctx, c)
	cancel()
	s.mu.Lock()
	abandoned := r.abandoned
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, c.Task.ID)
		s.mu.Unlock()
	}()
	if ctx.Err() != nil {
		return // shutting down: Run releases the claim
	}
	if abandoned {
		log.Warn("task run ended after its claim's lease was lost; not recorded", "err", err)
		return
	}
	d := s.cfg.Clock.Since(start)
	s.phase(kind, PhaseWork, d)
	if tasks.ShouldRetry(c, err) {
		requeued, rerr := s.retry(ctx, c, err, log)
		if rerr != nil || requeued {
			if requeued && s.cfg.OnFinish != nil {
				s.cfg.OnFinish(kind, OutcomeRetried, report, err, d)
			}
			return
		}
		// Asked to stop meanwhile: fail it as cancelled instead.
		err = fmt.Errorf("%w (after a failure: %v)", tasks.ErrCancelled, err)
	}
	result, outcome := taskResult(report, err)
	if s.cfg.OnFinish != nil {
		s.cfg.OnFinish(kind, outcome, report, err, d)
	}
	commitStart := s.cfg.Clock.Now()
	ferr := s.finish(ctx, c, result, log)
	s.phase(kind, PhaseCommit, s.cfg.Clock.Since(commitStart))
	if ferr != nil {
		log.Warn("task finished but its result was not recorded", "err", ferr, "task_err", err)
		return
	}
	switch {
	case outcome == OutcomeSkipped:
		log.Info("task skipped", "detail", result.Detail, "cause", err, "duration", d.String())
	case result.Halt:
		log.Error("task failed on a corrupt object; its target cools down until an operator repaired it",
			"err", err, "duration", d.String())
	case err != nil:
		log.Warn("task failed", "err", err, "duration", d.String())
	default:
		log.Info("task done", "detail", report.Detail, "duration", d.String())
		if s.cfg.OnDone != nil {
			s.cfg.OnDone(ctx, c.Task, report)
		}
	}
}

// phase tells OnPhase, if set, that kind's phase took d.
func (s *Scheduler) phase(kind tasks.Kind, phase string, d time.Duration) {
	if s.cfg.OnPhase != nil {
		s.cfg.OnPhase(kind, phase, d)
	}
}

// Phases of a task's life, as master_task_phase_duration_seconds's phase label
// says them (the reference's words): the claim transaction, the wait for a
// concurrency slot once claimed, the runner's work, and recording the result.
const (
	PhaseClaim      = "claim"
	PhasePermitWait = "permit_wait"
	PhaseWork       = "work"
	PhaseCommit     = "commit"
)

// Task outcomes, as master_tasks_total's result label says them (success and
// failed in the reference's words; skipped and retried are Tidemark's own:
// retried is a run of a task that went back to the queue, tasks.ShouldRetry).
const (
	OutcomeDone    = "success"
	OutcomeSkipped = "skipped"
	OutcomeFailed  = "failed"
	OutcomeRetried = "retried"
)

// SkippedDetail is the detail of a task skipped because its store was deleted.
const SkippedDetail = tasks.SkippedDetail

// taskResult is what a run's report and error make of its task, by the error's
// class: Gone (the store was deleted before or while it ran) is a task with nothing
// left to do, recorded done with SkippedDetail - not a failure, which dashboards
// and alerts would chase; Halt (a corrupt object) is a failure that cools the
// target down; any other error is a failure the next sweep retries.
func taskResult(report tasks.Report, err error) (tasks.Result, string) {
	switch {
	case err == nil:
		return tasks.Result{Report: report}, OutcomeDone
	case errclass.Of(err) == errclass.Gone:
		return tasks.Result{Report: tasks.Report{Detail: SkippedDetail}}, OutcomeSkipped
	}
	return tasks.Result{Err: err, Report: report, Halt: errclass.Of(err) == errclass.Halt}, OutcomeFailed
}

// retry puts c's task back in the queue after its run failed with err, which a
// retry may mend (tasks.ShouldRetry: an export whose worker died), trying again
// while etcd does not answer, as finish does. It reports false without an error
// when the task was asked to stop meanwhile: the caller then fails it as
// cancelled. An error means nothing is left to record (the claim is lost, or the
// scheduler stops: Run releases it).
func (s *Scheduler) retry(ctx context.Context, c *tasks.Claim, err error, log *slog.Logger) (bool, error) {
	wait := finishRetry.Start()
	for {
		fctx, cancel := context.WithTimeout(ctx, s.cfg.FinishTimeout)
		_, requeued, rerr := s.cfg.Tasks.Retry(fctx, c, err)
		cancel()
		switch {
		case rerr == nil && requeued:
			log.Warn("task failed and was queued to run again", "err", err, "attempt", c.Task.Attempts, "max_attempts", tasks.MaxAttempts)
			return true, nil
		case rerr == nil:
			return false, nil
		case errors.Is(rerr, tasks.ErrClaimLost) || ctx.Err() != nil:
			log.Warn("task failed but was not queued again: its claim is lost", "err", err, "retry_err", rerr)
			return false, rerr
		}
		d := wait.Next()
		log.Warn("queueing the failed task again failed (etcd unavailable?); retrying", "err", rerr, "retry_in", d.String())
		if backoff.Sleep(ctx, s.cfg.Clock, d) != nil {
			return false, rerr
		}
	}
}

// finish records r, trying again while etcd does not answer, until the result is
// recorded, the claim is lost (tasks.ErrClaimLost: its lease expired, the task was
// requeued as an orphan and runs again) or ctx ends (shutdown: Run releases the
// claim).
//
// Giving up after one attempt would leave the task running for good: the claim and
// the target lock live under the master's lease, which the session keeper resumes
// after an etcd outage (an etcd restart resets lease TTLs), so no orphan recovery
// ever frees the target and it is never merged again. The etcd outage campaign
// (e2e/chaos_etcd_test.go) hit that give-up: merge fan-outs, which need no etcd,
// finished early in a 30 s outage and their one 30 s attempt ran out before etcd
// was back.
func (s *Scheduler) finish(ctx context.Context, c *tasks.Claim, r tasks.Result, log *slog.Logger) error {
	retry := finishRetry.Start()
	for attempt := 1; ; attempt++ {
		fctx, cancel := context.WithTimeout(ctx, s.cfg.FinishTimeout)
		_, err := s.cfg.Tasks.Finish(fctx, c, r)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("task result recorded after etcd answered again", "attempts", attempt)
			}
			return nil
		}
		if errors.Is(err, tasks.ErrClaimLost) || ctx.Err() != nil {
			return err
		}
		wait := retry.Next()
		log.Warn("recording the task result failed (etcd unavailable?); retrying", "err", err,
			"attempt", attempt, "retry_in", wait.String())
		if backoff.Sleep(ctx, s.cfg.Clock, wait) != nil {
			return fmt.Errorf("%w (gave up at shutdown)", err)
		}
	}
}
