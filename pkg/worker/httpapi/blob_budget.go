package httpapi

import (
	"net/http"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// DefaultMaxInflightBlobBytes is the in-flight blob budget when Config leaves it
// zero: what adds and blob downloads may hold in memory at once.
const DefaultMaxInflightBlobBytes = 256 << 20

// errBlobBudget is the answer to a request the in-flight blob budget cannot admit
// now (the reference's 503 OVERLOADED, with its wording).
var errBlobBudget = &apiError{status: http.StatusServiceUnavailable, code: CodeOverloaded,
	message: "server is at its in-flight blob memory limit; retry shortly"}

// blobBudget bounds the bytes that adds (their bodies) and blob downloads (the
// blob being sent) hold in memory at once, across all requests of a worker: the
// reference's ROLLOUT_MAX_INFLIGHT_BLOB_BYTES.
//
// Invariants:
//
//   - A request reserves before it allocates: an add its body's size (declared,
//     or the largest a body may be), a download the largest blob a row may hold;
//     a download shrinks its reservation to the blob's size once it is read.
//   - The bytes reserved at once never exceed the limit, except by one request:
//     a request larger than the whole limit is admitted when nothing else is in
//     flight, so a lone large blob is never refused for good. The budget bounds
//     concurrency, not the size of a blob (Config.MaxBodyBytes does that).
//   - A reservation is held until the request has written its answer (a slow
//     download keeps its bytes accounted for) and released exactly once.
//
// A nil *blobBudget admits everything (--rollout-max-inflight-blob-bytes 0).
//
// The admission is a semaphore.Weighted of limit bytes, tried and never waited
// on. A request holds min(n, limit) of it: a lone request larger than the limit
// takes all of it, which admits it when nothing else is in flight and refuses
// every other request until it ends. Beside the semaphore, used counts the bytes
// the requests asked for (a lone large one counts whole), for tests and metrics.
type blobBudget struct {
	limit int64
	sem   *semaphore.Weighted
	used  atomic.Int64
}

// newBlobBudget returns a budget of limit bytes; limit < 0 disables it (nil).
// A zero limit admits one request at a time, as a limit smaller than every
// request does.
func newBlobBudget(limit int64) *blobBudget {
	if limit < 0 {
		return nil
	}
	limit = max(limit, 1)
	return &blobBudget{limit: limit, sem: semaphore.NewWeighted(limit)}
}

// weight is what n reserved bytes hold of the semaphore.
func (b *blobBudget) weight(n int64) int64 { return min(n, b.limit) }

// tryAcquire reserves n bytes, or returns nil if they do not fit beside what is
// in flight. A nil budget returns a reservation that holds nothing.
func (b *blobBudget) tryAcquire(n int64) *blobReservation {
	if b == nil {
		return &blobReservation{}
	}
	n = max(n, 0)
	if !b.sem.TryAcquire(b.weight(n)) {
		return nil
	}
	// Counted after the semaphore admits and uncounted before it is given back,
	// so used never shows more than the semaphore lets in.
	b.used.Add(n)
	return &blobReservation{budget: b, bytes: n}
}

// inUse returns the bytes reserved now.
func (b *blobBudget) inUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// blobReservation is bytes held in a blobBudget. Its methods are for the one
// request that holds it (not safe for concurrent use).
type blobReservation struct {
	budget *blobBudget
	bytes  int64
}

// shrinkTo gives back what the reservation holds above n bytes.
func (r *blobReservation) shrinkTo(n int64) {
	if r.budget == nil || n >= r.bytes {
		return
	}
	n = max(n, 0)
	b := r.budget
	b.used.Add(n - r.bytes)
	if give := b.weight(r.bytes) - b.weight(n); give > 0 {
		b.sem.Release(give)
	}
	r.bytes = n
}

// release gives every byte back; later calls do nothing.
func (r *blobReservation) release() {
	r.shrinkTo(0)
	r.budget = nil
}

// reserveBlobBytes reserves n bytes of the server's blob budget for a request,
// or fails with the reference's 503, counted in rollout_blob_budget_rejections_total.
func (s *Server) reserveBlobBytes(n int64) (*blobReservation, error) {
	res := s.blobs.tryAcquire(n)
	if res == nil {
		s.cfg.Series.BlobBudgetRejections.Inc()
		return nil, errBlobBudget
	}
	return res, nil
}
