package wal

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/versions"
)

// ErrNoShard means the shard has no manifest version: no writer ever opened it, or
// its manifests were deleted with its store. It is a Conflict: under a writer or a
// read, the shard was deleted with its store.
var ErrNoShard = errclass.New(errclass.Conflict, "WAL shard not found")

var (
	// errNoChange, returned by an edit function, means the latest manifest already
	// says what the edit wanted; nothing is written.
	errNoChange = errors.New("no change")
	// errMaybeLanded marks a failed edit that may still have created its version: a
	// write failed with an unknown outcome (a request can be applied after its client
	// gave up). What the edit references must then be kept.
	errMaybeLanded = errors.New("the manifest write may have landed")
)

const (
	// maxEditAttempts bounds a manifest edit's lost races. Only opens, seals (one
	// writer) and drains (one merge at a time per store) edit a shard manifest, so
	// a handful of conflicts is already unusual.
	maxEditAttempts = 32
	// maxUnknownOutcomes bounds retries after manifest writes that failed with an
	// error other than "exists" and were then found not to have landed.
	maxUnknownOutcomes = 3
	// maxPrunedReads bounds the searches for the latest manifest whose result was
	// pruned before it could be read (each one needs KeepManifests newer versions
	// written meanwhile).
	maxPrunedReads = 3
)

// shard locates one shard of a store and edits its manifest. It holds no mutable
// state and is safe for concurrent use.
type shard struct {
	bucket *objstore.Bucket
	dir    string // store directory, no trailing slash
	name   string
	log    *versions.Log
	opts   Options
	logger *slog.Logger
}

func newShard(bucket *objstore.Bucket, dir, name string, opts Options) (*shard, error) {
	if err := ValidateShard(name); err != nil {
		return nil, err
	}
	dir = cleanDir(dir)
	root := shardRoot(dir, name)
	return &shard{
		bucket: bucket,
		dir:    dir,
		name:   name,
		log:    versions.New(bucket, root+"/"+manifestsDir, root+"/"+latestHint),
		opts:   opts,
		logger: opts.Logger.With("store", dir, "shard", name),
	}, nil
}

func (s *shard) String() string { return shardRoot(s.dir, s.name) }

// get reads and decodes manifest version v.
func (s *shard) get(ctx context.Context, v uint64) (*Manifest, error) {
	data, err := s.log.Get(ctx, v)
	if err != nil {
		return nil, err
	}
	return decodeManifest(s.log.Key(v), s.name, v, data)
}

// loadLatest returns the newest manifest version. known (may be nil) is a version the
// caller already holds: the search starts there and, if nothing newer exists, known
// itself is returned without reading it again. A shard without versions gives
// ErrNoShard.
//
// Cleanup prunes old versions, so the version found newest may be gone by the time it
// is read: that happens only once newer ones exist (the newest versions are never
// pruned), so the search runs again from it instead of failing the caller.
func (s *shard) loadLatest(ctx context.Context, known *Manifest) (*Manifest, error) {
	var kv uint64
	if known != nil {
		kv = known.Version
	}
	for attempt := 1; ; attempt++ {
		v, err := s.log.Latest(ctx, kv)
		if errors.Is(err, versions.ErrEmpty) {
			return nil, fmt.Errorf("%s: %w", s, ErrNoShard)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: latest manifest: %w", s, err)
		}
		if known != nil && v == known.Version {
			return known, nil
		}
		m, err := s.get(ctx, v)
		if errors.Is(err, objstore.ErrNotFound) && attempt < maxPrunedReads {
			kv = v // pruned under us: Latest lists from here
			continue
		}
		return m, err
	}
}

// edit writes the next manifest version as a relative edit of the latest one: fn gets
// the latest version (nil for a shard without one) and returns the edited clone, or
// errNoChange, or an error that stops the edit (ErrFenced). On a lost race fn runs
// again on the newer version, so whatever others changed meanwhile (a drain's
// removals, a seal's generation) is kept. A write that fails, even with "exists",
// may have landed; the version is read back and its txn_id says whether this edit
// did.
func (s *shard) edit(ctx context.Context, known *Manifest, txnKind string, fn func(latest *Manifest) (*Manifest, error)) (*Manifest, error) {
	txnID := txnKind + "-" + randomHex(8)
	unknown := 0
	fail := func(err error) (*Manifest, error) {
		if unknown > 0 {
			return nil, fmt.Errorf("%w (%w)", err, errMaybeLanded)
		}
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		cur, err := s.loadLatest(ctx, known)
		if err != nil && !errors.Is(err, ErrNoShard) {
			return fail(err)
		}
		if cur != nil && cur.TxnID == txnID {
			return cur, nil // an earlier attempt whose response was lost did land
		}
		next, err := fn(cur)
		if errors.Is(err, errNoChange) {
			return cur, nil
		}
		if err != nil {
			return fail(err)
		}
		next.FormatVersion = FormatVersion
		next.Version = 1
		if cur != nil {
			next.Version = cur.Version + 1
		}
		next.Shard = s.name
		next.TxnID = txnID
		next.UpdatedAt = s.opts.Clock.Now().UTC()
		data, err := encodeManifest(next)
		if err != nil {
			return nil, fmt.Errorf("%s: encode manifest: %w", s, err)
		}
		if s.opts.beforeManifestWrite != nil {
			s.opts.beforeManifestWrite(txnID)
		}
		hintErr, err := s.log.Create(ctx, next.Version, data)
		if err == nil {
			if hintErr != nil {
				s.logger.Warn("wal: manifest hint not updated", "version", next.Version, "err", hintErr)
			}
			return next, nil
		}
		// Even "exists" may be this edit's own version: a write whose answer was
		// lost and that the storage SDK sent again is answered 412 (S3, GCS). The
		// version is read back either way.
		got, gerr := s.get(ctx, next.Version)
		switch {
		case gerr == nil && got.TxnID == txnID:
			return got, nil
		case gerr == nil:
			// Someone else's version: an ordinary lost race.
		case errors.Is(gerr, objstore.ErrNotFound) && errors.Is(err, objstore.ErrExists):
			// Taken, then pruned: newer versions exist, and the next attempt finds them.
		case errors.Is(gerr, objstore.ErrNotFound) && unknown < maxUnknownOutcomes:
			unknown++ // did not land (yet); writing it again is safe (put-if-absent)
		default:
			unknown++
			return fail(fmt.Errorf("%s: write manifest version %d: %w (reading it back: %v)", s, next.Version, err, gerr))
		}
		if attempt >= maxEditAttempts {
			return fail(fmt.Errorf("%s: gave up editing the manifest after %d attempts: %w", s, attempt, err))
		}
		if err := sleepCtx(ctx, raceRetry.Delay(attempt)); err != nil {
			return fail(err)
		}
		known = cur
	}
}

// raceRetry spaces the attempts of a manifest edit or fence claim that lost a race:
// 1-2 ms doubling up to 64-128 ms. The other writer has just written, so the retry
// is soon; the jitter keeps two losers from colliding again.
var raceRetry = backoff.Policy{Min: 2 * time.Millisecond, Max: 128 * time.Millisecond, Jitter: 0.5}

// sleepCtx waits in real time: the writer's clock (Options.Clock) stamps data and
// tests move it at will, while a retry waits for the store.
func sleepCtx(ctx context.Context, d time.Duration) error {
	return backoff.Sleep(ctx, clock.RealClock{}, d)
}

// randomHex returns 2n random hex characters.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}
