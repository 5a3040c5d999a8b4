package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
)

// contentType is set on every write: besides describing the bytes, a ContentType is
// what makes blob.Bucket.Upload take the non-pipe upload path, the only conditional
// write path that does not panic on azureblob in gocloud v0.47.
const contentType = "application/octet-stream"

// gocloudBackend serves every driver whose IfNotExist is atomic (memblob, s3blob,
// azureblob, gcsblob). It is also the read/list/delete half of the file:// backend.
type gocloudBackend struct {
	b *blob.Bucket
}

// mapErr turns gocloud error codes into this package's sentinels, keeping the
// original error in the chain for the message.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	case gcerrors.FailedPrecondition:
		return fmt.Errorf("%w: %v", ErrExists, err)
	}
	if throttled(err) {
		return fmt.Errorf("%w: %w", ErrThrottled, err)
	}
	return err
}

func (g *gocloudBackend) get(ctx context.Context, key string, limit int64) ([]byte, error) {
	if limit < 0 {
		data, err := g.b.ReadAll(ctx, key)
		return data, mapErr(err)
	}
	// NewReader has the object's size from the response headers: refuse before the
	// body is read. The limited read covers an object replaced by a larger one
	// between the two.
	r, err := g.b.NewReader(ctx, key, nil)
	if err != nil {
		return nil, mapErr(err)
	}
	defer r.Close()
	if r.Size() > limit {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, r.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, mapErr(err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
	}
	return data, nil
}

func (g *gocloudBackend) getRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	r, err := g.b.NewRangeReader(ctx, key, offset, length, nil)
	if rangeNotSatisfiable(err) {
		// A range starting at or past the end holds no bytes, as on memblob and
		// file://, rather than the store failing (the stores answer it 416).
		return http.NoBody, nil
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return r, nil
}

func (g *gocloudBackend) stat(ctx context.Context, key string) (Object, error) {
	a, err := g.b.Attributes(ctx, key)
	if err != nil {
		return Object{}, mapErr(err)
	}
	return Object{Key: key, Size: a.Size, ModTime: a.ModTime}, nil
}

func (g *gocloudBackend) put(ctx context.Context, key string, data []byte) error {
	return mapErr(g.b.Upload(ctx, key, bytes.NewReader(data), &blob.WriterOptions{ContentType: contentType}))
}

// conflictBackoff spaces the resends of a conditional write that S3 refused because
// another conditional write of the key was in flight (409 ConditionalRequestConflict):
// that write ends within a request's time, so the waits are short.
var conflictBackoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.5}

// putIfAbsent resends a write that S3 answered 409 ConditionalRequestConflict until it
// wins or gets 412 (ErrExists), or ctx ends. A 409 is not a lost race: the write it
// conflicted with may still fail, and a caller told ErrExists would then leave the
// key to nobody. The 409'd write was not performed, so resending it is safe.
func (g *gocloudBackend) putIfAbsent(ctx context.Context, key string, data []byte) error {
	b := conflictBackoff.Start()
	for {
		err := g.b.Upload(ctx, key, bytes.NewReader(data), &blob.WriterOptions{ContentType: contentType, IfNotExist: true})
		if !conditionalConflict(err) {
			return mapErr(err)
		}
		if backoff.Sleep(ctx, clock.RealClock{}, b.Next()) != nil {
			return fmt.Errorf("%w (resent until the deadline)", err)
		}
	}
}

func (g *gocloudBackend) delete(ctx context.Context, key string) error {
	return mapErr(g.b.Delete(ctx, key))
}

func (g *gocloudBackend) list(ctx context.Context, prefix, delimiter string, fn func(Object) error) error {
	it := g.b.List(&blob.ListOptions{Prefix: prefix, Delimiter: delimiter})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return mapErr(err)
		}
		if err := fn(Object{Key: o.Key, Size: o.Size, ModTime: o.ModTime, IsDir: o.IsDir}); err != nil {
			return err
		}
	}
}

func (g *gocloudBackend) getRanges(ctx context.Context, key string, rs []ByteRange) ([][]byte, error) {
	return getRangesEach(ctx, g, key, rs)
}

func (g *gocloudBackend) local() bool { return false }

func (g *gocloudBackend) close() error { return g.b.Close() }
