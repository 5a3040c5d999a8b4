package wal

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// Retention says what Cleanup keeps of a shard.
type Retention struct {
	// KeepManifests is how many of the newest shard manifest versions are always
	// kept (default 10, at least 2: the newest and the one a writer or reader that
	// has not yet seen the newest still holds).
	KeepManifests int
	// SafetyWindow: objects younger than this are never deleted (default 1h; zero or
	// negative means the default). It is what makes pruning safe for live editors:
	// an editor that read version v creates v+1 with put-if-absent, so v+1 must not
	// be pruned while the editor may still be between the read and the write, or its
	// write would land in the freed slot below the newest version. Versions are
	// pruned only once they are older than the window, so an editor would have to
	// stall that long. It also covers a generation file or an entry written just
	// before a listing by someone this Cleanup cannot see yet.
	SafetyWindow time.Duration
}

const (
	defaultKeepManifests = 10
	minKeepManifests     = 2
	defaultSafetyWindow  = time.Hour
	// cleanupConcurrency bounds Cleanup's parallel manifest reads and deletes.
	cleanupConcurrency = 16
)

func (r Retention) withDefaults() Retention {
	switch {
	case r.KeepManifests == 0:
		r.KeepManifests = defaultKeepManifests
	case r.KeepManifests < minKeepManifests:
		r.KeepManifests = minKeepManifests
	}
	if r.SafetyWindow <= 0 {
		r.SafetyWindow = defaultSafetyWindow
	}
	return r
}

// CleanupResult says what Cleanup deleted.
type CleanupResult struct {
	// ManifestsDeleted counts pruned shard manifest versions.
	ManifestsDeleted int
	// FilesDeleted and BytesDeleted count the entry and generation objects deleted
	// (manifest versions are not in them).
	FilesDeleted int
	BytesDeleted int64
}

// Cleanup bounds what a shard keeps in storage. Every seal, open and drain writes
// a shard manifest version and nothing else ever deletes one, and crashes leave
// entry and generation objects behind that no seal or drain will revisit; a cleanup
// task calls this per shard (Shards names them).
//
// It prunes the manifest versions below the newest r.KeepManifests that are older
// than r.SafetyWindow (versions.Log.Prune: bottom first, so the log stays dense),
// then deletes, among the objects older than the window, those nothing needs:
//
//   - an entry below the newest manifest's replay_after_wal_entry_position that no
//     kept manifest keeps (kept_entries). Such an entry is sealed; the writer's next
//     seal would delete it too (the same rule, deleteEntries), but a shard that is
//     idle or retired never seals again. Entries at or above replay_after are
//     unsealed rows or a live writer's fences and are never touched, whatever their
//     age, and kept ranges stop stale writers (fence.go).
//   - a generation file that no kept manifest lists (generations or
//     deferred_deletes) and whose number is at most current_generation. Drained
//     files wait under deferred_deletes for the delete delay, then a drain hands
//     them to its worker's DeleteQueue: while any kept manifest lists them they are
//     left alone. What is left are files nothing else will ever delete: a seal's
//     file whose manifest write failed and whose delete failed too (or whose
//     process died between the two), and a drained file whose queued delete
//     failed, did not fit in the queue, or was lost with the process that queued
//     it. A file numbered above
//     current_generation may be a seal in progress (its manifest edit not yet
//     written) and is kept however old it is.
//
// Anything else under the shard directory (the latest-version hint, objects this
// package does not name) is left alone, and so is the directory itself: a retired
// shard keeps its newest manifests, which adoption reads. Cleanup writes nothing, so
// it never races a writer's edits; deleting is idempotent, so a Cleanup that fails
// part-way (its error says where) is simply run again. A shard without any manifest
// version (being created, or its store being deleted) is left as it is.
//
// Options: the clock (what "older than the window" is measured against; object
// times come from the store) and the logger.
func Cleanup(ctx context.Context, bucket *objstore.Bucket, dir, shard string, r Retention, opts ...Option) (CleanupResult, error) {
	var res CleanupResult
	o := buildOptions(opts)
	sh, err := newShard(bucket, dir, shard, o)
	if err != nil {
		return res, err
	}
	r = r.withDefaults()
	cutoff := o.Clock.Now().Add(-r.SafetyWindow)

	pruned, err := sh.log.Prune(ctx, r.KeepManifests, cutoff)
	res.ManifestsDeleted = len(pruned)
	if err != nil {
		return res, fmt.Errorf("%s: cleanup: %w", sh, err)
	}
	// The newest version after pruning: its replay_after and current_generation
	// only grow, so what it calls sealed stays sealed, and what is above them is
	// treated as live.
	latest, err := sh.loadLatest(ctx, nil)
	if errors.Is(err, ErrNoShard) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("%s: cleanup: %w", sh, err)
	}
	cands, err := sh.cleanupCandidates(ctx, latest, cutoff)
	if err != nil {
		return res, fmt.Errorf("%s: cleanup: %w", sh, err)
	}
	if len(cands) > 0 {
		// Usually nothing is left over and the older kept versions are never read.
		if cands, err = sh.dropReferenced(ctx, latest, cands); err != nil {
			return res, fmt.Errorf("%s: cleanup: %w", sh, err)
		}
	}
	var files, bytes atomic.Int64
	err = forEach(ctx, len(cands), cleanupConcurrency, func(ctx context.Context, i int) error {
		if err := bucket.Delete(ctx, cands[i].Key); err != nil {
			return err
		}
		files.Add(1)
		bytes.Add(cands[i].Size)
		return nil
	})
	res.FilesDeleted, res.BytesDeleted = int(files.Load()), bytes.Load()
	if err != nil {
		return res, fmt.Errorf("%s: cleanup: %w", sh, err)
	}
	if res.ManifestsDeleted > 0 || res.FilesDeleted > 0 {
		sh.logger.Debug("wal: cleaned up", "manifests_deleted", res.ManifestsDeleted,
			"files_deleted", res.FilesDeleted, "bytes_deleted", res.BytesDeleted)
	}
	return res, nil
}

// Shards names the shards of the store in dir for a cleanup to visit, sorted: the
// directories ListShards finds, without those whose name is not a valid shard name
// (a stray directory under _wal/ is no shard; Cleanup would refuse its name, and no
// writer can have written it).
func Shards(ctx context.Context, bucket *objstore.Bucket, dir string) ([]string, error) {
	names, err := ListShards(ctx, bucket, dir)
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		if ValidateShard(n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// cleanupCandidates lists the shard's entries and generation files that latest
// leaves unprotected and that are older than cutoff.
func (s *shard) cleanupCandidates(ctx context.Context, latest *Manifest, cutoff time.Time) ([]objstore.Object, error) {
	old := func(o objstore.Object) bool {
		// A store that reports no time gets no benefit of the doubt: keep.
		return !o.ModTime.IsZero() && o.ModTime.Before(cutoff)
	}
	var out []objstore.Object
	err := s.bucket.Walk(ctx, entriesPrefix(s.dir, s.name), "", func(o objstore.Object) error {
		if pos, ok := parseEntryPos(o.Key); ok && pos < latest.ReplayAfter && !latest.keeps(pos) && old(o) {
			out = append(out, o)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list entries: %w", err)
	}
	listed := make(map[string]bool, len(latest.Generations)+len(latest.DeferredDeletes))
	for _, p := range referencedPaths(latest) {
		listed[s.dir+"/"+p] = true
	}
	err = s.bucket.Walk(ctx, shardRoot(s.dir, s.name)+"/"+genDir+"/", "", func(o objstore.Object) error {
		if n, ok := parseGenerationNumber(o.Key); ok && n <= latest.CurrentGeneration && !listed[o.Key] && old(o) {
			out = append(out, o)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list generation files: %w", err)
	}
	return out, nil
}

// dropReferenced removes from cands what any kept manifest version other than
// latest references: its generations, deferred deletes and kept entry ranges. A
// reader or writer may hold any of those versions (they are younger than the
// window, or among the newest), so what they name stays. A version pruned meanwhile
// (by a concurrent Cleanup) is no longer kept and is skipped.
func (s *shard) dropReferenced(ctx context.Context, latest *Manifest, cands []objstore.Object) ([]objstore.Object, error) {
	vs, err := s.log.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list manifest versions: %w", err)
	}
	ms := make([]*Manifest, len(vs))
	err = forEach(ctx, len(vs), cleanupConcurrency, func(ctx context.Context, i int) error {
		if vs[i] == latest.Version {
			ms[i] = latest
			return nil
		}
		m, err := s.get(ctx, vs[i])
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		ms[i] = m
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read kept manifest versions: %w", err)
	}
	listed := map[string]bool{}
	for _, m := range ms {
		if m == nil {
			continue
		}
		for _, p := range referencedPaths(m) {
			listed[s.dir+"/"+p] = true
		}
	}
	entries := entriesPrefix(s.dir, s.name)
	out := cands[:0]
	for _, o := range cands {
		if listed[o.Key] {
			continue
		}
		if pos, ok := parseEntryPos(o.Key); ok && strings.HasPrefix(o.Key, entries) && keptByAny(ms, pos) {
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

func keptByAny(ms []*Manifest, pos uint64) bool {
	for _, m := range ms {
		if m != nil && m.keeps(pos) {
			return true
		}
	}
	return false
}

// referencedPaths returns the generation files m names, relative to the store
// directory.
func referencedPaths(m *Manifest) []string {
	out := make([]string, 0, len(m.Generations)+len(m.DeferredDeletes))
	for _, g := range m.Generations {
		out = append(out, g.Path)
	}
	for _, d := range m.DeferredDeletes {
		out = append(out, d.Path)
	}
	return out
}

// parseGenerationNumber returns n of a generation file key (gen/<rand>_gen_<n>.arrow),
// or false for anything else, which Cleanup then leaves alone.
func parseGenerationNumber(key string) (uint64, bool) {
	name := path.Base(key)
	if !strings.HasSuffix(name, arrowExt) {
		return 0, false
	}
	i := strings.LastIndex(name, "_gen_")
	if i <= 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(name[i+len("_gen_"):], arrowExt), 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return n, true
}
