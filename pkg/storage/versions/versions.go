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
//   - Versions are removed only from the bottom (Prune), oldest first, so the log
//     stays dense from its oldest remaining version to its newest; a search whose
//     start was removed lists the directory instead of probing from it.
package versions

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
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
	// A caller that knows a version usually knows the newest (a writer of its own
	// log, a handle that committed last): probing from it while the hint is read
	// answers in one round trip instead of two. The hint only saves requests: if it
	// cannot be read, probe from what we know (or list) rather than fail the caller.
	var (
		hint              uint64
		start, next       bool
		probeErr, hintErr error
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { hint, hintErr = l.readHint(gctx); return nil })
	if known > 0 {
		g.Go(func() error { start, next, probeErr = l.probe(gctx, known); return nil })
	}
	_ = g.Wait()
	if hintErr == nil && hint > v {
		v = hint
		if start, next, probeErr = l.probe(ctx, v); probeErr != nil {
			return 0, probeErr
		}
	}
	if v > 0 {
		// The start is checked while probing past it: a start that was pruned (a
		// handle idle for longer than the retention, or a hint a stalled committer
		// wrote late) would otherwise make the first pruned version look like the end.
		switch {
		case probeErr != nil:
			return 0, probeErr
		case !start:
			v = 0 // list
		case !next:
			return v, nil
		default:
			v++
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

// Exists reports whether version v exists.
func (l *Log) Exists(ctx context.Context, v uint64) (bool, error) {
	return l.bucket.Exists(ctx, l.Key(v))
}

// readHint reads the hint object: the newest version some committer wrote last.
func (l *Log) readHint(ctx context.Context) (uint64, error) {
	data, err := l.bucket.GetMax(ctx, l.hint, maxHintBytes)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
}

// probe reports, with two requests at once, whether versions v and v+1 exist.
// Versions are only removed from the bottom of the log (Prune), so a v that exists
// has every later version after it.
func (l *Log) probe(ctx context.Context, v uint64) (start, next bool, err error) {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { start, err = l.bucket.Exists(gctx, l.Key(v)); return err })
	g.Go(func() (err error) { next, err = l.bucket.Exists(gctx, l.Key(v+1)); return err })
	return start, next, g.Wait()
}

// Prune deletes the oldest versions of the log: every version below the newest
// keep ones whose object was written before cutoff, from the oldest up, stopping
// at the first one it must keep, so that what remains is still dense (a run from
// some oldest version to the newest). It returns the versions it deleted.
//
// Readers holding a pruned version keep what they loaded; the objects it
// references are the caller's to keep for as long as such readers may live (the
// retention age is the cutoff). Before deleting, the hint is set to the newest
// version, so that no search starts below the new oldest one; a search that does
// anyway (a stale hint or known version) finds its start missing and lists.
func (l *Log) Prune(ctx context.Context, keep int, cutoff time.Time) ([]uint64, error) {
	keep = max(keep, 1)
	var objs []objstore.Object
	var nums []uint64
	err := l.bucket.Walk(ctx, l.dir+"/", "", func(o objstore.Object) error {
		name := strings.TrimSuffix(path.Base(o.Key), ".json")
		if n, err := strconv.ParseUint(name, 10, 64); err == nil {
			objs, nums = append(objs, o), append(nums, n)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prune %s: list: %w", l.dir, err)
	}
	if len(nums) <= keep {
		return nil, nil
	}
	order := make([]int, len(nums))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(nums[a], nums[b]) })
	newest := nums[order[len(order)-1]]
	if err := l.bucket.Put(ctx, l.hint, []byte(strconv.FormatUint(newest, 10)+"\n")); err != nil {
		return nil, fmt.Errorf("prune %s: set the hint to %d: %w", l.dir, newest, err)
	}
	var deleted []uint64
	for _, i := range order[:len(order)-keep] {
		if !objs[i].ModTime.Before(cutoff) {
			break
		}
		if err := l.bucket.Delete(ctx, objs[i].Key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return deleted, fmt.Errorf("prune %s: delete version %d: %w", l.dir, nums[i], err)
		}
		deleted = append(deleted, nums[i])
	}
	return deleted, nil
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
