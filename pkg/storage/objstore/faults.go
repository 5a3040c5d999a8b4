package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// ErrInjected is wrapped by every error a Faults wrapper makes up, so a test can
// tell an injected failure from a real one.
var ErrInjected = errors.New("injected fault")

// Op names one kind of backend request, for counters and fault rules.
type Op string

// The request kinds a Bucket makes. Walk, List and ListDirs are one list request per
// call.
const (
	OpGet         Op = "get"
	OpGetRange    Op = "getRange"
	OpStat        Op = "stat"
	OpPut         Op = "put"
	OpPutIfAbsent Op = "putIfAbsent"
	OpDelete      Op = "delete"
	OpList        Op = "list"
)

// Ops returns every request kind, in a fixed order (for reports).
func Ops() []Op {
	return []Op{OpGet, OpGetRange, OpStat, OpPut, OpPutIfAbsent, OpDelete, OpList}
}

// isWrite reports whether op stores an object, so an injected error can land before or
// after the bytes are written.
func (op Op) isWrite() bool { return op == OpPut || op == OpPutIfAbsent }

// WritePhase says when a randomly injected error hits a put or put-if-absent.
type WritePhase int

const (
	// FailBeforeWrite fails the request without writing anything (the default).
	FailBeforeWrite WritePhase = iota
	// FailAfterWrite performs the write and then reports an error: the ambiguous
	// commit a real store produces when a response is lost. A caller that retries a
	// put-if-absent then sees ErrExists for its own object.
	FailAfterWrite
	// FailBeforeOrAfterWrite picks one of the two at random for each injected error.
	FailBeforeOrAfterWrite
)

// ThrottleMode says what a request over the MaxConcurrent cap does.
type ThrottleMode int

const (
	// ThrottleWait makes the request wait for a free slot (or for its context to
	// end), like a client-side connection pool in front of a saturated store.
	ThrottleWait ThrottleMode = iota
	// ThrottleReject fails the request at once with an error wrapping ErrThrottled,
	// like a store answering 503 SlowDown / ServerBusy.
	ThrottleReject
)

// Rule fails chosen requests. A request matches when its kind is in Ops (or Ops is
// empty), its key (for list: the listed prefix) starts with KeyPrefix and contains
// KeyContains. Rules are tried in the order they were added; the first match that
// still has firings left fires.
type Rule struct {
	Ops         []Op
	KeyPrefix   string
	KeyContains string
	// Times is how many matching requests fail; 0 means every one.
	Times int
	// AfterWrite makes a matching put or put-if-absent write first and fail after
	// (see FailAfterWrite). It has no effect on other kinds.
	AfterWrite bool
	// Err, if set, is wrapped into the injected error besides ErrInjected, e.g.
	// ErrNotFound to simulate an object that vanished.
	Err error
	// Hang makes a matching request block until its context ends (the caller's
	// deadline or the Bucket's operation timeout) and then fail with an error
	// wrapping ErrInjected and the context's error: a store, or one connection to
	// it, that stops answering. The request holds its concurrency slot while it
	// hangs, as a stuck connection does. AfterWrite is ignored for a hanging rule.
	Hang bool
	// Before, if set, makes the rule interleave instead of fail: a matching request
	// first calls Before (outside every lock of the Faults, so Before may use the
	// store itself), then goes on unharmed. Tests use it to land another process's
	// commit at an exact point of a protocol. Err, Hang and AfterWrite are ignored.
	Before func(ctx context.Context, op Op, key string)
}

// RuleHandle is an installed Rule.
type RuleHandle struct {
	f     *Faults
	rule  Rule
	fired int // guarded by f.mu
}

// Fired returns how many requests the rule has failed so far.
func (h *RuleHandle) Fired() int {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.fired
}

// Remove uninstalls the rule; requests in flight that it already failed stay failed.
func (h *RuleHandle) Remove() {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	for i, r := range h.f.rules {
		if r == h {
			h.f.rules = append(h.f.rules[:i:i], h.f.rules[i+1:]...)
			return
		}
	}
}

func (h *RuleHandle) matches(op Op, key string) bool {
	r := &h.rule
	if r.Times > 0 && h.fired >= r.Times {
		return false
	}
	if len(r.Ops) > 0 && !containsOp(r.Ops, op) {
		return false
	}
	return strings.HasPrefix(key, r.KeyPrefix) && strings.Contains(key, r.KeyContains)
}

func containsOp(ops []Op, op Op) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

// Faults is the misbehaviour of a store: latency, transient errors, throttling and
// per-key failures, plus counters of the requests made. Every setting can be changed
// while requests run, so a test can turn faults on for one phase and off for the next.
// It is safe for concurrent use. The zero value injects nothing and is ready to use,
// with a fixed random seed; NewFaults chooses the random source.
//
// A request goes through the stages in this order: it is counted; it takes a
// concurrency slot (MaxConcurrent); it waits its latency; then a rule or the error
// rate may fail it; otherwise it reaches the wrapped bucket.
type Faults struct {
	mu sync.Mutex

	rng *rand.Rand

	latency, jitter time.Duration
	errorRate       float64
	errorOps        []Op // nil: every kind
	writePhase      WritePhase
	maxConcurrent   int
	throttleMode    ThrottleMode
	rules           []*RuleHandle

	inFlight  int
	peak      int
	waiting   int
	slotFreed chan struct{} // closed and replaced whenever a slot frees or the cap changes

	requests  map[Op]int64
	injected  int64
	throttled int64
}

// NewFaults returns a Faults that injects nothing yet and draws its random decisions
// (error rate, jitter, write phase) from src, e.g. rand.NewPCG(1, 2) for a repeatable
// sequence. A nil src means a fixed seed.
func NewFaults(src rand.Source) *Faults {
	f := &Faults{}
	if src != nil {
		f.rng = rand.New(src)
	}
	return f
}

// WithFaults returns a Bucket that sends every request through f before passing it to
// b. Both Buckets share b's storage, so objects written through one are visible
// through the other. The result has b's name with " (faults)" appended and b's
// operation timeout. Closing the result does not close b. f must not be nil; keep it
// to change the faults and read the counters while the Bucket is in use.
func WithFaults(b *Bucket, f *Faults) *Bucket {
	return &Bucket{
		be:        &faultBackend{inner: b.be, f: f},
		name:      b.name + " (faults)",
		opTimeout: b.opTimeout,
	}
}

// delays reports whether requests wait a latency.
func (f *Faults) delays() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latency > 0 || f.jitter > 0
}

// SetLatency makes every request wait fixed plus a uniformly random duration in
// [0, jitter) before it runs. The wait ends early, with the context's error, if the
// request's context ends.
func (f *Faults) SetLatency(fixed, jitter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency, f.jitter = fixed, jitter
}

// SetErrorRate makes each request of the given kinds (every kind if none are given)
// fail with probability p (0 to 1) with an error wrapping ErrInjected.
func (f *Faults) SetErrorRate(p float64, ops ...Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errorRate = p
	f.errorOps = nil
	if len(ops) > 0 {
		f.errorOps = append([]Op(nil), ops...)
	}
}

// SetWritePhase chooses whether errors drawn by the error rate hit puts before or
// after the write (FailBeforeWrite by default).
func (f *Faults) SetWritePhase(p WritePhase) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writePhase = p
}

// SetMaxConcurrent caps the requests in flight at n (0: no cap). Requests over the cap
// wait for a slot (ThrottleWait) or fail with ErrThrottled (ThrottleReject). A request
// holds its slot until it has finished, which for a ranged read is when its body is
// closed; a list releases its slot before the caller's callback sees the objects.
func (f *Faults) SetMaxConcurrent(n int, mode ThrottleMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maxConcurrent, f.throttleMode = n, mode
	f.wakeLocked()
}

// AddRule installs r and returns a handle to watch or remove it.
func (f *Faults) AddRule(r Rule) *RuleHandle {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.Ops = append([]Op(nil), r.Ops...)
	h := &RuleHandle{f: f, rule: r}
	f.rules = append(f.rules, h)
	return h
}

// Clear turns every fault off and removes every rule; the counters are kept.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency, f.jitter = 0, 0
	f.errorRate, f.errorOps = 0, nil
	f.writePhase = FailBeforeWrite
	f.maxConcurrent, f.throttleMode = 0, ThrottleWait
	f.rules = nil
	f.wakeLocked()
}

// Requests returns how many requests of kind op were made, including the ones that
// were failed or throttled: a real store bills those too.
func (f *Faults) Requests(op Op) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[op]
}

// RequestCounts returns a snapshot of the request counters by kind.
func (f *Faults) RequestCounts() map[Op]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.requests)
}

// TotalRequests returns the number of requests of every kind.
func (f *Faults) TotalRequests() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, c := range f.requests {
		n += c
	}
	return n
}

// Injected returns how many requests were failed by a rule or the error rate
// (throttling rejections are counted by Throttled).
func (f *Faults) Injected() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// Throttled returns how many requests were rejected by ThrottleReject.
func (f *Faults) Throttled() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.throttled
}

// PeakInFlight returns the largest number of requests that were in flight at once.
func (f *Faults) PeakInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

// InFlight returns the number of requests holding a concurrency slot now.
func (f *Faults) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight
}

// Waiting returns the number of requests waiting for a concurrency slot now.
func (f *Faults) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// ResetCounters zeroes the request, injected, throttled and peak counters, e.g.
// between the set-up and the measured phase of a benchmark.
func (f *Faults) ResetCounters() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = nil
	f.injected, f.throttled = 0, 0
	f.peak = f.inFlight
}

// wakeLocked lets every waiter re-check the cap.
func (f *Faults) wakeLocked() {
	if f.slotFreed != nil {
		close(f.slotFreed)
		f.slotFreed = nil
	}
}

func (f *Faults) randLocked() *rand.Rand {
	if f.rng == nil {
		f.rng = rand.New(rand.NewPCG(1, 2))
	}
	return f.rng
}

// begin runs the stages before a request reaches the wrapped backend. It returns
// release, to be called when the request is over, and afterWrite, an error to report
// once a write has been performed. On error nothing is held.
func (f *Faults) begin(ctx context.Context, op Op, key string) (release func(), afterWrite error, err error) {
	f.mu.Lock()
	if f.requests == nil {
		f.requests = make(map[Op]int64)
	}
	f.requests[op]++
	f.mu.Unlock()

	if err := f.acquire(ctx); err != nil {
		return nil, nil, err
	}
	var once sync.Once
	release = func() { once.Do(f.releaseSlot) }

	f.mu.Lock()
	wait := f.latency
	if f.jitter > 0 {
		wait += time.Duration(f.randLocked().Int64N(int64(f.jitter)))
	}
	f.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			release()
			return nil, nil, ctx.Err()
		}
	}

	after, hang, before, fault := f.decide(op, key)
	if before != nil {
		before(ctx, op, key)
		return release, nil, nil
	}
	if hang {
		<-ctx.Done()
		release()
		return nil, nil, fmt.Errorf("%w: %w", fault, ctx.Err())
	}
	if fault != nil && !after {
		release()
		return nil, nil, fault
	}
	return release, fault, nil
}

// decide picks the fault for one request, if any, whether it lands after the
// write, and whether the request hangs until its context ends before failing; or
// the Before hook of an interleaving rule, to call instead.
func (f *Faults) decide(op Op, key string) (after, hang bool, before func(context.Context, Op, string), fault error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, h := range f.rules {
		if !h.matches(op, key) {
			continue
		}
		h.fired++
		if h.rule.Before != nil {
			return false, false, h.rule.Before, nil
		}
		f.injected++
		hang = h.rule.Hang
		after = op.isWrite() && h.rule.AfterWrite && !hang
		msg := fmt.Sprintf("rule %d on %s", i, op)
		switch {
		case hang:
			msg += " hung until the request's context ended"
		case after:
			msg += " after the write succeeded"
		}
		if h.rule.Err != nil {
			return after, hang, nil, fmt.Errorf("%w (%s): %w", ErrInjected, msg, h.rule.Err)
		}
		return after, hang, nil, fmt.Errorf("%w (%s)", ErrInjected, msg)
	}
	if f.errorRate <= 0 || (f.errorOps != nil && !containsOp(f.errorOps, op)) {
		return false, false, nil, nil
	}
	rng := f.randLocked()
	if rng.Float64() >= f.errorRate {
		return false, false, nil, nil
	}
	f.injected++
	if op.isWrite() {
		switch f.writePhase {
		case FailAfterWrite:
			after = true
		case FailBeforeOrAfterWrite:
			after = rng.IntN(2) == 1
		}
	}
	if after {
		return true, false, nil, fmt.Errorf("%w (transient error on %s after the write succeeded)", ErrInjected, op)
	}
	return false, false, nil, fmt.Errorf("%w (transient error on %s)", ErrInjected, op)
}

// acquire takes a concurrency slot, waiting or failing as the throttle mode says.
func (f *Faults) acquire(ctx context.Context) error {
	for {
		f.mu.Lock()
		if f.maxConcurrent <= 0 || f.inFlight < f.maxConcurrent {
			f.inFlight++
			f.peak = max(f.peak, f.inFlight)
			f.mu.Unlock()
			return nil
		}
		if f.throttleMode == ThrottleReject {
			f.throttled++
			n := f.inFlight
			f.mu.Unlock()
			return fmt.Errorf("%w: %w (%d requests in flight)", ErrThrottled, ErrInjected, n)
		}
		if f.slotFreed == nil {
			f.slotFreed = make(chan struct{})
		}
		wake := f.slotFreed
		f.waiting++
		f.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (f *Faults) releaseSlot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight--
	f.wakeLocked()
}

// faultBackend puts a Faults in front of another backend.
type faultBackend struct {
	inner backend
	f     *Faults
}

func (fb *faultBackend) get(ctx context.Context, key string, limit int64) ([]byte, error) {
	release, _, err := fb.f.begin(ctx, OpGet, key)
	if err != nil {
		return nil, err
	}
	defer release()
	return fb.inner.get(ctx, key, limit)
}

func (fb *faultBackend) getRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	release, _, err := fb.f.begin(ctx, OpGetRange, key)
	if err != nil {
		return nil, err
	}
	rc, err := fb.inner.getRange(ctx, key, offset, length)
	if err != nil {
		release()
		return nil, err
	}
	return &releasingReader{ReadCloser: rc, release: release}, nil
}

// getRanges is a request per range to the rules, the counters and the
// concurrency limit, one after another as GetRanges makes them elsewhere, and
// then one call of the inner backend.
func (fb *faultBackend) getRanges(ctx context.Context, key string, rs []ByteRange) ([][]byte, error) {
	for range rs {
		release, _, err := fb.f.begin(ctx, OpGetRange, key)
		if err != nil {
			return nil, err
		}
		release()
	}
	return fb.inner.getRanges(ctx, key, rs)
}

// local: a wrapper that makes requests wait stands for a remote store, whose
// ranges a reader sends at once rather than in one call.
func (fb *faultBackend) local() bool { return fb.inner.local() && !fb.f.delays() }

// releasingReader holds a concurrency slot until the body is closed, because a ranged
// read occupies the store until its bytes have been transferred.
type releasingReader struct {
	io.ReadCloser
	release func()
}

func (r *releasingReader) Close() error {
	defer r.release()
	return r.ReadCloser.Close()
}

func (fb *faultBackend) stat(ctx context.Context, key string) (Object, error) {
	release, _, err := fb.f.begin(ctx, OpStat, key)
	if err != nil {
		return Object{}, err
	}
	defer release()
	return fb.inner.stat(ctx, key)
}

func (fb *faultBackend) put(ctx context.Context, key string, data []byte) error {
	release, after, err := fb.f.begin(ctx, OpPut, key)
	if err != nil {
		return err
	}
	defer release()
	if err := fb.inner.put(ctx, key, data); err != nil {
		return err
	}
	return after
}

func (fb *faultBackend) putIfAbsent(ctx context.Context, key string, data []byte) error {
	release, after, err := fb.f.begin(ctx, OpPutIfAbsent, key)
	if err != nil {
		return err
	}
	defer release()
	if err := fb.inner.putIfAbsent(ctx, key, data); err != nil {
		return err
	}
	return after
}

func (fb *faultBackend) delete(ctx context.Context, key string) error {
	release, _, err := fb.f.begin(ctx, OpDelete, key)
	if err != nil {
		return err
	}
	defer release()
	return fb.inner.delete(ctx, key)
}

// list collects the listing before handing it to fn, so the request's concurrency
// slot is not held while fn runs: a callback that makes requests of its own would
// otherwise wait forever for a slot under SetMaxConcurrent(1, ThrottleWait).
func (fb *faultBackend) list(ctx context.Context, prefix, delimiter string, fn func(Object) error) error {
	release, _, err := fb.f.begin(ctx, OpList, prefix)
	if err != nil {
		return err
	}
	var objs []Object
	err = fb.inner.list(ctx, prefix, delimiter, func(o Object) error {
		objs = append(objs, o)
		return nil
	})
	release()
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// close does nothing: the wrapped Bucket owns the storage and is closed by its owner.
func (fb *faultBackend) close() error { return nil }
