// Package versions keeps a dense sequence of immutable, versioned objects under one
// directory: the base table's manifests (_versions/) and each WAL shard's manifests
// (_manifests/) are both such logs.
//
// Invariants:
//
//   - Version v+1 is created with put-if-absent, so of any number of concurrent writers
//     of the same version exactly one wins; the others get an error wrapping
//     objstore.ErrExists and must reload and decide again.
//   - Versions are dense: a writer only creates v+1 after reading v, so the first
//     missing version after a present one marks the end of the log.
//   - The latest-version hint is advisory. It is written after the version it names, so
//     it may lag but never leads; finding the newest version never trusts it further
//     than "start probing here".
package versions

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/tidemark-io/tidemark/pkg/objstore"
)

// ErrEmpty means the log has no version yet.
var ErrEmpty = errors.New("no versions")

// MaxVersionBytes bounds a version object, read and written. Versions are manifests:
// a table manifest lists each fragment in ~300 bytes (64 MiB is ~200k fragments, far
// past what merges leave) and a shard manifest its pending generations (reads refuse
// above 4096). Anything larger is damage or not ours, and is refused before it is
// read into memory; a version too large to be read back is never written.
const MaxVersionBytes = 64 << 20

// maxHintBytes bounds the hint object, a decimal version and a newline.
const maxHintBytes = 1 << 10

// Log is a versioned-object log: <dir>/<v:020d>.json objects plus a hint object.
// It holds no state besides its location and is safe for concurrent use.
type Log struct {
	bucket *objstore.Bucket
	dir    string // e.g. "rollout/foo/_versions"
	hint   string // key of the latest-version hint
}

// New returns the log of versions under dir, with its hint stored at hintKey.
func New(bucket *objstore.Bucket, dir, hintKey string) *Log {
	return &Log{bucket: bucket, dir: strings.TrimSuffix(dir, "/"), hint: hintKey}
}

// Key is the object key of version v. Zero-padding to 20 digits makes listing order
// version order.
func (l *Log) Key(v uint64) string { return fmt.Sprintf("%s/%020d.json", l.dir, v) }

// Get reads version v.
// A version over MaxVersionBytes fails with objstore.ErrTooLarge, unread.
func (l *Log) Get(ctx context.Context, v uint64) ([]byte, error) {
	return l.bucket.GetMax(ctx, l.Key(v), MaxVersionBytes)
}

// Create writes version v if it does not exist. On success it advances the hint
// (best effort: a failed hint write costs readers one more probe, nothing else, so
// its error is returned separately for the caller to log).
func (l *Log) Create(ctx context.Context, v uint64, data []byte) (hintErr error, err error) {
	if len(data) > MaxVersionBytes {
		return nil, fmt.Errorf("version %s: %d bytes, at most %d: %w", l.Key(v), len(data), MaxVersionBytes, objstore.ErrTooLarge)
	}
	if err := l.bucket.PutIfAbsent(ctx, l.Key(v), data); err != nil {
		return nil, err
	}
	return l.bucket.Put(ctx, l.hint, []byte(strconv.FormatUint(v, 10)+"\n")), nil
}

// Latest returns the newest version, starting the search at the higher of the hint
// and known (a version the caller has already seen; 0 if none), and probing forward.
// Without a hint or known version it lists the directory. It returns ErrEmpty when the
// log has no version.
func (l *Log) Latest(ctx context.Context, known uint64) (uint64, error) {
	v := known
	// The hint only saves requests: if it cannot be read, probe from what we know
	// (or list) rather than fail the caller.
	if data, err := l.bucket.GetMax(ctx, l.hint, maxHintBytes); err == nil {
		if h, perr := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); perr == nil && h > v {
			v = h
		}
	}
	if v == 0 {
		listed, err := l.list(ctx)
		if err != nil {
			return 0, err
		}
		v = listed
	}
	for {
		ok, err := l.bucket.Exists(ctx, l.Key(v+1))
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		v++
	}
	if v == 0 {
		return 0, fmt.Errorf("%s: %w", l.dir, ErrEmpty)
	}
	return v, nil
}

func (l *Log) list(ctx context.Context) (uint64, error) {
	var v uint64
	err := l.bucket.Walk(ctx, l.dir+"/", "", func(o objstore.Object) error {
		name := strings.TrimSuffix(path.Base(o.Key), ".json")
		if n, err := strconv.ParseUint(name, 10, 64); err == nil && n > v {
			v = n
		}
		return nil
	})
	return v, err
}

// List returns every version present, in order (for inspection and tests).
func (l *Log) List(ctx context.Context) ([]uint64, error) {
	var out []uint64
	err := l.bucket.Walk(ctx, l.dir+"/", "", func(o objstore.Object) error {
		name := strings.TrimSuffix(path.Base(o.Key), ".json")
		if n, err := strconv.ParseUint(name, 10, 64); err == nil {
			out = append(out, n)
		}
		return nil
	})
	return out, err
}
