package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// Reads at a version.
//
// A store's version is its base table's manifest version: the number a store's
// info, an add's answer and a merge's result report. A read "as of version v" is
// the base table's state at v and nothing else: the rows that merges had
// committed into the table by version v, deletion vectors applied (one live row
// per id). Rows still in WAL generations are newer than every merge and belong to
// no version yet, so a read at v leaves them out, even at the newest version: a
// read at the newest version answers the merged rows only, a read without a
// version answers those and the pending ones.
//
// Invariants:
//
//   - A read at v returns the same rows every time while v is retained, whatever
//     merges, compactions and retention do meanwhile: manifest v is immutable, the
//     files it references are never rewritten, and garbage collection deletes only
//     files no retained manifest references (table.Cleanup).
//   - A version no longer retained (pruned by retention) or never written fails
//     with a *VersionError (errors.Is ErrVersionNotFound) that names the oldest and
//     the newest readable versions, never with a partial answer.
//   - A read at a version takes no lock and does no I/O beyond its manifest and
//     the rows it returns. The manifest of the last version read is kept per
//     handle (the pages of one list at a version read it once), and a held
//     manifest (that one, or the current snapshot's) is reused after one
//     existence probe, which a pruned version fails.

// ErrVersionNotFound means a read named a version the store cannot be read at:
// retention pruned it, or it was never written: the caller's mistake (Invalid).
// Errors wrapping it are a *VersionError.
var ErrVersionNotFound = errclass.New(errclass.Invalid, "version not found")

// VersionError is a read at a version the store does not hold.
type VersionError struct {
	Target  registry.Target // the store
	Version uint64          // the version asked for
	// Oldest and Newest bound the versions that are readable now (0 when they
	// could not be listed).
	Oldest, Newest uint64
	// Pruned reports that retention removed the version (a later one exists).
	Pruned bool
}

func (e *VersionError) Error() string {
	var what string
	switch {
	case e.Pruned:
		what = fmt.Sprintf("store %s: version %d is no longer retained", e.Target, e.Version)
	default:
		what = fmt.Sprintf("store %s: version %d does not exist", e.Target, e.Version)
	}
	if e.Oldest == 0 {
		return what
	}
	return fmt.Sprintf("%s; the readable versions are %d to %d", what, e.Oldest, e.Newest)
}

// Unwrap makes errors.Is(err, ErrVersionNotFound) true, and gives the error the
// sentinel's class (errclass walks Unwrap, not Is methods).
func (e *VersionError) Unwrap() error { return ErrVersionNotFound }

// View is a store as of one base-table version: a fixed snapshot with no pending
// generations. It is safe for concurrent use and stays readable for as long as its
// version is retained.
type View struct {
	s    *Store
	snap *Snapshot
	// current marks the view of the store now (Store.Current): its version is
	// no version asked for, so a file gone under it is no pruned version.
	current bool
}

// Version is the base-table version the view reads.
func (v *View) Version() uint64 { return v.snap.Base.Version }

// Get is Store.Get as of the view's version.
func (v *View) Get(ctx context.Context, id string) (arrow.RecordBatch, error) {
	rec, err := v.s.getIn(ctx, v.snap, id)
	return rec, v.failure(ctx, err)
}

// List is Store.List as of the view's version.
func (v *View) List(ctx context.Context, opts ListOptions) ([]arrow.RecordBatch, error) {
	p, err := v.Page(ctx, opts)
	return p.Rows, err
}

// Page is Store.Page as of the view's version.
func (v *View) Page(ctx context.Context, opts ListOptions) (Page, error) {
	p, err := v.s.pageIn(ctx, v.snap, opts)
	return p, v.failure(ctx, err)
}

// Stream is Store.Stream as of the view's version.
func (v *View) Stream(ctx context.Context, opts ListOptions, fn func(rec arrow.RecordBatch, row int) error) error {
	return v.failure(ctx, v.s.streamIn(ctx, v.snap, opts, fn))
}

// failure explains a read of the view that found one of its files gone: if
// retention pruned the version meanwhile (garbage collection then deletes what
// only it referenced), that is what the reader hears, not a race to retry.
func (v *View) failure(ctx context.Context, err error) error {
	if err == nil || v.current || !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	if ok, herr := v.s.table.HasVersion(ctx, v.Version()); herr == nil && !ok {
		return v.s.versionError(ctx, v.Version(), true)
	}
	return err
}

// At returns the store as of base-table version v (see "Reads at a version"). A
// version that is not readable fails with a *VersionError.
func (s *Store) At(ctx context.Context, v uint64) (*View, error) {
	m, err := s.manifestAt(ctx, v)
	if err != nil {
		return nil, err
	}
	// No shard manifests: a view has no pending generations.
	return &View{s: s, snap: &Snapshot{Base: m, WAL: &wal.Snapshot{Dir: s.entry.URI}}}, nil
}

// manifestAt returns manifest version v: the current snapshot's or the one the
// last read at a version loaded when it is v (after one existence probe: retention
// may have pruned it since, and its files may be going), or a fresh load.
func (s *Store) manifestAt(ctx context.Context, v uint64) (*table.Manifest, error) {
	if v == 0 {
		return nil, s.versionError(ctx, v, false)
	}
	held := s.Snapshot().Base
	if held.Version != v {
		held = s.pinned.Load()
	}
	if held != nil && held.Version == v {
		ok, err := s.table.HasVersion(ctx, v)
		if err != nil {
			return nil, fmt.Errorf("store %s: %w", s.Target(), err)
		}
		if !ok {
			return nil, s.versionError(ctx, v, true)
		}
		return held, nil
	}
	m, err := s.table.Load(ctx, v)
	switch {
	case errors.Is(err, table.ErrVersionRemoved):
		return nil, s.versionError(ctx, v, true)
	case errors.Is(err, objstore.ErrNotFound):
		return nil, s.versionError(ctx, v, false)
	case err != nil:
		return nil, fmt.Errorf("store %s: version %d: %w", s.Target(), v, err)
	}
	s.pinned.Store(m)
	return m, nil
}

// versionError describes a read at version v that cannot be served, with the
// range of versions that can (listed now; best effort: a listing that fails
// leaves the range out rather than hiding the answer).
func (s *Store) versionError(ctx context.Context, v uint64, pruned bool) error {
	e := &VersionError{Target: s.Target(), Version: v, Pruned: pruned}
	vs, err := s.table.Versions(ctx)
	switch {
	case err == nil && len(vs) == 0:
		// No version at all: the table went with its store.
		return fmt.Errorf("store %s: %w", s.Target(), ErrDeleted)
	case err == nil:
		e.Oldest, e.Newest = vs[0], vs[len(vs)-1]
		e.Pruned = e.Pruned || (v > 0 && v < e.Oldest)
	}
	return e
}

// Pending returns the store's pending rows alone: the rows of a fresh snapshot
// (as a read takes) still in WAL generations, newest per id, without the base
// table's (the reference's source=wal). Its Version is the base version whose
// watermarks the rows are above.
func (s *Store) Pending(ctx context.Context) (*View, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	base := *snap.Base
	base.Fragments = nil // the same watermarks, no merged rows
	return &View{s: s, snap: &Snapshot{Base: &base, WAL: snap.WAL, taken: snap.taken}}, nil
}
