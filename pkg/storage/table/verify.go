package table

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
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

// checkFragment checks f's data file, bloom filter, key index and deletion vector,
// and returns the problems found and how many objects it checked.
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
	dataProblems := len(out)
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

	dataOK := len(out) == dataProblems
	if x := f.Index; x != nil {
		objects++
		// The index is checked against the rows only when the data file is sound:
		// a broken data file is its own problem, not its index's.
		err = nil
		if checksums && dataOK {
			err = t.checkIndex(ctx, s, f)
		} else if o, serr := t.bucket.Stat(ctx, t.key(x.Path)); serr != nil {
			err = serr
		} else if o.Size != x.Bytes {
			err = fmt.Errorf("key index %s: %w: size %d, manifest says %d", t.key(x.Path), ErrCorrupt, o.Size, x.Bytes)
		}
		if err := note(x.Path, err); err != nil {
			return nil, 0, err
		}
	}

	if d := f.Deletions; d != nil {
		objects++
		if err := note(d.Path, t.checkDeletions(ctx, f, checksums)); err != nil {
			return nil, 0, err
		}
	}
	return out, objects, nil
}

// checkDeletions checks f's deletion vector: that its object exists and, for a
// part of an object, holds the part; with checksums, that the vector decodes
// (its own envelope's CRC) and deletes as many rows as the manifest says. A
// vector packed with others is checked alone: a damaged one is a problem of the
// fragments that point at it, not of the others in its object.
func (t *Table) checkDeletions(ctx context.Context, f Fragment, checksums bool) error {
	d := *f.Deletions
	if !d.packed() {
		return t.checkSidecar(ctx, d.Path, checksums, func(key string, data []byte) error {
			_, err := decodeDeletionRef(key, d, data, f.Rows)
			return err
		})
	}
	key := t.key(d.Path)
	o, err := t.bucket.Stat(ctx, key)
	switch {
	case err != nil:
		return err
	case o.Size < d.Offset+d.Bytes:
		return fmt.Errorf("%s: %w: %d bytes, the vector at %d needs %d", key, ErrCorrupt, o.Size, d.Offset, d.Offset+d.Bytes)
	case !checksums:
		return nil
	}
	data, err := t.bucket.GetRange(ctx, key, d.Offset, d.Bytes)
	if err != nil {
		return err
	}
	_, err = decodeDeletionRef(key, d, data, f.Rows)
	return err
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
//     was there) and the fragment is kept;
//   - a missing or corrupt key index (with the bloom filter or alone) is rebuilt
//     from the fragment's id and _seq columns under a new name, and the fragment is
//     kept with the new index. The shard of each row of a fragment of one shard is
//     that shard; a fragment of mixed shards loses them (its rows' shard becomes "",
//     so a tie of _seq with another shard's row breaks as for rows written before
//     shards were recorded), which is logged.
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
		var rebuilt *Fragment // f with a rebuilt key index
		if sidecarsOnly(f, problems) {
			var err error
			if rebuilt, err = t.rebuildSidecars(ctx, m.ArrowSchema(), f, problems); err == nil && rebuilt == nil {
				continue // the bloom filter alone, rewritten at its path
			}
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, objstore.ErrNotFound) {
				return fail(err)
			}
			if err != nil {
				rebuilt = nil
				problems = append(problems, VerifyProblem{Path: f.Path, Fragment: f.Path, Problem: err.Error()})
			}
		}
		broken = append(broken, brokenFragment{f: f, problems: problems, rebuilt: rebuilt})
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
	dropped := 0
	for _, b := range d.dropped {
		if b.rebuilt != nil {
			t.log.Warn("key index rebuilt from its fragment", "fragment", b.f.Path, "path", b.rebuilt.Index.Path,
				"problems", fmt.Sprint(b.problems), "version", n.Version)
			continue
		}
		dropped++
		rows += b.f.LiveRows()
		t.log.Warn("fragment dropped: its rows are lost", "path", b.f.Path, "rows", b.f.LiveRows(),
			"problems", fmt.Sprint(b.problems), "version", n.Version)
	}
	return n, dropped, rows, nil
}

// errNothingToDrop ends a dropCommit whose fragments all changed or left the table.
var errNothingToDrop = errors.New("nothing to drop")

type brokenFragment struct {
	f        Fragment
	problems []VerifyProblem
	rebuilt  *Fragment // f with a new key index, kept instead of dropped
}

// dropCommit is the commit of DropMissing: the newest version minus the broken
// fragments that are still in it unchanged (a fragment whose entry changed was
// rewritten or got new deletions, and is checked again by the next verify), those
// with a rebuilt key index replaced by their new entry. The rebuilt indexes are
// written before; it deletes nothing on abort (an unreferenced index is garbage).
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
		return i >= 0 && d.broken[i].rebuilt == nil
	})
	for k, f := range n.Fragments {
		if i := slices.IndexFunc(d.broken, func(b brokenFragment) bool { return sameFragment(b.f, f) }); i >= 0 {
			n.Fragments[k] = *d.broken[i].rebuilt
		}
	}
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

// sidecarsOnly reports whether every problem of f is its bloom filter or key index,
// which can be rebuilt from the data file.
func sidecarsOnly(f Fragment, problems []VerifyProblem) bool {
	for _, p := range problems {
		if p.Path != f.Bloom && (f.Index == nil || p.Path != f.Index.Path) {
			return false
		}
	}
	return true
}

// rebuildSidecars rebuilds the bloom filter and key index of f that problems name:
// the bloom filter at its path, the key index under a new name, returned as f's new
// entry (nil when only the bloom filter was rebuilt).
func (t *Table) rebuildSidecars(ctx context.Context, s *arrow.Schema, f Fragment, problems []VerifyProblem) (*Fragment, error) {
	var rebuilt *Fragment
	for _, p := range problems {
		switch {
		case p.Path == f.Bloom:
			if err := t.rebuildBloom(ctx, s, f); err != nil {
				return nil, err
			}
			t.log.Warn("bloom filter rebuilt from its fragment", "path", f.Bloom, "fragment", f.Path, "problem", p.Problem)
		case f.Index != nil && p.Path == f.Index.Path:
			ref, err := t.rebuildIndex(ctx, s, f)
			if err != nil {
				return nil, err
			}
			g := f
			g.Index = ref
			rebuilt = &g
		}
	}
	return rebuilt, nil
}

// rebuildIndex writes a key index for sorted fragment f from its id and _seq
// columns, under a new name, and returns its reference. The rows must be in
// strictly increasing id order, or the fragment is corrupt.
func (t *Table) rebuildIndex(ctx context.Context, s *arrow.Schema, f Fragment) (*IndexRef, error) {
	if f.MixedShards {
		t.log.Warn("rebuilding the key index of a fragment of mixed shards: its rows' shards are lost", "fragment", f.Path)
	}
	ff, err := t.openFragment(ctx, s, f)
	if err != nil {
		return nil, err
	}
	defer ff.Close()
	w := newIndexWriter()
	err = ff.read(ctx, []string{rowkey.IDColumn, rowkey.SeqColumn}, nil, func(rec arrow.RecordBatch, _ int64) error {
		ids, seqs, err := rowkey.Columns(rec)
		if err != nil {
			return fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
		}
		for i := 0; i < ids.Len(); i++ {
			if err := w.add(ids.Value(i), seqs.Value(i), f.Shard); err != nil {
				return fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	groups, err := groupsOf(ff.pf.MetaData())
	if err != nil {
		return nil, fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
	}
	data, topOff, top := w.finish(groups)
	ref := &IndexRef{Path: dataDir + "/" + uuid.NewString() + ".idx", Bytes: int64(len(data)), Top: topOff}
	if err := t.bucket.Put(ctx, t.key(ref.Path), data); err != nil {
		return nil, err
	}
	t.tops.Add(ref.Path, top, top.size())
	return ref, nil
}

// checkIndex reads f's key index from storage and checks it against the data file:
// every block decodes, ids strictly increase across blocks, and each entry's id
// and _seq are those of the row at its offset; a fragment of one shard names only
// that shard. It reads the index a few blocks and the data file a row group at a
// time, never the whole of either.
func (t *Table) checkIndex(ctx context.Context, s *arrow.Schema, f Fragment) error {
	key := t.key(f.Index.Path)
	data, err := t.bucket.GetRange(ctx, key, f.Index.Top, f.Index.Bytes-f.Index.Top)
	if err != nil {
		return err
	}
	top, err := decodeIndexTop(key, data, f.Index.Top, f.Index.Bytes, f.Rows)
	if err != nil {
		return err
	}
	for _, sh := range top.shards {
		if !f.MixedShards && sh != f.Shard {
			return fmt.Errorf("key index %s: %w: shard %q in a fragment of shard %q", key, ErrCorrupt, sh, f.Shard)
		}
	}
	if f.Rows > 0 && (top.blocks[0].first != f.IDMin) {
		return fmt.Errorf("key index %s: %w: first id %q, manifest says %q", key, ErrCorrupt, top.blocks[0].first, f.IDMin)
	}
	ff, err := t.openFragment(ctx, s, f)
	if err != nil {
		return err
	}
	defer ff.Close()
	groups, err := groupsOf(ff.pf.MetaData())
	if err != nil {
		return fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
	}
	if !slices.Equal(groups, top.groups) {
		return fmt.Errorf("key index %s: %w: its row groups are not the data file's", key, ErrCorrupt)
	}
	const blocksPerRead = 64
	var prev string
	var blk *indexBlock
	var queue []*indexBlock // blocks read ahead
	next := 0               // next block to read
	err = ff.read(ctx, []string{rowkey.IDColumn, rowkey.SeqColumn}, nil, func(rec arrow.RecordBatch, start int64) error {
		ids, seqs, err := rowkey.Columns(rec)
		if err != nil {
			return fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
		}
		for i := 0; i < ids.Len(); i++ {
			off := start + int64(i)
			if blk == nil || off >= blk.row+int64(len(blk.ids)) {
				if len(queue) == 0 {
					if next >= len(top.blocks) {
						return fmt.Errorf("key index %s: %w: no entry for row %d", key, ErrCorrupt, off)
					}
					last := min(next+blocksPerRead, len(top.blocks)) - 1
					if queue, err = t.readBlocks(ctx, key, top, next, last); err != nil {
						return err
					}
					next = last + 1
				}
				blk, queue = queue[0], queue[1:]
			}
			j := int(off - blk.row)
			if blk.ids[j] != ids.Value(i) || blk.seqs[j] != seqs.Value(i) {
				return fmt.Errorf("key index %s: %w: row %d is (%q, %d), the index says (%q, %d)", key, ErrCorrupt, off, ids.Value(i), seqs.Value(i), blk.ids[j], blk.seqs[j])
			}
			if off > 0 && blk.ids[j] <= prev {
				return fmt.Errorf("key index %s: %w: row %d id %q not after %q", key, ErrCorrupt, off, blk.ids[j], prev)
			}
			prev = blk.ids[j]
		}
		return nil
	})
	if err != nil {
		return err
	}
	if prev != f.IDMax && f.Rows > 0 {
		return fmt.Errorf("key index %s: %w: last id %q, manifest says %q", key, ErrCorrupt, prev, f.IDMax)
	}
	return nil
}

// readBlocks reads blocks first..last of the index at key in one request and decodes
// them, bypassing the cache (a verify reads what is stored).
func (t *Table) readBlocks(ctx context.Context, key string, top *indexTop, first, last int) ([]*indexBlock, error) {
	lo, hi := top.blocks[first], top.blocks[last]
	data, err := t.bucket.GetRange(ctx, key, lo.off, hi.off+hi.n-lo.off)
	if err != nil {
		return nil, err
	}
	out := make([]*indexBlock, 0, last-first+1)
	for b := first; b <= last; b++ {
		ref := top.blocks[b]
		at := ref.off - lo.off
		if at+ref.n > int64(len(data)) {
			return nil, fmt.Errorf("key index %s: %w: object ends before byte %d", key, ErrCorrupt, ref.off+ref.n)
		}
		blk, err := decodeIndexBlock(key, top, ref, data[at:at+ref.n])
		if err != nil {
			return nil, err
		}
		out = append(out, blk)
	}
	return out, nil
}

// rebuildBloom writes f's bloom filter again, from the ids in its data file (deleted
// rows included, as when it was first written).
func (t *Table) rebuildBloom(ctx context.Context, s *arrow.Schema, f Fragment) error {
	ff, err := t.openFragment(ctx, s, f)
	if err != nil {
		return err
	}
	defer ff.Close()
	bf := newBloom(int(f.Rows))
	err = ff.read(ctx, []string{rowkey.IDColumn}, nil, func(rec arrow.RecordBatch, _ int64) error {
		ids, ok := rec.Column(0).(*array.String)
		if !ok {
			return fmt.Errorf("fragment %s: %w: id column of type %s", ff.key, ErrCorrupt, rec.Column(0).DataType())
		}
		for i := 0; i < ids.Len(); i++ {
			bf.AddString(ids.Value(i))
		}
		return nil
	})
	if err != nil {
		return err
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
