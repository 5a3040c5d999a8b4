package table

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// Verification and repair.
//
// Verify is read-only and reports; DropMissing is the only repair that loses data and
// runs only when an operator asks for it (--drop-missing), never on its own: a file
// that is missing may be restorable from a backup, and dropping its fragment makes
// the loss permanent in every later version.

// VerifyProblem is one object of the newest manifest that is not as the manifest
// says. Path is the object and Fragment the data file of the fragment it belongs to,
// both relative to the table directory (as in the manifest). Problem is "missing",
// "size 123, manifest says 456" or "corrupt: ...".
type VerifyProblem struct {
	Path     string
	Fragment string
	Problem  string
}

// VerifyReport is what Verify found in one version.
type VerifyReport struct {
	Version  uint64
	Objects  int // objects checked
	Problems []VerifyProblem
}

// Verify checks every object the newest manifest references: existence and size (Stat),
// and with checksums also decodes bloom filters and deletion vectors (envelope CRC) and
// opens each fragment's Parquet footer and row count. Everything is read from storage,
// never from the handle's caches. A damaged object is a problem in the report; an
// object that could not be checked (the store failed, not the object) is an error, so
// a report never calls an object broken because a request failed.
func (t *Table) Verify(ctx context.Context, checksums bool) (VerifyReport, error) {
	m, err := t.Refresh(ctx)
	if err != nil {
		return VerifyReport{}, fmt.Errorf("verify %s: %w", t.dir, err)
	}
	rep := VerifyReport{Version: m.Version}
	found := make([][]VerifyProblem, len(m.Fragments))
	objects := make([]int, len(m.Fragments))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fragmentReads)
	for i, f := range m.Fragments {
		g.Go(func() (err error) {
			found[i], objects[i], err = t.checkFragment(gctx, m.ArrowSchema(), f, checksums)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return VerifyReport{}, fmt.Errorf("verify %s version %d: %w", t.dir, m.Version, err)
	}
	for i := range found {
		rep.Objects += objects[i]
		rep.Problems = append(rep.Problems, found[i]...)
	}
	return rep, nil
}

// checkFragment checks f's data file, bloom filter and deletion vector, and returns
// the problems found and how many objects it checked.
func (t *Table) checkFragment(ctx context.Context, s *arrow.Schema, f Fragment, checksums bool) ([]VerifyProblem, int, error) {
	var out []VerifyProblem
	objects := 0
	// note records err as a problem of the object at rel if it is one (the object
	// is missing or damaged), and returns it otherwise.
	note := func(rel string, err error) error {
		switch {
		case err == nil:
		case errors.Is(err, objstore.ErrNotFound):
			out = append(out, VerifyProblem{Path: rel, Fragment: f.Path, Problem: "missing"})
		case errors.Is(err, ErrCorrupt):
			out = append(out, VerifyProblem{Path: rel, Fragment: f.Path, Problem: "corrupt: " + err.Error()})
		default:
			return err
		}
		return nil
	}

	objects++
	o, err := t.bucket.Stat(ctx, t.key(f.Path))
	switch {
	case err == nil && o.Size != f.Bytes:
		out = append(out, VerifyProblem{Path: f.Path, Fragment: f.Path, Problem: fmt.Sprintf("size %d, manifest says %d", o.Size, f.Bytes)})
	case err == nil && checksums:
		if err := note(f.Path, t.checkFooter(ctx, s, f)); err != nil {
			return nil, 0, err
		}
	default:
		if err := note(f.Path, err); err != nil {
			return nil, 0, err
		}
	}

	objects++
	if err := note(f.Bloom, t.checkSidecar(ctx, f.Bloom, checksums, func(key string, data []byte) error {
		_, err := decodeBloom(key, data)
		return err
	})); err != nil {
		return nil, 0, err
	}

	if d := f.Deletions; d != nil {
		objects++
		if err := note(d.Path, t.checkSidecar(ctx, d.Path, checksums, func(key string, data []byte) error {
			bm, err := decodeDeletions(key, data, f.Rows)
			if err == nil && int64(bm.GetCardinality()) != d.Count {
				err = fmt.Errorf("%s: %w: %d deletions, manifest says %d", key, ErrCorrupt, bm.GetCardinality(), d.Count)
			}
			return err
		})); err != nil {
			return nil, 0, err
		}
	}
	return out, objects, nil
}

// checkSidecar checks a bloom filter or deletion vector: that it exists, and with
// checksums that decode accepts its bytes.
func (t *Table) checkSidecar(ctx context.Context, rel string, checksums bool, decode func(key string, data []byte) error) error {
	key := t.key(rel)
	if !checksums {
		_, err := t.bucket.Stat(ctx, key)
		return err
	}
	data, err := t.bucket.Get(ctx, key)
	if err != nil {
		return err
	}
	return decode(key, data)
}

// checkFooter reads f's Parquet footer from storage and checks that it decodes, holds
// the manifest's row count and the table's columns.
func (t *Table) checkFooter(ctx context.Context, s *arrow.Schema, f Fragment) (err error) {
	key := t.key(f.Path)
	defer recoverCorrupt(key, &err)
	if f.Bytes <= 0 {
		return fmt.Errorf("fragment %s: %w: manifest says %d bytes", key, ErrCorrupt, f.Bytes)
	}
	ra := newFragmentReader(ctx, t, key, f.Bytes)
	n := min(f.Bytes, footerRead)
	if err := ra.prefetch(ctx, []byteRange{{f.Bytes - n, n}}); err != nil {
		return err
	}
	pf, err := file.NewParquetReader(io.NewSectionReader(ra, 0, f.Bytes))
	if err != nil {
		return ra.classify(err)
	}
	defer pf.Close()
	if pf.NumRows() != f.Rows {
		return fmt.Errorf("fragment %s: %w: %d rows, manifest says %d", key, ErrCorrupt, pf.NumRows(), f.Rows)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return ra.classify(err)
	}
	got, err := fr.Schema()
	if err != nil {
		return ra.classify(err)
	}
	for _, fld := range s.Fields() {
		if len(got.FieldIndices(fld.Name)) == 0 {
			return fmt.Errorf("fragment %s: %w: no column %q", key, ErrCorrupt, fld.Name)
		}
	}
	return nil
}

// DropMissing commits a new version without the fragments whose data file the report
// found missing (or the wrong size/corrupt), and returns the new manifest and how many
// fragments (and live rows) it dropped. Never automatic: only called on an operator's
// explicit --drop-missing.
//
// The report only names candidates: the fragments it names that are still in the
// newest version are checked again (with checksums), and what that check finds is
// acted on, so a stale report or a file restored since cannot drop a good fragment:
//
//   - a missing, wrong-sized or corrupt data file, or deletion vector, drops the
//     fragment (a deletion vector cannot be guessed: without it, deleted rows would
//     come back as live duplicates of newer rows) and its rows are lost;
//   - a missing or corrupt bloom filter alone is rebuilt from the fragment's ids and
//     written at its path (no manifest changes; nothing could read the object that
//     was there) and the fragment is kept.
//
// Each dropped fragment is logged with its path and live rows. The commit is a new
// version written with put-if-absent on the newest one; on a lost race it reloads
// and drops again only fragments still present unchanged (same data file, size, rows,
// bloom filter and deletion vector as checked), retrying with backoff until
// RetryTimeout like a transaction's commit. When nothing is to be dropped it commits
// nothing and returns the newest manifest.
func (t *Table) DropMissing(ctx context.Context, rep VerifyReport) (*Manifest, int, int64, error) {
	fail := func(err error) (*Manifest, int, int64, error) {
		return nil, 0, 0, fmt.Errorf("drop missing fragments of %s: %w", t.dir, err)
	}
	named := map[string]bool{}
	for _, p := range rep.Problems {
		named[p.Fragment] = true
	}
	m, err := t.Refresh(ctx)
	if err != nil {
		return fail(err)
	}
	var broken []brokenFragment
	for _, f := range m.Fragments {
		if !named[f.Path] {
			continue
		}
		delete(named, f.Path)
		problems, _, err := t.checkFragment(ctx, m.ArrowSchema(), f, true)
		if err != nil {
			return fail(err)
		}
		if len(problems) == 0 {
			t.log.Info("fragment named by the report is intact now: kept", "path", f.Path)
			continue
		}
		if len(problems) == 1 && problems[0].Path == f.Bloom {
			err := t.rebuildBloom(ctx, m.ArrowSchema(), f)
			if err == nil {
				t.log.Warn("bloom filter rebuilt from its fragment", "path", f.Bloom, "fragment", f.Path, "problem", problems[0].Problem)
				continue
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, objstore.ErrNotFound) {
				return fail(err)
			}
			problems = append(problems, VerifyProblem{Path: f.Path, Fragment: f.Path, Problem: err.Error()})
		}
		broken = append(broken, brokenFragment{f: f, problems: problems})
	}
	for p := range named {
		t.log.Info("fragment named by the report is no longer in the table", "path", p, "version", m.Version)
	}
	if len(broken) == 0 {
		return m, 0, 0, nil
	}

	d := &dropCommit{t: t, id: "drop-missing-" + uuid.NewString(), base: m, broken: broken}
	n, err := t.commitOptimistic(ctx, d.id, d)
	if errors.Is(err, errNothingToDrop) {
		t.log.Info("the fragments to drop changed or left the table meanwhile: nothing dropped", "version", d.base.Version)
		return d.base, 0, 0, nil
	}
	if err != nil {
		return fail(err)
	}
	var rows int64
	for _, b := range d.dropped {
		rows += b.f.LiveRows()
		t.log.Warn("fragment dropped: its rows are lost", "path", b.f.Path, "rows", b.f.LiveRows(),
			"problems", fmt.Sprint(b.problems), "version", n.Version)
	}
	return n, len(d.dropped), rows, nil
}

// errNothingToDrop ends a dropCommit whose fragments all changed or left the table.
var errNothingToDrop = errors.New("nothing to drop")

type brokenFragment struct {
	f        Fragment
	problems []VerifyProblem
}

// dropCommit is the commit of DropMissing: the newest version minus the broken
// fragments that are still in it unchanged (a fragment whose entry changed was
// rewritten or got new deletions, and is checked again by the next verify). It
// stages no files, so it has nothing to abort.
type dropCommit struct {
	t       *Table
	id      string // the transaction id
	base    *Manifest
	broken  []brokenFragment
	dropped []brokenFragment // of the last proposal
}

func (d *dropCommit) proposal() *Manifest {
	n := d.base.next(d.id, d.t.opts.Clock.Now().UTC())
	d.dropped = d.dropped[:0]
	n.Fragments = slices.DeleteFunc(n.Fragments, func(f Fragment) bool {
		i := slices.IndexFunc(d.broken, func(b brokenFragment) bool { return sameFragment(b.f, f) })
		if i >= 0 {
			d.dropped = append(d.dropped, d.broken[i])
		}
		return i >= 0
	})
	return n
}

func (d *dropCommit) settle(latest *Manifest) error {
	for _, f := range latest.Fragments {
		if slices.ContainsFunc(d.broken, func(b brokenFragment) bool { return sameFragment(b.f, f) }) {
			return nil
		}
	}
	d.base = latest
	return errNothingToDrop
}

func (d *dropCommit) rebase(_ context.Context, latest *Manifest) error {
	d.base = latest
	return nil
}

func (d *dropCommit) Abort(context.Context) {}

// sameFragment reports whether a and b are the same fragment entry: same data file
// (names are unique and files immutable), size, rows, bloom filter and deletion vector.
func sameFragment(a, b Fragment) bool {
	switch {
	case a.Path != b.Path || a.Bytes != b.Bytes || a.Rows != b.Rows || a.Bloom != b.Bloom:
		return false
	case a.Deletions == nil || b.Deletions == nil:
		return a.Deletions == nil && b.Deletions == nil
	}
	return *a.Deletions == *b.Deletions
}

// rebuildBloom writes f's bloom filter again, from the ids in its data file (deleted
// rows included, as when it was first written).
func (t *Table) rebuildBloom(ctx context.Context, s *arrow.Schema, f Fragment) error {
	idx, err := t.keyIndex(ctx, s, f)
	if err != nil {
		return err
	}
	bf := newBloom(len(idx.offsets))
	for id := range idx.offsets {
		bf.AddString(id)
	}
	data, err := encodeBloom(bf)
	if err != nil {
		return err
	}
	if err := t.bucket.Put(ctx, t.key(f.Bloom), data); err != nil {
		return err
	}
	t.blooms.Add(f.Bloom, bf, int64(len(data)))
	return nil
}
