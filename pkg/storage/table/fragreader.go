package table

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Bounds on the requests one read issues at once. On an object store every request
// costs a round trip (tens of milliseconds) whatever its size, so a read that needs
// several ranges fetches them together; the bounds keep one merge from taking every
// request slot of a throttled store.
const (
	// chunkReads bounds the ranged reads of one row group's column chunks.
	chunkReads = 4
	// fragmentReads bounds the fragments whose key indexes (and bloom filters,
	// deletion vectors) a conflict check reads at once.
	fragmentReads = 8
	// lookupFragments bounds the fragments one lookup of many ids (a batch get, a
	// merge's conflict check and deletion vectors) works on at once. It bounds
	// goroutines, not requests: those wait for the operation's budget
	// (requestsInFlight, inflight.go), so it is twice that, to keep the budget's
	// slots busy while some fragments are answered from the cache.
	lookupFragments = 2 * requestsInFlight
	// coalesceGap is the largest gap between two column chunks read as one range:
	// reading 256 KiB more costs a few milliseconds, a second request a round trip.
	coalesceGap = 256 << 10
	// footerRead is how much of a fragment's end is read to find its footer in one
	// request (arrow-go reads the 8-byte trailer, then the footer: two requests).
	footerRead = 64 << 10
)

// byteRange is a range of an object.
type byteRange struct{ off, n int64 }

// coalesce sorts rs and merges ranges that overlap or are at most gap bytes apart.
func coalesce(rs []byteRange, gap int64) []byteRange {
	rs = slices.DeleteFunc(slices.Clone(rs), func(r byteRange) bool { return r.n <= 0 })
	slices.SortFunc(rs, func(a, b byteRange) int { return cmp.Compare(a.off, b.off) })
	var out []byteRange
	for _, r := range readRuns(len(rs), func(i int) byteRange { return rs[i] }, gap) {
		out = append(out, r.span)
	}
	return out
}

// readRun is items [first, end) of a list whose byte ranges one ranged read
// covers: span, from the first's start to the furthest end.
type readRun struct {
	first, end int
	span       byteRange
}

// readRuns splits n items, whose byte ranges (at) ascend by offset, into runs to
// read with one request each: an item joins the run before it when it starts at
// most gap bytes past the run's end, as a request costs more than reading that
// gap through (on an object store a round trip, on a local disk an open and a
// close). Key-index blocks, packed deletion vectors and column chunks are all
// read this way, each with the gap that suits their sizes.
func readRuns(n int, at func(i int) byteRange, gap int64) []readRun {
	var out []readRun
	for i := range n {
		r := at(i)
		if k := len(out) - 1; k >= 0 && r.off <= out[k].span.off+out[k].span.n+gap {
			out[k].end = i + 1
			out[k].span.n = max(out[k].span.n, r.off+r.n-out[k].span.off)
			continue
		}
		out = append(out, readRun{first: i, end: i + 1, span: r})
	}
	return out
}

// fragmentReader reads one fragment by ranged requests, for the Parquet decoder.
//
// Its size is the manifest's, so opening it costs no request (a Stat per fragment
// read would cost as much as the read); a fragment shorter than the manifest says
// fails its first read past the end with ErrCorrupt.
//
// Ranges fetched ahead with prefetch (a row group's column chunks, the footer) are
// served from memory; any other read is one request. It remembers the first I/O
// error, because the decoder flattens errors into its own messages, and a throttled
// read must not be reported as a corrupt file: one is retried, the other halts.
type fragmentReader struct {
	t    *Table // its bucket, and its retry of throttled requests
	ctx  context.Context
	key  string
	size int64

	mu     sync.Mutex
	err    error
	spans  []span
	whole  bool // spans hold the whole object: drop keeps them
	direct int  // reads not served from a prefetched span (tests count them)
}

type span struct {
	off  int64
	data []byte
}

func newFragmentReader(ctx context.Context, t *Table, key string, size int64) *fragmentReader {
	return &fragmentReader{t: t, ctx: ctx, key: key, size: size}
}

// ReadAt follows io.ReaderAt: a read reaching the end returns the bytes there are
// and io.EOF.
func (r *fragmentReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s at %d: negative offset", r.key, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	if !r.fromSpans(p[:n], off) {
		data, err := r.get(r.ctx, byteRange{off, n})
		if err != nil {
			return 0, err
		}
		copy(p, data)
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

func (r *fragmentReader) fromSpans(p []byte, off int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.spanLocked(byteRange{off, int64(len(p))}); s != nil {
		copy(p, s.data[off-s.off:])
		return true
	}
	r.direct++
	return false
}

// spanLocked is the prefetched span holding all of br, nil if none does.
func (r *fragmentReader) spanLocked(br byteRange) *span {
	for i := range r.spans {
		if s := &r.spans[i]; br.off >= s.off && br.off+br.n <= s.off+int64(len(s.data)) {
			return s
		}
	}
	return nil
}

// get fetches one range with one request.
func (r *fragmentReader) get(ctx context.Context, br byteRange) ([]byte, error) {
	data, err := r.t.getRange(ctx, r.key, br.off, br.n)
	if err == nil && int64(len(data)) != br.n {
		err = fmt.Errorf("fragment %s: %w: object ends before byte %d, manifest says %d bytes",
			r.key, ErrCorrupt, br.off+br.n, r.size)
	}
	if err != nil {
		r.note(err)
		return nil, err
	}
	return data, nil
}

func (r *fragmentReader) note(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// prefetch fetches ranges (coalesced, at most chunkReads requests at once) and keeps
// them for ReadAt until drop. The first failure cancels the other requests and is
// returned naming the object.
func (r *fragmentReader) prefetch(ctx context.Context, ranges []byteRange) error {
	var rs []byteRange
	for _, br := range coalesce(ranges, coalesceGap) {
		br.n = min(br.n, r.size-br.off) // never past the end the manifest gives
		if !r.covered(br) {
			rs = append(rs, br)
		}
	}
	spans := make([]span, len(rs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(chunkReads)
	for i, br := range rs {
		g.Go(func() error {
			data, err := r.get(gctx, br)
			spans[i] = span{off: br.off, data: data}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return err // names the object already
		}
		return fmt.Errorf("fragment %s: %w", r.key, err)
	}
	r.mu.Lock()
	r.spans = append(r.spans, spans...)
	r.mu.Unlock()
	return nil
}

func (r *fragmentReader) covered(br byteRange) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spanLocked(br) != nil
}

// drop releases the prefetched ranges, unless they hold the whole object (a small
// fragment read with its footer), which then serves every later read.
func (r *fragmentReader) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.whole {
		r.spans = nil
	}
}

// keep releases the prefetched ranges but those that hold br (a row group to be
// read next).
func (r *fragmentReader) keep(br byteRange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.whole {
		return
	}
	r.spans = slices.DeleteFunc(r.spans, func(s span) bool {
		return br.off < s.off || br.off+br.n > s.off+int64(len(s.data))
	})
}

// classify wraps a decoder error: the I/O error behind it if there was one,
// otherwise ErrCorrupt.
func (r *fragmentReader) classify(err error) error {
	r.mu.Lock()
	ioErr := r.err
	r.mu.Unlock()
	if errors.Is(ioErr, ErrCorrupt) {
		return ioErr
	}
	if ioErr != nil {
		return fmt.Errorf("fragment %s: %w", r.key, ioErr)
	}
	return fmt.Errorf("fragment %s: %w: %v", r.key, ErrCorrupt, err)
}
