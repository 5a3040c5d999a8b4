package table

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

var (
	// ErrAlreadyCommitted means the table's watermark already covers the
	// transaction's shard generation: its rows landed in an earlier commit (perhaps
	// one whose acknowledgement was lost). Callers treat it as success.
	ErrAlreadyCommitted = errors.New("already committed")
	// ErrTooManyWriters means optimistic retries ran out: other committers kept
	// winning the race for the next version until RetryTimeout.
	ErrTooManyWriters = errclass.New(errclass.Busy, "too many concurrent writers")
	// errUnknownOutcome marks a commit attempt that may or may not have created its
	// version. It is Unavailable: the store failed twice (the write, then its read).
	errUnknownOutcome = errclass.New(errclass.Unavailable, "whether the version was written is unknown")
)

// Append is what a merge commits: rows to add (newest _seq per id wins, against
// each other and against the table) and, optionally, the shard watermark the rows
// bring the table to.
type Append struct {
	Records []arrow.RecordBatch
	// Shard and Generation, when Shard is set, advance merged_generations[Shard] to
	// Generation in the same manifest that adds the rows.
	Shard      string
	Generation uint64
	// Parts, when set, are the rows of several shards, each with the watermark it
	// brings its shard to, all in one fragment and one version: a merge of a whole
	// store (merge.Merger.MergeStore) commits once, not once per shard. Records,
	// Shard and Generation must then be empty.
	Parts []Part
}

// Part is one shard's rows of an Append, and the generation they bring the
// shard's watermark to.
type Part struct {
	Shard      string
	Generation uint64
	Records    []arrow.RecordBatch
}

// parts returns a's rows by shard, in increasing shard order (the order that
// makes NewestPerID's "on a tie, the later row" the Version order across shards),
// leaving out the parts base's watermarks cover: their rows landed already.
func (a Append) parts(base *Manifest) ([]Part, error) {
	if len(a.Parts) == 0 {
		if a.Shard != "" && base.Watermark(a.Shard) >= a.Generation {
			return nil, fmt.Errorf("shard %s generation %d (watermark %d): %w",
				a.Shard, a.Generation, base.Watermark(a.Shard), ErrAlreadyCommitted)
		}
		return []Part{{Shard: a.Shard, Generation: a.Generation, Records: a.Records}}, nil
	}
	if a.Shard != "" || a.Records != nil {
		return nil, errors.New("an append has either Parts or Records and Shard")
	}
	parts := slices.Clone(a.Parts)
	slices.SortFunc(parts, func(p, q Part) int { return strings.Compare(p.Shard, q.Shard) })
	kept := parts[:0]
	for i, p := range parts {
		if p.Shard == "" {
			// Rows of several shards are ordered by their shard (rowkey.Version).
			return nil, errors.New("an append part needs its shard")
		}
		if i > 0 && parts[i-1].Shard == p.Shard {
			return nil, fmt.Errorf("shard %s appears twice in one append", p.Shard)
		}
		if base.Watermark(p.Shard) < p.Generation {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("every shard of the append is merged up to its generation: %w", ErrAlreadyCommitted)
	}
	return kept, nil
}

// Txn is a prepared transaction: its data files are written; Commit only writes a
// manifest (unless it must rebase over concurrent commits). A Txn is used by one
// goroutine.
type Txn struct {
	t    *Table
	id   string
	base *Manifest
	// shard wrote every incoming row; "" when they come from several shards, whose
	// names shards then holds, row by row in ids' order.
	shard  string
	shards []string
	// marks are the watermarks the transaction advances: merged_generations[shard]
	// to at least marks[shard].
	marks map[string]uint64

	frag *Fragment // the new fragment; nil when there are no rows
	// ids are the new fragment's ids in increasing order, and seqs and offs each
	// one's _seq and row offset (a sorted fragment's offsets are the positions).
	ids     []string
	seqs    []uint64
	offs    []uint32
	checked map[string]bool // existing fragments already resolved against

	// dels holds, per existing fragment, the offsets this transaction deletes
	// because its incoming row is at least as new.
	dels map[string]*roaring.Bitmap
	// selfDel holds offsets of the new fragment superseded by newer existing rows.
	selfDel      *roaring.Bitmap
	selfDelRef   *DeletionRef
	selfDelDirty bool
	// dvRefs are the deletion vectors written for existing fragments (their base
	// vector united with dels), with the base vector path each was built from.
	dvRefs map[string]writtenDV

	staged   staged // objects written, deleted by Abort
	finished bool
}

type writtenDV struct {
	ref  DeletionRef
	from DeletionRef // the vector it extends (the zero ref for none)
}

// Prepare stages a transaction against base: it deduplicates the rows by id, writes
// the new fragment and its bloom filter, works out which existing rows the new ones
// replace (or are replaced by), and writes the deletion vectors. It takes no lock
// and writes no manifest, so it may run for as long as the I/O takes while the table
// keeps serving reads and other commits.
func (t *Table) Prepare(ctx context.Context, base *Manifest, a Append) (*Txn, error) {
	if base == nil {
		return nil, fmt.Errorf("prepare %s: nil base manifest", t.dir)
	}
	parts, err := a.parts(base)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", t.dir, err)
	}
	x := &Txn{
		t: t, id: uuid.NewString(), base: base, marks: map[string]uint64{},
		checked: map[string]bool{},
		dels:    map[string]*roaring.Bitmap{}, selfDel: roaring.New(), dvRefs: map[string]writtenDV{},
		staged: staged{t: t},
	}
	ok := false
	defer func() {
		if !ok {
			x.Abort(context.WithoutCancel(ctx))
		}
	}()
	for _, p := range parts {
		if p.Shard != "" {
			x.marks[p.Shard] = p.Generation
		}
	}
	if len(parts) == 1 {
		x.shard = parts[0].Shard
	}
	if err := x.stageFragment(ctx, parts); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", t.dir, err)
	}
	if err := x.resolve(ctx, base); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", t.dir, err)
	}
	if err := x.writeDeletions(ctx, base); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", t.dir, err)
	}
	ok = true
	return x, nil
}

// stageFragment deduplicates the parts' rows by id (highest _seq wins; on a tie
// the later row, and across shards the Version order) and writes them, sorted by
// id, as one fragment with its key index and bloom filter.
func (x *Txn) stageFragment(ctx context.Context, parts []Part) error {
	s := x.base.ArrowSchema()
	var recs []arrow.RecordBatch
	for _, p := range parts {
		for _, rec := range p.Records {
			if err := checkRecord(s, rec); err != nil {
				return err
			}
		}
		recs = append(recs, p.Records...)
	}
	shardOfID := winningShards(parts)
	kept, err := rowkey.NewestPerID(ctx, recs)
	if err != nil {
		return err
	}
	sorted := kept
	if !x.t.opts.unsortedWrites {
		sorted, err = sortByID(ctx, s, kept, x.t.opts.RowGroupRows)
		for _, r := range kept {
			r.Release()
		}
		if err != nil {
			return err
		}
	}
	defer func() {
		for _, r := range sorted {
			r.Release()
		}
	}()
	shardOf := func(int, int) string { return x.shard }
	if shardOfID != nil {
		idCol := s.FieldIndices(rowkey.IDColumn)[0]
		shardOf = func(r, i int) string { return shardOfID[sorted[r].Column(idCol).(*array.String).Value(i)] }
	}
	f, _, err := x.staged.writeFragment(ctx, s, sorted, shardOf, func(id string, seq uint64, off uint32) {
		x.ids = append(x.ids, id)
		x.seqs = append(x.seqs, seq)
		x.offs = append(x.offs, off)
		if shardOfID != nil {
			x.shards = append(x.shards, shardOfID[id])
		}
	})
	if err != nil || f == nil {
		return err
	}
	if !f.Sorted {
		x.sortIncoming()
	}
	x.frag = f
	return nil
}

// winningShards maps each id of parts (sorted by shard) to the shard of its
// newest row, by NewestPerID's rule over the parts in order; nil for one part,
// whose shard is every row's.
func winningShards(parts []Part) map[string]string {
	if len(parts) < 2 {
		return nil
	}
	type win struct {
		seq   uint64
		shard string
	}
	wins := map[string]win{}
	for _, p := range parts {
		for _, rec := range p.Records {
			ids, seqs, err := rowkey.Columns(rec)
			if err != nil {
				continue // checkRecord has refused it already
			}
			for i := 0; i < ids.Len(); i++ {
				id, seq := ids.Value(i), seqs.Value(i)
				if w, ok := wins[id]; !ok || seq >= w.seq {
					wins[id] = win{seq, p.Shard}
				}
			}
		}
	}
	out := make(map[string]string, len(wins))
	for id, w := range wins {
		out[id] = w.shard
	}
	return out
}

// incoming is the Version of the incoming row k (in ids' order).
func (x *Txn) incoming(k int) rowkey.Version {
	if x.shards != nil {
		return rowkey.Version{Seq: x.seqs[k], Shard: x.shards[k]}
	}
	return rowkey.Version{Seq: x.seqs[k], Shard: x.shard}
}

// sortIncoming orders ids, seqs, offs (and shards) by id, for a fragment written
// unsorted.
func (x *Txn) sortIncoming() {
	perm := make([]int, len(x.ids))
	for i := range perm {
		perm[i] = i
	}
	slices.SortFunc(perm, func(a, b int) int { return strings.Compare(x.ids[a], x.ids[b]) })
	ids, seqs, offs := make([]string, len(perm)), make([]uint64, len(perm)), make([]uint32, len(perm))
	var shards []string
	if x.shards != nil {
		shards = make([]string, len(perm))
	}
	for k, i := range perm {
		ids[k], seqs[k], offs[k] = x.ids[i], x.seqs[i], x.offs[i]
		if shards != nil {
			shards[k] = x.shards[i]
		}
	}
	x.ids, x.seqs, x.offs, x.shards = ids, seqs, offs, shards
}

// staged is the objects a commit wrote ahead of its manifest (fragments, bloom
// filters, deletion vectors), so that a commit that certainly failed can delete
// them. Its methods may be called concurrently.
type staged struct {
	t     *Table
	mu    sync.Mutex
	files []string
}

// put writes one object, sending it again while the store throttles it.
func (st *staged) put(ctx context.Context, rel string, data []byte) error {
	st.mu.Lock()
	st.files = append(st.files, rel)
	st.mu.Unlock()
	return st.t.put(ctx, st.t.key(rel), data)
}

// writeFragment writes recs, of schema s and in strictly increasing id order, as
// one sorted fragment with its key index and bloom filter, and returns the
// fragment's entry (Deletions left for the caller) and the bytes of its sidecars;
// no fragment (nil) when recs hold no row. shardOf names the shard that wrote row i
// of batch r; row, when not nil, is called with every row's id, _seq and offset.
// The new fragment's bloom filter and index top are cached: the next commit's
// conflict check reads them.
func (st *staged) writeFragment(ctx context.Context, s *arrow.Schema, recs []arrow.RecordBatch, shardOf func(r, i int) string, row func(id string, seq uint64, off uint32)) (*Fragment, int64, error) {
	idCol, seqCol := s.FieldIndices(rowkey.IDColumn)[0], s.FieldIndices(rowkey.SeqColumn)[0]
	n := 0
	for _, r := range recs {
		n += int(r.NumRows())
	}
	if n == 0 {
		return nil, 0, nil
	}
	bf := newBloom(n)
	idx := newIndexWriter()
	var idMin, idMax string
	var seqMin, seqMax uint64
	var off uint32
	unsorted := st.t.opts.unsortedWrites
	for ri, rec := range recs {
		ids := rec.Column(idCol).(*array.String)
		seqs := rec.Column(seqCol).(*array.Uint64)
		for i := 0; i < ids.Len(); i++ {
			id, seq := ids.Value(i), seqs.Value(i)
			if err := idx.add(id, seq, shardOf(ri, i)); err != nil && !unsorted {
				return nil, 0, err
			}
			if row != nil {
				row(id, seq, off)
			}
			bf.AddString(id)
			if off == 0 {
				idMin, idMax, seqMin = id, id, seq
			}
			idMin, idMax = min(idMin, id), max(idMax, id)
			seqMin, seqMax = min(seqMin, seq), max(seqMax, seq)
			off++
		}
	}
	idMin, idMax = strings.Clone(idMin), strings.Clone(idMax)
	data, groups, err := encodeParquet(s, recs, st.t.opts.RowGroupRows)
	if err != nil {
		return nil, 0, err
	}
	bloomData, err := encodeBloom(bf)
	if err != nil {
		return nil, 0, err
	}
	idxData, topOff, top := idx.finish(groups)
	name := uuid.NewString()
	f := &Fragment{
		Path: dataDir + "/" + name + ".parquet", Bloom: dataDir + "/" + name + ".bloom",
		Rows: int64(off), Bytes: int64(len(data)), IDMin: idMin, IDMax: idMax, SeqMin: seqMin, SeqMax: seqMax,
		Sorted: true, Index: &IndexRef{Path: dataDir + "/" + name + ".idx", Bytes: int64(len(idxData)), Top: topOff},
	}
	if len(top.shards) == 1 {
		f.Shard = top.shards[0]
	} else {
		f.MixedShards = true
	}
	if unsorted {
		f.Sorted, f.Index, f.SeqMin, f.MixedShards = false, nil, 0, false
		idxData = nil
	}
	// The objects at once: one round trip instead of three.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return st.put(gctx, f.Path, data) })
	g.Go(func() error { return st.put(gctx, f.Bloom, bloomData) })
	if f.Index != nil {
		g.Go(func() error { return st.put(gctx, f.Index.Path, idxData) })
	}
	if err := g.Wait(); err != nil {
		return nil, 0, err
	}
	st.t.blooms.Add(f.Bloom, bf, int64(len(bloomData)))
	if f.Index != nil {
		st.t.tops.Add(f.Index.Path, top, top.size())
	}
	return f, int64(len(bloomData) + len(idxData)), nil
}

// writeDVs writes the vectors bms as one object (packDeletions) and caches them;
// it returns each one's ref, in bms's order. No vectors, no object.
func (st *staged) writeDVs(ctx context.Context, bms []*roaring.Bitmap) ([]DeletionRef, error) {
	if len(bms) == 0 {
		return nil, nil
	}
	data, refs, err := packDeletions(bms)
	if err != nil {
		return nil, err
	}
	rel := deletesDir + "/" + uuid.NewString() + ".bin"
	if err := st.put(ctx, rel, data); err != nil {
		return nil, err
	}
	for i := range refs {
		refs[i].Path = rel
		st.t.dvs.AddBlock(rel, int(refs[i].Offset), bms[i].Clone(), refs[i].Bytes)
	}
	return refs, nil
}

// deleteAll deletes the staged objects (best effort: what is left is garbage, not
// damage).
func (st *staged) deleteAll(ctx context.Context) {
	st.mu.Lock()
	files := st.files
	st.files = nil
	st.mu.Unlock()
	for _, rel := range files {
		if err := st.t.bucket.Delete(ctx, st.t.key(rel)); err != nil {
			st.t.log.Warn("staged file not deleted", "key", st.t.key(rel), "err", err)
		}
	}
}

// resolve compares the incoming rows with every fragment of m not yet compared:
// older existing rows go into dels, incoming rows older than an existing row go into
// selfDel. Only the incoming ids within a fragment's id range are looked up in it,
// together (lookupFragment: its bloom filter, then the key-index blocks they fall
// in), every fragment at once, requestsInFlight requests at a time: on an object
// store a conflict check that reads them one after another waits one round trip
// per object, and one bounded by fragments one per few fragments. Then the
// deletion vectors of the fragments holding an incoming id are read together
// (deletionsOf), a request per object of packed vectors.
func (x *Txn) resolve(ctx context.Context, m *Manifest) error {
	if x.frag == nil {
		return nil
	}
	ctx = withRequestBudget(ctx, requestsInFlight)
	var check []Fragment
	for _, f := range m.Fragments {
		if x.checked[f.Path] {
			continue
		}
		x.checked[f.Path] = true
		if f.IDMax < x.frag.IDMin || f.IDMin > x.frag.IDMax || f.LiveRows() == 0 {
			continue
		}
		check = append(check, f)
	}
	type found struct {
		lo   int // offset of the first incoming id looked up
		hits []indexHit
	}
	results := make([]found, len(check))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(lookupFragments)
	for i, f := range check {
		g.Go(func() error {
			lo := sort.SearchStrings(x.ids, f.IDMin)
			hi := sort.Search(len(x.ids), func(k int) bool { return x.ids[k] > f.IDMax })
			if lo >= hi {
				return nil
			}
			hits, err := x.t.lookupFragment(gctx, m, f, x.ids[lo:hi])
			if err != nil {
				return err
			}
			results[i] = found{lo: lo, hits: hits}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err // the caller aborts the transaction
	}
	// The vectors of the fragments holding some incoming id, together: the
	// vectors one commit packed into one object come in one read.
	var hit []int // positions in check
	for i, r := range results {
		if slices.ContainsFunc(r.hits, func(h indexHit) bool { return h.found }) {
			hit = append(hit, i)
		}
	}
	hitFrags := make([]Fragment, len(hit))
	for k, i := range hit {
		hitFrags[k] = check[i]
	}
	dvs, err := x.t.deletionsOf(ctx, hitFrags)
	if err != nil {
		return err
	}
	for n, i := range hit {
		f, r, dv := check[i], results[i], dvs[n]
		for k, h := range r.hits {
			if !h.found || dv.Contains(h.off) {
				continue
			}
			in := x.offs[r.lo+k] // the incoming row's offset
			// Equal versions are the same write (a generation merged again):
			// the incoming copy replaces the existing one.
			if !h.v.Newer(x.incoming(r.lo + k)) {
				if x.dels[f.Path] == nil {
					x.dels[f.Path] = roaring.New()
				}
				x.dels[f.Path].Add(h.off)
			} else if !x.selfDel.Contains(in) {
				x.selfDel.Add(in)
				x.selfDelDirty = true
			}
		}
	}
	return nil
}

// writeDeletions writes, for every existing fragment this transaction deletes from,
// the union of that fragment's vector in m and dels, unless one built from the same
// base vector exists already; and the new fragment's own vector if it changed. The
// base vectors are read all at once (deletionsOf) and the new ones written as one
// object: a merge of random ids touches most fragments of a large store, and a
// write per fragment was most of its requests.
func (x *Txn) writeDeletions(ctx context.Context, m *Manifest) error {
	ctx = withRequestBudget(ctx, requestsInFlight)
	var (
		frags []Fragment
		from  []DeletionRef // the vector each one's union extends
	)
	for _, f := range m.Fragments {
		if x.dels[f.Path] == nil {
			continue
		}
		var base DeletionRef
		if f.Deletions != nil {
			base = *f.Deletions
		}
		if w, ok := x.dvRefs[f.Path]; ok && w.from == base {
			continue
		}
		frags = append(frags, f)
		from = append(from, base)
	}
	cur, err := x.t.deletionsOf(ctx, frags)
	if err != nil {
		return err
	}
	bms := make([]*roaring.Bitmap, 0, len(frags)+1)
	for i, f := range frags {
		bms = append(bms, roaring.Or(cur[i], x.dels[f.Path]))
	}
	if x.selfDelDirty {
		bms = append(bms, x.selfDel)
	}
	refs, err := x.staged.writeDVs(ctx, bms)
	if err != nil {
		return err
	}
	for i, f := range frags {
		x.dvRefs[f.Path] = writtenDV{ref: refs[i], from: from[i]}
	}
	if x.selfDelDirty {
		ref := refs[len(frags)]
		x.selfDelRef, x.selfDelDirty = &ref, false
	}
	return nil
}

// build returns the manifest this transaction commits on top of m.
func (x *Txn) build(m *Manifest) *Manifest {
	n := m.next(x.id, x.t.opts.Clock.Now().UTC())
	for i, f := range n.Fragments {
		if w, ok := x.dvRefs[f.Path]; ok {
			ref := w.ref
			n.Fragments[i].Deletions = &ref
		}
	}
	if x.frag != nil {
		f := *x.frag
		f.Deletions = x.selfDelRef
		n.Fragments = append(n.Fragments, f)
	}
	for shard, gen := range x.marks {
		if n.MergedGenerations[shard] < gen {
			n.MergedGenerations[shard] = gen
		}
	}
	return n
}

// Commit writes the next manifest version. On losing the race it reloads, stops
// with ErrAlreadyCommitted if the watermark shows the work landed, otherwise rebases
// (resolving against fragments added meanwhile and re-deriving deletion vectors that
// changed) and retries after a backoff proportional to the failed attempt's duration,
// until RetryTimeout. It returns the committed manifest.
//
// When Commit returns an error other than one wrapping ErrTooManyWriters or
// ErrAlreadyCommitted, the outcome may be unknown (a manifest write that failed
// after reaching storage); the staged files are then left in place, since the
// manifest may reference them, and a retry of the same watermark is safe.
func (x *Txn) Commit(ctx context.Context) (*Manifest, error) {
	if x.finished {
		return nil, fmt.Errorf("commit %s: transaction already finished", x.t.dir)
	}
	m, err := x.t.commitOptimistic(ctx, x.id, x)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", x.t.dir, err)
	}
	x.finished = true
	return m, nil
}

func (x *Txn) proposal() *Manifest { return x.build(x.base) }

// settle stops the commit when the watermarks show its rows landed already: every
// shard's. When only some did (their worker merged them meanwhile), the commit goes
// on: their rows are the same writes as those landed, which resolve replaces
// (equal versions) or drops (newer ones), so nothing is added twice.
func (x *Txn) settle(latest *Manifest) error {
	if len(x.marks) == 0 {
		return nil
	}
	for shard, gen := range x.marks {
		if latest.Watermark(shard) < gen {
			return nil
		}
	}
	if x.shard != "" {
		return fmt.Errorf("shard %s generation %d landed in an earlier version: %w", x.shard, x.marks[x.shard], ErrAlreadyCommitted)
	}
	return fmt.Errorf("the generations of all %d shards landed in earlier versions: %w", len(x.marks), ErrAlreadyCommitted)
}

// optimistic is a commit that can move onto a newer version when it loses the race
// for the next one: a Txn or a compaction.
type optimistic interface {
	// proposal is the manifest to create on top of the commit's current base.
	proposal() *Manifest
	// settle inspects the newest version after a lost race: an error ends the
	// commit (the staged files are deleted), nil means rebase and try again.
	settle(latest *Manifest) error
	// rebase moves the commit onto latest; an error ends it.
	rebase(ctx context.Context, latest *Manifest) error
	// Abort deletes the staged files.
	Abort(ctx context.Context)
}

// commitOptimistic creates c's proposal with put-if-absent. On losing the race (or
// a throttled write that did not land, which is an attempt lost the same way:
// tryCreate tells these from a write of its own whose answer was lost) it reloads, lets c settle and rebase, and retries after a backoff of 0.5-1.5x
// the failed attempt's duration (at most 1 s), until RetryTimeout, then fails with
// ErrTooManyWriters. An error that leaves the outcome unknown returns without
// aborting: the staged files stay, since the manifest may reference them.
func (t *Table) commitOptimistic(ctx context.Context, txnID string, c optimistic) (*Manifest, error) {
	clk := t.opts.Clock
	start := clk.Now()
	deadline := start.Add(t.opts.RetryTimeout)
	throttled := 0
	for attempt := 1; ; attempt++ {
		attemptStart := clk.Now()
		m, err := t.tryCreate(ctx, txnID, c.proposal())
		if err == nil {
			t.observe(m)
			return m, nil
		}
		if errors.Is(err, errUnknownOutcome) {
			return nil, fmt.Errorf("version %d: %w", m.Version, err)
		}
		if errors.Is(err, objstore.ErrThrottled) {
			throttled++
		} else if !errors.Is(err, objstore.ErrExists) {
			return nil, fmt.Errorf("version %d: %w", m.Version, err)
		}
		latest, err := t.Refresh(ctx)
		switch {
		case errors.Is(err, objstore.ErrThrottled):
			latest = nil // try again on the same base; a taken version reports itself
		case err != nil:
			return nil, fmt.Errorf("reload after conflict: %w", err)
		}
		if latest != nil {
			if err := c.settle(latest); err != nil {
				c.Abort(context.WithoutCancel(ctx))
				return nil, err
			}
		}
		if now := clk.Now(); !now.Before(deadline) {
			c.Abort(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%w: gave up after %d attempts (%d throttled) in %s (retry_timeout %s)",
				ErrTooManyWriters, attempt, throttled, now.Sub(start).Round(time.Millisecond), t.opts.RetryTimeout)
		}
		if latest != nil {
			if err := c.rebase(ctx, latest); err != nil {
				c.Abort(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("rebase onto version %d: %w", latest.Version, err)
			}
		}
		backoff := clk.Since(attemptStart)
		backoff = backoff/2 + rand.N(backoff+1)
		backoff = min(max(backoff, time.Millisecond), time.Second, deadline.Sub(clk.Now()))
		select {
		case <-ctx.Done():
			c.Abort(context.WithoutCancel(ctx))
			return nil, ctx.Err()
		case <-clk.After(backoff):
		}
	}
}

// tryCreate makes one attempt at writing m. It returns m (also on a conflict, so
// the caller can name the version). Whatever the error, the version may be this
// transaction's: a write that failed after reaching storage, or one whose answer
// was lost and that the storage SDK sent again, to be told that the version
// exists (S3 and GCS answer such a resend 412, as they answer a lost race). So the
// version is read back: if it carries txnID the commit succeeded; if another's,
// this was a plain conflict; if it is not there, the write did not land. When
// the read fails too, the outcome is unknown (errUnknownOutcome): the caller must
// not take it for a lost race, settle on a newer version and abort, deleting files
// its own version references.
func (t *Table) tryCreate(ctx context.Context, txnID string, m *Manifest) (*Manifest, error) {
	err := t.createVersion(ctx, m)
	if err == nil {
		return m, nil
	}
	got, lerr := t.Load(ctx, m.Version)
	switch {
	case lerr == nil && got.TxnID == txnID:
		return got, nil
	case lerr == nil:
		t.observe(got) // the refresh after the conflict need not read it again
		if errors.Is(err, objstore.ErrExists) {
			return m, err
		}
		return m, fmt.Errorf("%w: version %d taken by transaction %s", objstore.ErrExists, m.Version, got.TxnID)
	case errors.Is(lerr, objstore.ErrNotFound):
		// It has not landed (an "exists" for a version now missing: retention
		// pruned it, so it was not the newest, nor this transaction's). The staged
		// files stay: a request that timed out may still complete, and then its
		// manifest must find them.
		return m, err
	}
	return m, fmt.Errorf("%w: the write failed (%w) and reading the version back failed too (%w)", errUnknownOutcome, err, lerr)
}

// rebase moves the transaction onto latest: resolve against fragments added since
// the base, drop deletions aimed at fragments that no longer exist (their rows were
// rewritten into fragments resolve just saw), and rewrite deletion vectors whose base
// vector changed.
func (x *Txn) rebase(ctx context.Context, latest *Manifest) error {
	if err := x.resolve(ctx, latest); err != nil {
		return err
	}
	present := make(map[string]bool, len(latest.Fragments))
	for _, f := range latest.Fragments {
		present[f.Path] = true
	}
	for p := range x.dels {
		if !present[p] {
			delete(x.dels, p)
			delete(x.dvRefs, p)
		}
	}
	if err := x.writeDeletions(ctx, latest); err != nil {
		return err
	}
	x.base = latest
	return nil
}

// CatchUp moves a transaction prepared some time ago onto the newest version, so
// that its commit's first attempt is not a certain conflict: a two-phase merge
// commits after the merges of the workers before it, each of which took the next
// version. It stops with ErrAlreadyCommitted when the newest version holds its
// rows already. Nothing is committed; on an error the caller aborts. known, if not
// 0, is a version known to exist and likely the newest (Table.RefreshFrom).
func (x *Txn) CatchUp(ctx context.Context, known uint64) error {
	if x.finished {
		return fmt.Errorf("catch up %s: transaction already finished", x.t.dir)
	}
	latest, err := x.t.RefreshFrom(ctx, known)
	if err != nil {
		return fmt.Errorf("catch up %s: %w", x.t.dir, err)
	}
	if latest.Version == x.base.Version {
		return nil
	}
	if err := x.settle(latest); err != nil {
		return err
	}
	if err := x.rebase(ctx, latest); err != nil {
		return fmt.Errorf("catch up %s: rebase onto version %d: %w", x.t.dir, latest.Version, err)
	}
	return nil
}

// Abort deletes the transaction's staged files (best effort). It is a no-op after a
// successful Commit. Deletion failures leave unreferenced files, which are garbage,
// not damage.
func (x *Txn) Abort(ctx context.Context) {
	if x.finished {
		return
	}
	x.finished = true
	x.staged.deleteAll(ctx)
}

// ID is the transaction's id, recorded as the committed manifest's txn_id.
func (x *Txn) ID() string { return x.id }

// Base is the manifest the transaction is currently built on.
func (x *Txn) Base() *Manifest { return x.base }
