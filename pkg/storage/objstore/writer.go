package objstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"gocloud.dev/blob"
)

// objectWriter is a backend's half of a Writer: bytes go in as they are
// written, and the object appears, whole, only at commit.
type objectWriter interface {
	io.Writer
	// commit publishes the object: readers see the old bytes (or none) before it
	// returns and the whole new object after.
	commit() error
	// abort discards what was written; nothing is published.
	abort()
}

// Writer streams one object to the bucket, for objects too large to hold in
// memory (an export's Parquet files). What is written is invisible until Close
// returns nil: readers see the old bytes of the key (or no object) before, the
// whole new object after, never a part of it; an aborted or failed write
// publishes nothing. Like Put, it replaces the object: use it only for keys unique
// to the writer.
//
// A Writer is not bounded by the bucket's per-operation timeout (a stream lasts
// as long as its producer takes), only by the context NewWriter was given; it is
// one request to the fault wrapper and to the concurrency limit of WithRetry,
// which resends its opening but never its bytes: a throttled or failed stream
// fails, and its caller writes it again. It is not safe for concurrent use.
type Writer struct {
	key  string
	w    objectWriter
	n    int64
	err  error // the first error: every later call returns it
	done bool
}

// NewWriter opens a Writer of key. Close or Abort it.
func (b *Bucket) NewWriter(ctx context.Context, key string) (*Writer, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	w, err := b.be.newWriter(ctx, key)
	if err != nil {
		return nil, requestError("write "+key, err)
	}
	return &Writer{key: key, w: w}, nil
}

// Write appends p to the object.
func (w *Writer) Write(p []byte) (int, error) {
	switch {
	case w.err != nil:
		return 0, w.err
	case w.done:
		return 0, fmt.Errorf("write %s: writer closed", w.key)
	}
	n, err := w.w.Write(p)
	w.n += int64(n)
	if err != nil {
		w.err = requestError("write "+w.key, err)
		w.w.abort()
		w.done = true
		return n, w.err
	}
	return n, nil
}

// Written is how many bytes were written so far.
func (w *Writer) Written() int64 { return w.n }

// Close publishes the object. A write that failed earlier returns its error and
// publishes nothing.
func (w *Writer) Close() error {
	if w.done {
		return w.err
	}
	w.done = true
	if err := w.w.commit(); err != nil {
		w.err = requestError("write "+w.key, err)
	}
	return w.err
}

// Abort discards the object: nothing is published. It does nothing after Close.
func (w *Writer) Abort() {
	if !w.done {
		w.done = true
		w.w.abort()
	}
}

// gocloudWriter streams through blob.Writer. Cancelling its context before Close
// is how gocloud aborts a write.
type gocloudWriter struct {
	w      *blob.Writer
	cancel context.CancelFunc
}

func (g *gocloudBackend) newWriter(ctx context.Context, key string) (objectWriter, error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := g.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType})
	if err != nil {
		cancel()
		return nil, mapErr(err)
	}
	return &gocloudWriter{w: w, cancel: cancel}, nil
}

func (g *gocloudWriter) Write(p []byte) (int, error) {
	n, err := g.w.Write(p)
	return n, mapErr(err)
}

// commit closes the blob.Writer. azureblob's pipe writer (gocloud v0.47) may panic
// in Close after a failed upload (see the package doc): that is a failed write.
func (g *gocloudWriter) commit() (err error) {
	defer g.cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the upload failed (driver panic: %v)", ErrUnavailable, r)
		}
	}()
	return mapErr(g.w.Close())
}

func (g *gocloudWriter) abort() {
	g.cancel()
	defer func() { _ = recover() }() // as in commit
	_ = g.w.Close()
}

// fileWriter stages the object in the bucket's staging directory and renames it
// into place at commit, as put does.
type fileWriter struct {
	ctx  context.Context
	f    *fileBackend
	key  string
	file *os.File
	buf  *bufio.Writer
}

// fileWriteBuffer is how much of a stream a file:// write gathers before a system
// call.
const fileWriteBuffer = 1 << 20

func (f *fileBackend) newWriter(ctx context.Context, key string) (objectWriter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	file, err := f.createTemp()
	if err != nil {
		return nil, err
	}
	return &fileWriter{ctx: ctx, f: f, key: key, file: file, buf: bufio.NewWriterSize(file, fileWriteBuffer)}, nil
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.buf.Write(p)
}

func (w *fileWriter) commit() error {
	defer os.Remove(w.file.Name()) // after the rename, a name no longer there
	err := errors.Join(w.buf.Flush(), w.file.Sync())
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.ctx.Err()
	}
	if err != nil {
		return err
	}
	return w.f.publish(w.ctx, w.file.Name(), w.key)
}

func (w *fileWriter) abort() {
	_ = w.file.Close()
	_ = os.Remove(w.file.Name())
}

// faultWriter is one OpPut request to the Faults, from the open to the commit;
// an error injected after the write is returned by commit, once published.
type faultWriter struct {
	objectWriter
	release func()
	after   error
}

func (fb *faultBackend) newWriter(ctx context.Context, key string) (objectWriter, error) {
	release, after, err := fb.f.begin(ctx, OpPut, key)
	if err != nil {
		return nil, err
	}
	w, err := fb.inner.newWriter(ctx, key)
	if err != nil {
		release()
		return nil, err
	}
	return &faultWriter{objectWriter: w, release: release, after: after}, nil
}

func (w *faultWriter) commit() error {
	defer w.release()
	if err := w.objectWriter.commit(); err != nil {
		return err
	}
	return w.after
}

func (w *faultWriter) abort() {
	defer w.release()
	w.objectWriter.abort()
}

// slotWriter holds a slot of the concurrency limit until the stream ends.
type slotWriter struct {
	objectWriter
	release func()
	once    sync.Once
}

func (r *retryBackend) newWriter(ctx context.Context, key string) (w objectWriter, err error) {
	err = r.do(ctx, func(s *slot) error {
		w, err = r.inner.newWriter(ctx, key)
		if err == nil {
			w = &slotWriter{objectWriter: w, release: s.keep()}
		}
		return err
	})
	return w, err
}

func (w *slotWriter) commit() error {
	defer w.once.Do(w.release)
	return w.objectWriter.commit()
}

func (w *slotWriter) abort() {
	defer w.once.Do(w.release)
	w.objectWriter.abort()
}
