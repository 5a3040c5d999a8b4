package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ReaderAt reads one object by ranged requests, for readers that seek around a file
// instead of streaming it: Parquet (it satisfies arrow-go's parquet.ReaderAtSeeker)
// and Arrow IPC footers. The object's size is taken once, when it is opened, so it
// must not change while it is read; Tidemark's data objects are immutable.
//
// ReadAt is safe for concurrent use and costs one request per call; Read and Seek
// share a cursor and are meant for one goroutine at a time (they are serialised, not
// interleaved).
type ReaderAt struct {
	b    *Bucket
	ctx  context.Context
	key  string
	size int64

	mu  sync.Mutex // guards pos, for Read and Seek
	pos int64
}

// ReaderAt opens key for ranged reads. It stats the object once for its size. Every
// later read runs under ctx (so cancelling ctx fails them) and under the bucket's
// per-operation timeout, each read separately.
func (b *Bucket) ReaderAt(ctx context.Context, key string) (*ReaderAt, error) {
	o, err := b.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	return &ReaderAt{b: b, ctx: ctx, key: key, size: o.Size}, nil
}

// Size returns the object's size when it was opened.
func (r *ReaderAt) Size() int64 { return r.size }

// Key returns the object's key.
func (r *ReaderAt) Key() string { return r.key }

// ReadAt reads len(p) bytes at off with one ranged request. Following io.ReaderAt, a
// read that reaches the end of the object returns the bytes there are and io.EOF.
func (r *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
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
	ctx, cancel := r.b.op(r.ctx)
	defer cancel()
	rc, err := r.b.be.getRange(ctx, r.key, off, n)
	if err != nil {
		return 0, requestError(fmt.Sprintf("read %s [%d,+%d)", r.key, off, n), err)
	}
	got, err := io.ReadFull(rc, p[:n])
	cerr := rc.Close()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// Never pass io.EOF through here: it would read as a clean end of object.
		return got, fmt.Errorf("read %s [%d,+%d): object is shorter than the %d bytes it had when opened: %w",
			r.key, off, n, r.size, io.ErrUnexpectedEOF)
	}
	if err == nil {
		err = cerr
	}
	if err != nil {
		return got, requestError(fmt.Sprintf("read %s [%d,+%d)", r.key, off, n), err)
	}
	if n < int64(len(p)) {
		return got, io.EOF
	}
	return got, nil
}

// Read reads from the cursor and advances it.
func (r *ReaderAt) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, err := r.ReadAt(p, r.pos)
	r.pos += int64(n)
	return n, err
}

// Seek moves the cursor used by Read. Seeking past the end is allowed (Read then
// returns io.EOF); seeking before the start is an error.
func (r *ReaderAt) Seek(offset int64, whence int) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.pos + offset
	case io.SeekEnd:
		abs = r.size + offset
	default:
		return 0, fmt.Errorf("seek %s: invalid whence %d", r.key, whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("seek %s: negative position %d", r.key, abs)
	}
	r.pos = abs
	return abs, nil
}
