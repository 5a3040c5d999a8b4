package table

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/bits-and-blooms/bloom/v3"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/cache"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/versions"
)

var (
	// ErrNotFound means the directory holds no table (no manifest version). It is
	// Gone: a table's versions are deleted only with its store (Refresh).
	ErrNotFound = errclass.New(errclass.Gone, "table not found")
	// ErrSchemaMismatch means Create found a table with a different schema.
	ErrSchemaMismatch = errors.New("table exists with a different schema")
	// ErrVersionRemoved means a manifest version was removed by retention (Cleanup):
	// later versions exist. Errors wrapping it also wrap objstore.ErrNotFound.
	ErrVersionRemoved = errors.New("version removed by retention")
)

const (
	versionsDir = "_versions"
	dataDir     = "data"
	deletesDir  = "_deletions"
	// latestHint names an advisory object holding the newest version a committer
	// saw land. Readers start probing there instead of listing every version; it may
	// lag (it is written after the manifest) but never leads.
	latestHint = "_latest_version"
)

const defaultRowGroupRows = 2048

// Options are a table handle's knobs. The zero value of each field means its default.
type Options struct {
	// RetryTimeout bounds a commit's optimistic retries (30 s).
	RetryTimeout time.Duration
	// RowGroupRows is the Parquet row-group length (2048): a point lookup decodes
	// one row group, so smaller groups make lookups cheaper and scans slightly
	// slower (BENCHMARKS.md has the measurements behind the default).
	RowGroupRows int64
	// CacheBytes bounds the one cache of immutable decoded objects (key-index tops
	// and blocks, bloom filters, deletion vectors, footers): 64 MiB.
	CacheBytes int64
	Clock      clock.Clock
	Logger     *slog.Logger

	// unsortedWrites makes merges write fragments as format 1 did (rows in the
	// order given, no key index), so tests build the tables that readers and
	// compaction must keep serving after an upgrade.
	unsortedWrites bool
}

// Option sets one field of Options.
type Option func(*Options)

// WithRetryTimeout sets Options.RetryTimeout.
func WithRetryTimeout(d time.Duration) Option { return func(o *Options) { o.RetryTimeout = d } }

// WithCacheBytes sets Options.CacheBytes.
func WithCacheBytes(n int64) Option { return func(o *Options) { o.CacheBytes = n } }

// WithClock sets the clock used for timestamps, retry deadlines and backoff.
func WithClock(c clock.Clock) Option { return func(o *Options) { o.Clock = c } }

// WithLogger sets the structured logger.
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

func buildOptions(opts []Option) Options {
	o := Options{RetryTimeout: 30 * time.Second, RowGroupRows: defaultRowGroupRows, CacheBytes: 64 << 20}
	for _, f := range opts {
		f(&o)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RowGroupRows <= 0 {
		o.RowGroupRows = defaultRowGroupRows
	}
	return o
}

// Table is a handle on one table directory. It is safe for concurrent use; it caches
// the newest manifest it has seen and decoded immutable objects.
type Table struct {
	bucket *objstore.Bucket
	dir    string
	opts   Options
	log    *slog.Logger

	versions *versions.Log

	mu     sync.Mutex
	latest *Manifest

	// The decoded immutable objects, in one cache of CacheBytes (objcache.go):
	// the in-memory key indexes of unsorted fragments, the tops and blocks of
	// sorted ones' key indexes, bloom filters, deletion vectors, and parsed
	// Parquet footers (so a point lookup reads one row group and nothing else).
	keys    objectView[*keyIndex]
	tops    objectView[*indexTop]
	blocks  objectView[*indexBlock]
	raws    objectView[*rawBlock]
	blooms  objectView[*bloom.BloomFilter]
	dvs     objectView[*roaring.Bitmap]
	footers objectView[*metadata.FileMetaData]
	// groups are decoded row groups of walks (groupcache.go).
	groups *cache.LRU[groupKey, *decodedGroup]
}

func newTable(bucket *objstore.Bucket, dir string, opts []Option) *Table {
	o := buildOptions(opts)
	dir = strings.TrimSuffix(dir, "/")
	// Requests the store throttles (refused, not performed) are resent within
	// RetryTimeout; a bucket that already resends (a store's) keeps its own policy.
	// A manifest put-if-absent throttled past that time reaches the commit loop,
	// which counts it as a lost attempt.
	bucket = objstore.WithRetry(bucket, objstore.ThrottleBackoff, o.Clock, o.RetryTimeout)
	// Key-index blocks, one per id a lookup reads, are cheap to read again; the
	// objects read for a whole fragment (bloom filters, footers, tops) are not, and
	// a stream of lookups must not push them out: blocks get a quarter of the
	// budget, the rest shares three quarters.
	// Decoded row groups of walks take an eighth of it from the shared part
	// (groupcache.go).
	objs := cache.New[objectKey, any](o.CacheBytes - o.CacheBytes/4 - o.CacheBytes/8)
	blocks := cache.New[objectKey, any](o.CacheBytes / 4)
	return &Table{
		bucket:   bucket,
		dir:      dir,
		versions: versions.New(bucket, dir+"/"+versionsDir, dir+"/"+latestHint),
		opts:     o,
		log:      o.Logger.With("table", dir),
		keys:     objectView[*keyIndex]{objs, kindKeyIndex},
		tops:     objectView[*indexTop]{objs, kindTop},
		blocks:   objectView[*indexBlock]{blocks, kindBlock},
		raws:     objectView[*rawBlock]{blocks, kindRawBlock},
		blooms:   objectView[*bloom.BloomFilter]{objs, kindBloom},
		dvs:      objectView[*roaring.Bitmap]{objs, kindDeletions},
		footers:  objectView[*metadata.FileMetaData]{objs, kindFooter},
		groups:   newGroupCache(o.CacheBytes),
	}
}

// Create creates the table at dir with schema s (which must have a non-null utf8
// "id" and a non-null uint64 "_seq"). If the table already exists with an equal
// schema, Create opens it; with a different schema it fails with ErrSchemaMismatch.
//
// Create looks for the newest version before it writes version 1, and writes it only
// into a directory that holds no version: a table whose oldest versions retention
// pruned has no version 1, and put-if-absent alone would take that key, putting a
// stray version 1 below the table's oldest version (the log would no longer be dense,
// and the new table invisible). Between the look and the write another creator may
// create the table; retention never prunes a version younger than its safety window
// (Cleanup), so the write then loses the put-if-absent race like any other.
func Create(ctx context.Context, bucket *objstore.Bucket, dir string, s *arrow.Schema, opts ...Option) (*Table, error) {
	if err := checkSchema(s); err != nil {
		return nil, fmt.Errorf("create table %s: %w", dir, err)
	}
	t := newTable(bucket, dir, opts)
	switch _, err := t.Refresh(ctx); {
	case err == nil:
		return t.createdAs(s)
	case !errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("create table %s: %w", dir, err)
	}
	now := t.opts.Clock.Now().UTC()
	m := &Manifest{
		FormatVersion:     FormatVersion,
		Version:           1,
		Schema:            schemaJSON{s},
		PrimaryKey:        rowkey.IDColumn,
		MergedGenerations: map[string]uint64{},
		TxnID:             "create",
		CreatedAt:         now,
		UpdatedAt:         now,
	}
	err := t.createVersion(ctx, m)
	switch {
	case err == nil:
		t.observe(m)
		return t, nil
	case errors.Is(err, objstore.ErrExists):
		if _, err := t.Refresh(ctx); err != nil {
			return nil, err
		}
		return t.createdAs(s)
	default:
		return nil, fmt.Errorf("create table %s: %w", dir, err)
	}
}

// createdAs is Create's answer for a table that exists: t if its schema is s.
func (t *Table) createdAs(s *arrow.Schema) (*Table, error) {
	if cur := t.Latest(); !cur.ArrowSchema().Equal(s) {
		return nil, fmt.Errorf("create table %s: %w: existing %s, requested %s", t.dir, ErrSchemaMismatch, cur.ArrowSchema(), s)
	}
	return t, nil
}

// Open opens the existing table at dir and loads its newest manifest.
func Open(ctx context.Context, bucket *objstore.Bucket, dir string, opts ...Option) (*Table, error) {
	t := newTable(bucket, dir, opts)
	if _, err := t.Refresh(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// Dir is the table's directory within the bucket.
func (t *Table) Dir() string { return t.dir }

// Latest returns the newest manifest this handle has seen, without I/O.
func (t *Table) Latest() *Manifest {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latest
}

// observe records m as the newest version seen if it is newer.
func (t *Table) observe(m *Manifest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.latest == nil || m.Version > t.latest.Version {
		t.latest = m
	}
}

func (t *Table) key(rel string) string { return t.dir + "/" + rel }

func (t *Table) versionKey(v uint64) string { return t.versions.Key(v) }

// Refresh loads the newest manifest from storage.
func (t *Table) Refresh(ctx context.Context) (*Manifest, error) {
	for attempt := 1; ; attempt++ {
		v, err := t.LatestVersion(ctx)
		if err != nil {
			return nil, err
		}
		if known := t.Latest(); known != nil && known.Version == v {
			return known, nil // manifests are immutable: nothing to read again
		}
		m, err := t.Load(ctx, v)
		// The newest version is never pruned, but the one found may stop being the
		// newest and be pruned before it is read (a burst of commits and a cleanup in
		// between): look for the newest again.
		if errors.Is(err, ErrVersionRemoved) && attempt < 3 {
			continue
		}
		if errors.Is(err, objstore.ErrNotFound) {
			// Retention keeps the newest version: the table was deleted.
			return nil, fmt.Errorf("table %s: version %d vanished: %w", t.dir, v, ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		t.observe(m)
		return t.Latest(), nil
	}
}

// RefreshFrom is Refresh for a caller that knows version v exists and is likely
// the newest (a fan-out's previous commit created it): it reads v while checking
// that v+1 does not exist, one round trip instead of Refresh's two or three, and
// falls back to Refresh otherwise.
func (t *Table) RefreshFrom(ctx context.Context, v uint64) (*Manifest, error) {
	if known := t.Latest(); v == 0 || (known != nil && known.Version >= v) {
		return t.Refresh(ctx)
	}
	var (
		m     *Manifest
		next  bool
		nextE error
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { m, err = t.Load(gctx, v); return err })
	g.Go(func() error {
		next, nextE = t.versions.Exists(gctx, v+1)
		return nil
	})
	if err := g.Wait(); err != nil || nextE != nil || next {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return t.Refresh(ctx) // v is not the newest, or is gone: search
	}
	t.observe(m)
	return t.Latest(), nil
}

// Load reads manifest version v. A version that is not there fails with an error
// wrapping objstore.ErrNotFound, and also ErrVersionRemoved when a later version
// exists (retention pruned v: Cleanup).
func (t *Table) Load(ctx context.Context, v uint64) (*Manifest, error) {
	key := t.versionKey(v)
	data, err := t.versions.Get(ctx, v) // at most versions.MaxVersionBytes
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, t.missingVersion(ctx, v, err)
	}
	if err != nil {
		return nil, fmt.Errorf("load manifest: %w", err)
	}
	m, err := decodeManifest(key, data)
	if err != nil {
		return nil, err
	}
	if m.Version != v {
		return nil, fmt.Errorf("manifest %s: %w: holds version %d", key, ErrCorrupt, m.Version)
	}
	return m, nil
}

// missingVersion explains why version v is not there. Versions are dense and only
// removed from the bottom, so a missing v below a version that exists (one this
// handle has seen, or the newest) was pruned; otherwise it was never written.
func (t *Table) missingVersion(ctx context.Context, v uint64, err error) error {
	newest := uint64(0)
	if m := t.Latest(); m != nil {
		newest = m.Version
	}
	if newest <= v {
		if n, lerr := t.LatestVersion(ctx); lerr == nil {
			newest = n
		}
	}
	if newest > v {
		return fmt.Errorf("load manifest: table %s version %d: %w (the oldest versions are pruned; the newest is %d): %w",
			t.dir, v, ErrVersionRemoved, newest, err)
	}
	return fmt.Errorf("load manifest: table %s version %d does not exist: %w", t.dir, v, err)
}

// LatestVersion finds the newest committed version with a few small requests (see
// versions.Log.Latest), starting from the newest version this handle has seen.
func (t *Table) LatestVersion(ctx context.Context) (uint64, error) {
	var known uint64
	if m := t.Latest(); m != nil {
		known = m.Version
	}
	v, err := t.versions.Latest(ctx, known)
	if errors.Is(err, versions.ErrEmpty) {
		return 0, fmt.Errorf("table %s: %w", t.dir, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("table %s: %w", t.dir, err)
	}
	return v, nil
}

// createVersion writes manifest m with put-if-absent.
func (t *Table) createVersion(ctx context.Context, m *Manifest) error {
	data, err := encodeManifest(m)
	if err != nil {
		return err
	}
	hintErr, err := t.versions.Create(ctx, m.Version, data)
	if hintErr != nil {
		t.log.Warn("latest-version hint not written", "version", m.Version, "err", hintErr)
	}
	return err
}

// bloom returns a fragment's id filter, cached.
func (t *Table) bloom(ctx context.Context, f Fragment) (*bloom.BloomFilter, error) {
	if b, ok := t.blooms.Get(f.Bloom); ok {
		return b, nil
	}
	key := t.key(f.Bloom)
	data, err := t.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("bloom filter: %w", err)
	}
	b, err := decodeBloom(key, data)
	if err != nil {
		return nil, err
	}
	t.blooms.Add(f.Bloom, b, int64(len(data)))
	return b, nil
}

// mayContain reports whether f can hold id, from its bounds and bloom filter.
func (t *Table) mayContain(ctx context.Context, f Fragment, id string) (bool, error) {
	if id < f.IDMin || id > f.IDMax {
		return false, nil
	}
	b, err := t.bloom(ctx, f)
	if err != nil {
		return false, err
	}
	return b.TestString(id), nil
}
