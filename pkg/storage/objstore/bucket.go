package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

var (
	// ErrNotFound means the object does not exist. It is a Conflict: objects of a
	// store are deleted by merges (drained generations), by compaction and with the
	// store, so one that vanished between the snapshot that named it and its read
	// means the read raced one of those.
	ErrNotFound = errclass.New(errclass.Conflict, "object not found")
	// ErrExists means a put-if-absent lost: the key was already taken. It is a
	// Conflict when its caller did not resolve it.
	ErrExists = errclass.New(errclass.Conflict, "object already exists")
	// ErrInvalidKey means a key that no driver can store faithfully.
	ErrInvalidKey = errors.New("invalid object key")
	// ErrTooLarge means GetMax found an object over its limit and did not read it.
	ErrTooLarge = errors.New("object too large")
	// ErrThrottled means the store refused a request for its rate (S3's 503
	// SlowDown, GCS's 429, Azure's ServerBusy), and is also what a Faults wrapper
	// in ThrottleReject mode answers (with ErrInjected). Back off and retry.
	ErrThrottled = errclass.New(errclass.Busy, "throttled: too many concurrent requests")
	// ErrUnavailable marks a request the object store failed for reasons of its
	// own - an error answer or a broken connection, after the storage SDK's own
	// retries - as opposed to an answer about the object (not found, exists, too
	// large), a bad key or the caller's context. Trying again later is the remedy,
	// so the worker answers it with 503 instead of a bare 500. A write that failed
	// this way may still have happened (see FailAfterWrite); callers that must know
	// read back.
	ErrUnavailable = errclass.New(errclass.Unavailable, "object store unavailable")
)

// requestError wraps err, the failure of the request what ("get <key>"), adding
// ErrUnavailable when the store itself failed (see ErrUnavailable).
func requestError(what string, err error) error {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrExists), errors.Is(err, ErrTooLarge),
		errors.Is(err, ErrInvalidKey), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		!retryableCode(err):
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
}

// DefaultOpTimeout bounds one object-store call when the caller's context has no
// shorter deadline.
const DefaultOpTimeout = 60 * time.Second

// Object describes one listed object, or one common prefix ("directory") when
// listing with a delimiter.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
	// IsDir is set for a common prefix returned by a delimited listing; Key then
	// ends with the delimiter.
	IsDir bool
}

// backend is what a storage driver implements. It is deliberately tiny so the fault
// wrapper and the file:// driver each implement the same few calls.
type backend interface {
	// get reads the whole object; with limit >= 0 it fails with ErrTooLarge, without
	// reading the body, when the object is larger than limit bytes.
	get(ctx context.Context, key string, limit int64) ([]byte, error)
	// getRange reads length bytes at offset (length < 0 means to the end).
	getRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// getRanges reads ranges of one object (Bucket.GetRanges).
	getRanges(ctx context.Context, key string, rs []ByteRange) ([][]byte, error)
	// local reports whether requests are served from files of this machine with
	// no round trip between (Bucket.Local).
	local() bool
	stat(ctx context.Context, key string) (Object, error)
	put(ctx context.Context, key string, data []byte) error
	putIfAbsent(ctx context.Context, key string, data []byte) error
	// newWriter opens a stream of key's new bytes (Bucket.NewWriter).
	newWriter(ctx context.Context, key string) (objectWriter, error)
	delete(ctx context.Context, key string) error
	// list calls fn for every object under prefix in key order; with a non-empty
	// delimiter, keys sharing the next path element collapse to one IsDir entry.
	list(ctx context.Context, prefix, delimiter string, fn func(Object) error) error
	close() error
}

// Bucket is an object-store bucket opened from a URL. It is safe for concurrent use.
type Bucket struct {
	be        backend
	name      string // the URL with credentials removed, for messages
	opTimeout time.Duration
}

// Option configures Open.
type Option func(*Bucket)

// WithOpTimeout sets the per-operation timeout (DefaultOpTimeout otherwise; 0 means
// only the caller's context bounds a call).
func WithOpTimeout(d time.Duration) Option {
	return func(b *Bucket) { b.opTimeout = d }
}

func newBucket(be backend, name string, opts ...Option) *Bucket {
	b := &Bucket{be: be, name: name, opTimeout: DefaultOpTimeout}
	for _, o := range opts {
		o(b)
	}
	return b
}

// String names the bucket (its URL without credentials).
func (b *Bucket) String() string { return b.name }

// op derives the context one call runs under.
func (b *Bucket) op(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.opTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.opTimeout)
}

// Get returns the whole object.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, error) {
	return b.get(ctx, key, -1)
}

// GetMax returns the whole object if it is at most limit bytes, and otherwise fails
// with an error naming the key and wrapping ErrTooLarge, having read no more than
// the response headers (or limit+1 bytes, if the object grew meanwhile). Readers of
// metadata objects (manifests, hints, registry records) use it: a damaged or
// hostile object must fail its reader, not take the process's memory.
func (b *Bucket) GetMax(ctx context.Context, key string, limit int64) ([]byte, error) {
	return b.get(ctx, key, max(limit, 0))
}

func (b *Bucket) get(ctx context.Context, key string, limit int64) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	ctx, cancel := b.op(ctx)
	defer cancel()
	data, err := b.be.get(ctx, key, limit)
	if err != nil {
		return nil, requestError("get "+key, err)
	}
	return data, nil
}

// GetRange returns length bytes at offset (length < 0: to the end of the object). A
// range reaching past the end returns the bytes up to the end, and one starting at or
// past the end returns none, on every driver.
func (b *Bucket) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	ctx, cancel := b.op(ctx)
	defer cancel()
	rc, err := b.be.getRange(ctx, key, offset, length)
	if err != nil {
		return nil, requestError(fmt.Sprintf("get %s [%d,+%d)", key, offset, length), err)
	}
	defer rc.Close()
	data, err := readRange(rc, length)
	if err != nil {
		return nil, requestError(fmt.Sprintf("get %s [%d,+%d)", key, offset, length), err)
	}
	return data, nil
}

// ByteRange is N bytes at Off of an object (N >= 0).
type ByteRange struct{ Off, N int64 }

// GetRanges reads ranges of one object, an answer per range in the order given,
// each its range's bytes or fewer where the object ends (none past it). On a
// Local bucket the object is opened once and the ranges read one after another:
// a request there is a few system calls, and a lookup into a large store's key
// index wants a few ranges of each of many objects. Elsewhere it is a GetRange
// per range, one after another; a caller that wants a remote object's ranges at
// once sends GetRange concurrently instead.
func (b *Bucket) GetRanges(ctx context.Context, key string, rs []ByteRange) ([][]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.Off < 0 || r.N < 0 {
			return nil, fmt.Errorf("get %s: range [%d,+%d): negative offset or length", key, r.Off, r.N)
		}
	}
	ctx, cancel := b.op(ctx)
	defer cancel()
	out, err := b.be.getRanges(ctx, key, rs)
	if err != nil {
		return nil, requestError(fmt.Sprintf("get %s (%d ranges)", key, len(rs)), err)
	}
	return out, nil
}

// Local reports whether the bucket's objects are files of this machine
// (file://), behind no wrapper that adds a round trip: a request is then a few
// system calls, and reads of one object go best in one call (GetRanges).
func (b *Bucket) Local() bool { return b.be.local() }

// getRangesEach is getRanges as one getRange per range, for backends whose
// requests are round trips anyway.
func getRangesEach(ctx context.Context, be backend, key string, rs []ByteRange) ([][]byte, error) {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		rc, err := be.getRange(ctx, key, r.Off, r.N)
		if err != nil {
			return nil, err
		}
		out[i], err = readRange(rc, r.N)
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rangeBuffer bounds the buffer a ranged read allocates up front for the length
// it asked for; a longer range (or one to the end) grows as io.ReadAll does.
const rangeBuffer = 16 << 20

// readRange reads r to its end into a buffer of length bytes, allocated once:
// io.ReadAll grows its buffer from 512 bytes, a dozen allocations and copies for
// a key-index block, more for a row group, which were a lookup's largest cost
// after the requests themselves.
func readRange(r io.Reader, length int64) ([]byte, error) {
	if length <= 0 || length > rangeBuffer {
		return io.ReadAll(r)
	}
	buf := make([]byte, length)
	n, err := io.ReadFull(r, buf)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return buf[:n], nil // the object ends before the range does
	case err != nil:
		return nil, err
	}
	// A backend answers at most the range; read on to its end all the same, as
	// io.ReadAll would, so a longer answer is returned rather than cut.
	var probe [1]byte
	switch k, err := io.ReadFull(r, probe[:]); {
	case k == 0 && errors.Is(err, io.EOF):
		return buf, nil
	case k == 0:
		return nil, err
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return append(append(buf, probe[0]), rest...), nil
}

// Stat returns the object's size and modification time.
func (b *Bucket) Stat(ctx context.Context, key string) (Object, error) {
	if err := ValidateKey(key); err != nil {
		return Object{}, err
	}
	ctx, cancel := b.op(ctx)
	defer cancel()
	o, err := b.be.stat(ctx, key)
	if err != nil {
		return Object{}, requestError("stat "+key, err)
	}
	return o, nil
}

// Exists reports whether key exists.
func (b *Bucket) Exists(ctx context.Context, key string) (bool, error) {
	_, err := b.Stat(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Put writes (or replaces) an object. Readers see the old or the new bytes, never a
// mix. Use it only for objects whose key is unique to the writer; shared keys go
// through PutIfAbsent.
func (b *Bucket) Put(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	ctx, cancel := b.op(ctx)
	defer cancel()
	if err := b.be.put(ctx, key, data); err != nil {
		return requestError("put "+key, err)
	}
	return nil
}

// PutIfAbsent creates key with data only if it does not exist. Exactly one of any
// number of concurrent callers succeeds; the others get an error wrapping ErrExists.
// A write the store refused because another conditional write of the key was in
// flight (S3's 409 ConditionalRequestConflict) is resent within ctx, never taken for
// a loss: the other write may yet fail.
func (b *Bucket) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	ctx, cancel := b.op(ctx)
	defer cancel()
	if err := b.be.putIfAbsent(ctx, key, data); err != nil {
		return requestError("put-if-absent "+key, err)
	}
	return nil
}

// Delete removes key. Deleting a missing object is not an error: deletes are
// best-effort clean-up that may be retried after a crash.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	ctx, cancel := b.op(ctx)
	defer cancel()
	if err := b.be.delete(ctx, key); err != nil && !errors.Is(err, ErrNotFound) {
		return requestError("delete "+key, err)
	}
	return nil
}

// Walk calls fn for every object under prefix, in key order. With a non-empty
// delimiter, keys that share the next path element are collapsed into one IsDir
// entry. An error from fn stops the walk and is returned as is. The whole walk,
// including the time spent in fn, is one operation under the per-operation timeout.
func (b *Bucket) Walk(ctx context.Context, prefix, delimiter string, fn func(Object) error) error {
	ctx, cancel := b.op(ctx)
	defer cancel()
	var fnErr error
	err := b.be.list(ctx, prefix, delimiter, func(o Object) error {
		if err := fn(o); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return requestError("list "+prefix, err)
	}
	return nil
}

// List returns every object under prefix in key order.
func (b *Bucket) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := b.Walk(ctx, prefix, "", func(o Object) error {
		out = append(out, o)
		return nil
	})
	return out, err
}

// ListDirs returns the names of the "directories" directly under prefix (which should
// end in "/"), without the prefix and without the trailing "/".
func (b *Bucket) ListDirs(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	err := b.Walk(ctx, prefix, "/", func(o Object) error {
		if o.IsDir {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(o.Key, prefix), "/"))
		}
		return nil
	})
	return out, err
}

// Close releases the bucket's resources.
func (b *Bucket) Close() error { return b.be.close() }

// ValidateKey rejects keys that some driver would store under a different name or
// not at all: empty keys, control characters, backslashes, invalid UTF-8, empty or
// "."/".." path elements, a leading or trailing "/", path elements longer than 255
// bytes (the usual file-name limit), fileblob's reserved ".attrs" suffix, and the
// file:// driver's staging directory as a first element. It also rejects what
// fileblob would escape on its way to a file name, because the file:// driver of
// earlier versions read through fileblob and wrote to the unescaped path: an
// element ending in ".." before a "/" and anything that looks like an escape
// sequence ("__0x"). Every key Tidemark
// builds passes; a key from user input that fails is a bug or an attack.
func ValidateKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why) }
	switch {
	case key == "":
		return bad("empty")
	case len(key) > 1024:
		return bad("longer than 1024 bytes")
	case strings.HasSuffix(key, ".attrs"):
		return bad(`ends in ".attrs"`)
	case strings.Contains(key, "__0x"):
		return bad(`contains "__0x", which fileblob treats as an escape sequence`)
	case strings.Contains(key, "../"):
		return bad(`contains "../"`)
	}
	for _, r := range key {
		if unicode.IsControl(r) || r == '\\' || r == unicode.ReplacementChar {
			return bad("contains a control character, backslash or invalid UTF-8")
		}
	}
	for i, el := range strings.Split(key, "/") {
		switch {
		case el == "":
			return bad("empty path element")
		case el == "." || el == "..":
			return bad(`"." or ".." path element`)
		case len(el) > 255:
			return bad("path element longer than 255 bytes")
		case i == 0 && el == tempDirName:
			return bad(fmt.Sprintf("%q is reserved for the file:// driver's staging area", tempDirName))
		}
	}
	return nil
}
