package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// DefaultPreparedTTL is how long a prepared merge waits for its commit
// (MERGE_PREPARED_TTL) before it is aborted: it holds a merge slot and its memory
// charge meanwhile. The master commits the workers of a task one after another,
// each within its worker timeout, so a prepare waits at most for the commits
// before it.
const DefaultPreparedTTL = 5 * time.Minute

// preparedMerges holds the merges PrepareMerge prepared, at most one per target,
// until CommitMerge or AbortMerge under the same fencing token, any call that
// admits a newer token of the target (WorkerService.admit: a prepare, a merge, an
// adoption, a maintenance task), or the TTL ends them. Whoever removes an entry
// from the map ends it (commits or aborts it); an entry is never ended twice.
type preparedMerges struct {
	mu       sync.Mutex
	byTarget map[string]*heldMerge
}

// heldMerge is one prepared merge and the store handle it holds open.
type heldMerge struct {
	token   int64
	p       *merge.Prepared
	release func() // the store handle
	expiry  *time.Timer
}

// take removes and returns target's entry if its token is token.
func (pm *preparedMerges) take(target string, token int64) *heldMerge {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	h := pm.byTarget[target]
	if h == nil || h.token != token {
		return nil
	}
	delete(pm.byTarget, target)
	h.expiry.Stop()
	return h
}

// remove removes h if it is still target's entry, and reports whether it was.
func (pm *preparedMerges) remove(target string, h *heldMerge) bool {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if pm.byTarget[target] != h {
		return false
	}
	delete(pm.byTarget, target)
	return true
}

// abortOlder aborts target's entry if it was prepared under an older fencing
// token than token, just admitted: that claim will never commit it, and it holds a
// merge slot. It returns the aborted entry's token, 0 if none.
func (pm *preparedMerges) abortOlder(target string, token int64) int64 {
	pm.mu.Lock()
	h := pm.byTarget[target]
	if h == nil || h.token >= token {
		pm.mu.Unlock()
		return 0
	}
	delete(pm.byTarget, target)
	h.expiry.Stop()
	pm.mu.Unlock()
	h.abort()
	return h.token
}

// abort ends h without committing it.
func (h *heldMerge) abort() {
	h.p.Abort(context.Background())
	h.release()
}

// PrepareMerge prepares the first pass of this worker's merge of the request's
// target and holds it for CommitMerge (merge.Merger.Prepare).
func (w *WorkerService) PrepareMerge(ctx context.Context, req *tidemarkv1.PrepareMergeRequest) (*tidemarkv1.PrepareMergeResponse, error) {
	target, token := req.GetTarget(), req.GetFencingToken()
	kind, name, log, err := w.admitFenced(target, tasks.LaneMerge, token)
	if err != nil {
		return nil, err
	}
	answer := func(p *merge.Prepared) *tidemarkv1.PrepareMergeResponse {
		return &tidemarkv1.PrepareMergeResponse{Generations: int64(p.Generations()), Rows: p.Rows(), InstanceId: w.cfg.InstanceID}
	}
	w.prepared.mu.Lock()
	if h := w.prepared.byTarget[target]; h != nil && h.token == token {
		w.prepared.mu.Unlock()
		return answer(h.p), nil // a repeated call: the master did not get the first answer
	}
	w.prepared.mu.Unlock()

	s, release, err := w.cfg.Stores.Open(ctx, kind, name)
	if err != nil {
		return nil, grpcError(storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	p, err := w.cfg.Merger.Prepare(ctx, s, true)
	if err != nil {
		release()
		log.Warn("prepare failed", "err", err)
		return nil, grpcError(storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	h := &heldMerge{token: token, p: p, release: release}
	h.expiry = time.AfterFunc(w.cfg.PreparedTTL, func() {
		if w.prepared.remove(target, h) {
			log.Warn("prepared merge was never committed; aborted", "ttl", w.cfg.PreparedTTL.String())
			h.abort()
		}
	})
	w.prepared.mu.Lock()
	cur := w.prepared.byTarget[target]
	if cur != nil && cur.token > token {
		// A newer claim prepared meanwhile: this one is stale already.
		w.prepared.mu.Unlock()
		h.expiry.Stop()
		h.abort()
		return nil, grpcError(w.admit(target, tasks.LaneMerge, kind, token, log))
	}
	if cur != nil {
		cur.expiry.Stop()
	}
	w.prepared.byTarget[target] = h
	w.prepared.mu.Unlock()
	if cur != nil {
		cur.abort() // a concurrent repeat of this call: keep one
	}
	log.Info("merge prepared", "generations", p.Generations(), "rows", p.Rows())
	return answer(p), nil
}

// CommitMerge commits the merge prepared under the request's fencing token.
func (w *WorkerService) CommitMerge(ctx context.Context, req *tidemarkv1.CommitMergeRequest) (*tidemarkv1.MergeWalResponse, error) {
	target, token := req.GetTarget(), req.GetFencingToken()
	kind, name, log, err := w.admitFenced(target, tasks.LaneMerge, token)
	if err != nil {
		return nil, err
	}
	log = log.With("trigger", TriggerMaster)
	h := w.prepared.take(target, token)
	if h == nil {
		// Nothing prepared under this token (this worker restarted since, or the
		// prepare expired): merge now, as MergeWal does, so the task converges.
		log.Info("no merge prepared under this token; merging now", "prepared_ttl", w.cfg.PreparedTTL.String())
		r, err := w.MergeTarget(ctx, target, token, TriggerMaster)
		if err != nil {
			return nil, grpcError(err)
		}
		return &tidemarkv1.MergeWalResponse{Generations: int64(r.Generations), Rows: r.Rows, Reclaimed: int64(r.Reclaimed),
			BaseVersion: r.Version, InstanceId: w.cfg.InstanceID}, nil
	}
	defer h.release()
	start := time.Now()
	commit := h.p.Commit
	if req.GetDeferDrain() {
		commit = h.p.CommitUndrained // the master calls DrainMerged next
	}
	r, err := commit(ctx, req.GetBaseVersion())
	if err != nil {
		err = storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err)
	}
	w.observeMerge(kind, TriggerMaster, start, r, err, log)
	if err != nil {
		return nil, grpcError(err)
	}
	return &tidemarkv1.MergeWalResponse{Generations: int64(r.Generations), Rows: r.Rows, Reclaimed: int64(r.Reclaimed),
		BaseVersion: r.Version, InstanceId: w.cfg.InstanceID}, nil
}

// AbortMerge aborts the merge prepared under the request's fencing token.
func (w *WorkerService) AbortMerge(_ context.Context, req *tidemarkv1.AbortMergeRequest) (*tidemarkv1.AbortMergeResponse, error) {
	target, token := req.GetTarget(), req.GetFencingToken()
	if _, err := registry.ParseTarget(target); err != nil {
		return nil, grpcError(err)
	}
	if err := requireToken(target, token); err != nil {
		return nil, err
	}
	h := w.prepared.take(target, token)
	if h != nil {
		h.abort()
		w.log.Info("prepared merge aborted by the master", "target", target, "fencing_token", token)
	}
	return &tidemarkv1.AbortMergeResponse{Aborted: h != nil}, nil
}

// AbortPrepared aborts every prepared merge (shutdown): their staged files are
// deleted instead of waiting for garbage collection.
func (w *WorkerService) AbortPrepared() {
	w.prepared.mu.Lock()
	held := w.prepared.byTarget
	w.prepared.byTarget = map[string]*heldMerge{}
	w.prepared.mu.Unlock()
	for _, h := range held {
		h.expiry.Stop()
		h.abort()
	}
}

// observeMerge counts and logs one merge of trigger that started at start.
func (w *WorkerService) observeMerge(kind registry.Kind, trigger string, start time.Time, r merge.Result, err error, log *slog.Logger) {
	result := "success"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		result = "timeout"
	case errors.Is(err, context.Canceled):
		result = "cancelled"
	case err != nil:
		result = "failure"
	}
	m := w.cfg.Metrics
	m.Merges.WithLabelValues(trigger, result).Inc()
	m.MergeDuration.WithLabelValues(trigger).Observe(time.Since(start).Seconds())
	m.MergedGenerations.WithLabelValues(string(kind)).Add(float64(r.Generations))
	if trigger == TriggerMaster && err == nil {
		m.MergeRequestDuration.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		log.Warn("merge failed", "err", err, "duration", time.Since(start).String())
		return
	}
	log.Info("merge done", "generations", r.Generations, "rows", r.Rows, "reclaimed", r.Reclaimed,
		"version", r.Version, "duration", time.Since(start).String())
}
