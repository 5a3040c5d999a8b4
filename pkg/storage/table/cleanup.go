package table

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// Retention and garbage collection.
//
// Every commit writes a manifest listing every fragment, and replaces files without
// deleting them: a compaction's source fragments, a deletion vector superseded by its
// union with more deletions, the files of a transaction that crashed. Cleanup removes
// what no reader can need any more, under these invariants:
//
//   - Kept versions: the newest KeepVersions, every version written less than
//     max(KeepAge, SafetyWindow) ago, and the newest version written before that
//     (the one that was the newest at the start of the window). So a reader that
//     loaded the newest version keeps a readable snapshot for at least KeepAge after
//     it loaded it, however many versions land meanwhile; a version that stopped
//     being the newest longer than KeepAge ago and is not among the newest
//     KeepVersions may be pruned, and the files only it references deleted.
//   - No version a transaction may still commit on top of is pruned: a transaction
//     lives less than SafetyWindow, so the version after its base was written less
//     than SafetyWindow ago and is kept. Were it pruned, the transaction's
//     put-if-absent would find its key free and write a version below the oldest
//     one, which no reader finds (a lost commit that reported success).
//   - Versions go bottom first through versions.Log.Prune: the log stays dense from
//     its oldest version to its newest, and the newest is never pruned.
//   - Manifests are pruned before files are considered, and a file is deleted only
//     if no manifest still there references it: the references are the union of the
//     fragment, bloom filter, key index and deletion vector paths of every version left after
//     the prune (all of them are read: a reader may load any), plus every version
//     written while the files were being listed (read again after the listing). A
//     deletion-vector object holds the vectors of every fragment one commit deleted
//     from (format 3): it stays while any fragment of any kept version points into
//     it, whichever part.
//   - A file is deleted only if it is also older than SafetyWindow: a transaction
//     stages its files before the manifest that references them exists, and one
//     that commits after the cleanup read the versions must find them. A version
//     that lands after that re-read references only files staged by its own
//     transaction (younger than the window, since transactions are shorter) or
//     files of versions that were kept.
//   - Only Tidemark's own files are deleted: data/<name>.parquet, data/<name>.bloom,
//     data/<name>.idx and _deletions/<name>.bin, and _versions/ through Prune. _wal/ (WAL shards,
//     cleaned by their own drains), the latest-version hint and anything else under
//     the table directory are never touched.

// Retention defaults (the zero value of each Retention field means its default).
const (
	DefaultKeepVersions = 10
	DefaultKeepAge      = time.Hour
	DefaultSafetyWindow = time.Hour
)

// cleanupReads bounds the manifests Cleanup reads, and the files it deletes, at once.
const cleanupReads = 8

// Retention says which versions and unreferenced files Cleanup keeps. The zero value
// of a field means its default; negative values are refused.
type Retention struct {
	KeepVersions int           // VERSION_RETENTION_COUNT, default 10 (min 1)
	KeepAge      time.Duration // VERSION_RETENTION_AGE, default 1h: every version younger is kept
	SafetyWindow time.Duration // unreferenced files younger than this are kept, default 1h (must be > the longest transaction)
}

func (r Retention) withDefaults() (Retention, error) {
	if r.KeepVersions < 0 || r.KeepAge < 0 || r.SafetyWindow < 0 {
		return r, fmt.Errorf("retention %+v: negative values", r)
	}
	if r.KeepVersions == 0 {
		r.KeepVersions = DefaultKeepVersions
	}
	if r.KeepAge == 0 {
		r.KeepAge = DefaultKeepAge
	}
	if r.SafetyWindow == 0 {
		r.SafetyWindow = DefaultSafetyWindow
	}
	return r, nil
}

// CleanupResult is what one Cleanup removed.
type CleanupResult struct {
	ManifestsDeleted int
	FilesDeleted     int
	BytesDeleted     int64
	OldestVersion    uint64 // oldest version kept
}

// Cleanup deletes the manifests retention lets go, then every data file, bloom filter
// and deletion vector under the table's data/ and _deletions/ that no kept manifest
// references and whose object is older than SafetyWindow (see the invariants above).
//
// Ages compare object modification times (the store's clock, the same for every
// writer, and the only time a staged file has) with the handle's clock (Options.Clock).
// Any error reading a kept manifest stops Cleanup before it deletes a file: it never
// deletes on partial knowledge. Concurrent Cleanups of one table are safe (each
// deletes only what its own reading allows) but wasteful; one that finds a version
// pruned under it stops with an error.
func (t *Table) Cleanup(ctx context.Context, r Retention) (CleanupResult, error) {
	var res CleanupResult
	r, err := r.withDefaults()
	if err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	now := t.opts.Clock.Now()
	pruned, err := t.pruneVersions(ctx, r, now)
	res.ManifestsDeleted = len(pruned)
	if err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	kept, err := t.Versions(ctx)
	if err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	if len(kept) == 0 {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, ErrNotFound)
	}
	res.OldestVersion = kept[0]
	refs := &refSet{paths: map[string]bool{}}
	if err := t.addReferences(ctx, kept, refs); err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	garbage, err := t.oldFiles(ctx, now.Add(-r.SafetyWindow))
	if err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	// Versions committed while the files were listed may reference files that
	// are old (a transaction that took longer than it should) or that the listing
	// saw: read them too.
	again, err := t.Versions(ctx)
	if err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	newest := kept[len(kept)-1]
	var landed []uint64
	for _, v := range again {
		if v > newest {
			landed = append(landed, v)
		}
	}
	if len(landed) > 0 {
		newest = landed[len(landed)-1]
	}
	if err := t.addReferences(ctx, landed, refs); err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	garbage = slices.DeleteFunc(garbage, func(o objstore.Object) bool { return refs.paths[t.rel(o.Key)] })
	var files, bytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cleanupReads)
	for _, o := range garbage {
		g.Go(func() error {
			err := t.bucket.Delete(gctx, o.Key)
			if err != nil {
				return err
			}
			files.Add(1)
			bytes.Add(o.Size)
			return nil
		})
	}
	err = g.Wait()
	res.FilesDeleted, res.BytesDeleted = int(files.Load()), bytes.Load()
	if err != nil {
		return res, fmt.Errorf("cleanup %s: %w", t.dir, err)
	}
	if res.ManifestsDeleted > 0 || res.FilesDeleted > 0 {
		t.log.Info("table cleaned up", "manifests_deleted", res.ManifestsDeleted, "files_deleted", res.FilesDeleted,
			"bytes_deleted", res.BytesDeleted, "oldest_version", res.OldestVersion, "newest_version", newest)
	}
	return res, nil
}

// pruneVersions prunes the versions retention lets go and returns them.
func (t *Table) pruneVersions(ctx context.Context, r Retention, now time.Time) ([]uint64, error) {
	objs, err := t.versionObjects(ctx)
	if err != nil {
		return nil, err
	}
	// Versions written before the cutoff form a run at the bottom of the log (a
	// version is written after the one before it). The last of that run, k, was the
	// newest at the cutoff: keep it, and prune below it. Prune stops at the first
	// version it must keep, so a modification time out of order only keeps more.
	cutoff := now.Add(-max(r.KeepAge, r.SafetyWindow))
	k := -1
	for i, o := range objs {
		if !o.mod.Before(cutoff) {
			break
		}
		k = i
	}
	if k < 1 || len(objs) <= r.KeepVersions {
		return nil, nil
	}
	return t.versions.Prune(ctx, r.KeepVersions, objs[k].mod)
}

type versionObject struct {
	v   uint64
	mod time.Time
}

// versionObjects lists the versions present with their modification times, in
// version order.
func (t *Table) versionObjects(ctx context.Context) ([]versionObject, error) {
	var out []versionObject
	err := t.bucket.Walk(ctx, t.key(versionsDir)+"/", "", func(o objstore.Object) error {
		name := strings.TrimSuffix(path.Base(o.Key), ".json")
		if v, err := strconv.ParseUint(name, 10, 64); err == nil {
			out = append(out, versionObject{v: v, mod: o.ModTime})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	slices.SortFunc(out, func(a, b versionObject) int { return cmp.Compare(a.v, b.v) })
	return out, nil
}

// Versions lists the manifest versions present, oldest first: after retention, a
// dense run ending at the newest.
func (t *Table) Versions(ctx context.Context) ([]uint64, error) {
	out, err := t.versions.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list versions of %s: %w", t.dir, err)
	}
	slices.Sort(out)
	return out, nil
}

// refSet is the set of paths (relative to the table directory) kept manifests
// reference.
type refSet struct {
	mu    sync.Mutex
	paths map[string]bool
}

// add adds the paths m references. Every object a manifest can name must be added
// here, or Cleanup deletes it once it is older than the safety window.
func (r *refSet) add(m *Manifest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range m.Fragments {
		r.paths[f.Path] = true
		r.paths[f.Bloom] = true
		if f.Index != nil {
			r.paths[f.Index.Path] = true
		}
		if f.Deletions != nil {
			r.paths[f.Deletions.Path] = true
		}
	}
}

// addReferences reads versions vs, cleanupReads at once, into refs. A version that
// cannot be read, pruned ones included, is an error: its references are unknown.
func (t *Table) addReferences(ctx context.Context, vs []uint64, refs *refSet) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cleanupReads)
	for _, v := range vs {
		g.Go(func() error {
			m, err := t.Load(gctx, v)
			if errors.Is(err, objstore.ErrNotFound) {
				return fmt.Errorf("version %d vanished while its references were read (a concurrent cleanup?): %w", v, err)
			}
			if err != nil {
				return err
			}
			refs.add(m)
			return nil
		})
	}
	return g.Wait()
}

// oldFiles lists the data files, bloom filters and deletion vectors written before
// cutoff. Objects under data/ and _deletions/ that Tidemark does not name that way
// (other suffixes, deeper paths) are left alone.
func (t *Table) oldFiles(ctx context.Context, cutoff time.Time) ([]objstore.Object, error) {
	var out []objstore.Object
	for _, dir := range []struct {
		name     string
		suffixes []string
	}{{dataDir, []string{".parquet", ".bloom", ".idx"}}, {deletesDir, []string{".bin"}}} {
		prefix := t.key(dir.name) + "/"
		err := t.bucket.Walk(ctx, prefix, "", func(o objstore.Object) error {
			name := strings.TrimPrefix(o.Key, prefix)
			ours := !o.IsDir && !strings.Contains(name, "/") &&
				slices.ContainsFunc(dir.suffixes, func(s string) bool { return len(name) > len(s) && strings.HasSuffix(name, s) })
			if ours && o.ModTime.Before(cutoff) {
				out = append(out, o)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
	}
	return out, nil
}

// rel is the path of key relative to the table directory.
func (t *Table) rel(key string) string { return strings.TrimPrefix(key, t.dir+"/") }
