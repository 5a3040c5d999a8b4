package store

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// The change feed's read path (issue 32). A page after cursor c under horizon H
// answers the live rows whose rowkey.Position p has c < p and p.Seq <= H, in
// Position order, at most a limit of them.
//
// Why it is correct:
//
//  1. A row is live iff it is the newest version of its id in the snapshot. A
//     version newer than a row after c has a _seq at or above c.Seq, so only the
//     fragments and generations whose _seq range reaches c.Seq (the relevant ones)
//     can hold one: the page looks up versions in those alone, and the answer is
//     the one a lookup over the whole snapshot gives.
//  2. Candidates come from the relevant fragments and generations that also start
//     at or below H (their rows above c and at or below H), a base row only when
//     its deletion vector keeps it (a newer base row of its id replaced it) and no
//     pending version is newer, a pending row only when it is its id's newest
//     pending version: every live row of the page's range is a candidate.
//  3. The page keeps the best candidates in a bounded heap and confirms each with
//     the newest-version lookup of GetMany (the base row, if any, against the
//     pending one), which also reads its columns: a candidate whose id's newest
//     version has another _seq is stale (replaced meanwhile by a row of another
//     shard) and is dropped. When the heap turned candidates away and the page is
//     not full, the next round starts after the last candidate, so stale ones
//     never shorten a page while live rows follow.
//  4. The caller read H before the snapshot's refresh began (HorizonReadAt), so the
//     snapshot holds every row with _seq <= H (the horizon's promise): no row
//     below the next cursor can appear later. pkg/worker/feed's Read is the caller
//     that keeps this order (and the long poll's), in one function.
//
// Cost: what the page returns, plus the id and _seq columns of the fragments and
// generations whose _seq range overlaps [c.Seq, H], plus key-index probes of the
// relevant fragments for the candidates' ids. Memory: the candidates (at most
// maxChangeCandidates), the page, the row groups being scanned (changeScans at
// once) and the pending rows of the relevant generations.

// changeScans bounds the fragments whose ids and _seqs one page scans at once.
const changeScans = 8

// maxChangeCandidates bounds the candidates one round of a page holds. A round
// starts with the page's limit and doubles while filters or stale candidates keep
// the page short, up to this (or the limit, if larger).
const maxChangeCandidates = 1 << 14

// ChangesOptions selects one page of the change feed.
type ChangesOptions struct {
	// After is the cursor: the page answers rows after this Position (the zero
	// Position: from the beginning).
	After rowkey.Position
	// Horizon is the store's horizon: rows with a higher _seq are held back
	// (answered once the horizon passes them).
	Horizon uint64
	// HorizonReadAt is when the caller read Horizon, by the store's clock
	// (Store.Now): the page reads a snapshot whose refresh began after it, which
	// holds every row with _seq <= Horizon. Zero: when Changes is called.
	HorizonReadAt time.Time
	// Limit is the most rows answered; it must be positive.
	Limit int
	// Columns, Filter and FilterColumns are ListOptions': the columns read of
	// base rows (nil: every one; id and _seq always), and which rows match.
	Columns       []string
	Filter        func(rec arrow.RecordBatch) ([]bool, error)
	FilterColumns []string
}

// Change is one row of a feed page: its Position and the row, a one-row batch
// (table schema, _seq last) the caller releases.
type Change struct {
	Position rowkey.Position
	Row      arrow.RecordBatch
}

// ChangesPage is a page of the change feed: its rows in Position order and the
// cursor of the next page: the last row's Position when the page is full,
// otherwise rowkey.After(Horizon) (never before the page's cursor).
type ChangesPage struct {
	Changes []Change
	Next    rowkey.Position
	// Version is the base-table version of the snapshot the page read (0 when
	// it read none: nothing lay between the cursor and the horizon).
	Version uint64
}

// Release releases the page's rows.
func (p ChangesPage) Release() {
	for _, c := range p.Changes {
		c.Row.Release()
	}
}

// errPageFull stops a lookup once the page has its rows.
var errPageFull = errors.New("page full")

// Now is the store's clock, the one ChangesOptions.HorizonReadAt is read from.
func (s *Store) Now() time.Time { return s.cfg.Clock.Now() }

// Changes answers one page of the change feed (see the top of this file).
func (s *Store) Changes(ctx context.Context, opts ChangesOptions) (ChangesPage, error) {
	if opts.Limit <= 0 {
		return ChangesPage{}, fmt.Errorf("store %s: changes: limit %d, want at least 1", s.Target(), opts.Limit)
	}
	// After(MaxUint64) would wrap around; no _seq comes near it.
	opts.Horizon = min(opts.Horizon, math.MaxUint64-1)
	if !opts.After.Less(rowkey.After(opts.Horizon)) {
		// Nothing lies between the cursor and the horizon: no read at all (a
		// long poll asks this until the horizon moves).
		return ChangesPage{Next: opts.After}, nil
	}
	t := opts.HorizonReadAt
	if t.IsZero() {
		t = s.cfg.Clock.Now()
	}
	snap, err := s.freshSince(ctx, t, true)
	if err != nil {
		return ChangesPage{}, err
	}
	return s.changesIn(ctx, snap, opts)
}

// changesIn is Changes over snap.
func (s *Store) changesIn(ctx context.Context, snap *Snapshot, opts ChangesOptions) (ChangesPage, error) {
	c, h := opts.After, opts.Horizon
	// The relevant fragments and generations (rule 1 above).
	view := &Snapshot{Base: withFragments(snap.Base, func(f table.Fragment) bool { return f.SeqMax >= c.Seq }),
		WAL: snap.WAL, taken: snap.taken}
	var gens []wal.PendingGeneration
	for _, g := range snap.Pending() {
		if g.Generation.SeqMax >= c.Seq {
			gens = append(gens, g)
		}
	}
	p, err := s.loadPendingOf(ctx, gens)
	if err != nil {
		return ChangesPage{}, err
	}
	var cols []string
	if opts.Columns != nil {
		cols = keyedColumns(snap.Base.ArrowSchema(), append(slices.Clip(opts.Columns), opts.FilterColumns...))
	}
	page := ChangesPage{Version: snap.Base.Version}
	from, k := c, opts.Limit
	for {
		cands, more, err := s.changeCandidates(ctx, view.Base, gens, p, from, h, k)
		if err != nil {
			page.Release()
			return ChangesPage{}, err
		}
		full, err := s.confirmChanges(ctx, view, p, cands, cols, opts, &page)
		if err != nil {
			page.Release()
			return ChangesPage{}, err
		}
		switch {
		case full:
			page.Next = page.Changes[len(page.Changes)-1].Position
			return page, nil
		case !more:
			page.Next = later(c, rowkey.After(h))
			return page, nil
		}
		from, k = cands[len(cands)-1], min(2*k, max(opts.Limit, maxChangeCandidates))
	}
}

// later returns the later of two Positions.
func later(a, b rowkey.Position) rowkey.Position {
	if a.Less(b) {
		return b
	}
	return a
}

// changeCandidates returns, in Position order, the best k Positions after from
// and at or below horizon h of the rows that may be live (rule 2): of base the
// fragments, and of gens (whose pending rows p holds, in the same order) the
// generations, whose _seq range overlaps; more says whether candidates were
// turned away for lack of room (others then follow the last one returned).
func (s *Store) changeCandidates(ctx context.Context, base *table.Manifest, gens []wal.PendingGeneration, p *pendingRows, from rowkey.Position, h uint64, k int) ([]rowkey.Position, bool, error) {
	best := newCandidates(k)
	inRange := func(pos rowkey.Position) bool { return from.Less(pos) && pos.Seq <= h }
	for gi, g := range gens {
		if g.Generation.SeqMin > h {
			continue // newer than the horizon: it holds versions for rule 1 only
		}
		var found []rowkey.Position
		for _, rec := range p.gens[gi].Records {
			ids, seqs, err := rowkey.Columns(rec)
			if err != nil {
				return nil, false, fmt.Errorf("store %s: generation %s: %w", s.Target(), p.gens[gi].Key, err)
			}
			for i := 0; i < ids.Len(); i++ {
				pos := rowkey.Position{Seq: seqs.Value(i), ID: ids.Value(i)}
				if !inRange(pos) {
					continue
				}
				// Its id's newest pending version, or it is stale.
				if b := p.best[pos.ID]; b.v.Newer(rowkey.Version{Seq: pos.Seq, Shard: g.Shard}) {
					continue
				}
				found = append(found, pos)
			}
		}
		best.offer(found)
	}
	var scan []table.Fragment
	for _, f := range base.Fragments {
		switch {
		case f.LiveRows() == 0 || f.SeqMax < from.Seq:
		case f.SeqMax == from.Seq && f.IDMax <= from.ID: // every row at or before from
		case f.SeqMin > h: // SeqMin 0 (not recorded) never skips: SeqMax alone decides
		default:
			scan = append(scan, f)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(changeScans)
	for _, f := range scan {
		g.Go(func() error {
			one := withFragments(base, func(o table.Fragment) bool { return o.Path == f.Path })
			return s.table.Scan(gctx, one, table.ScanOptions{Columns: []string{rowkey.IDColumn, rowkey.SeqColumn}},
				func(rec arrow.RecordBatch, shard string) error {
					ids, seqs, err := rowkey.Columns(rec)
					if err != nil {
						return fmt.Errorf("fragment %s: %w", f.Path, err)
					}
					var found []rowkey.Position
					for i := 0; i < ids.Len(); i++ {
						pos := rowkey.Position{Seq: seqs.Value(i), ID: ids.Value(i)}
						if !inRange(pos) {
							continue
						}
						// The base holds one live row per id (deletion vectors drop
						// the rest); a newer pending version replaces it.
						if b, ok := p.best[pos.ID]; ok && b.v.Newer(rowkey.Version{Seq: pos.Seq, Shard: shard}) {
							continue
						}
						found = append(found, pos)
					}
					best.offer(found)
					return nil
				})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, false, fmt.Errorf("store %s: %w", s.Target(), err)
	}
	return best.sorted(), best.dropped, nil
}

// confirmChanges looks up the newest version of each candidate's id, with the
// columns cols names (nil: every one), and adds those that are live and match
// opts.Filter to page, until it holds opts.Limit rows; true when it does (rule 3).
func (s *Store) confirmChanges(ctx context.Context, view *Snapshot, p *pendingRows, cands []rowkey.Position, cols []string, opts ChangesOptions, page *ChangesPage) (bool, error) {
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	next := 0
	err := s.getManyWith(ctx, view, p, ids, cols, func(row arrow.RecordBatch) error {
		rids, seqs, err := rowkey.Columns(row)
		if err != nil {
			return err
		}
		id, seq := rids.Value(0), seqs.Value(0)
		for next < len(cands) && cands[next].ID != id {
			next++ // an id with no row at all: the lookup skipped it
		}
		if next == len(cands) {
			return fmt.Errorf("store %s: changes: lookup answered id %q out of order", s.Target(), id)
		}
		want := cands[next]
		next++
		if seq != want.Seq {
			return nil // stale: its id has a newer version
		}
		if opts.Filter != nil {
			m, err := opts.Filter(row)
			if err != nil {
				return err
			}
			if !m[0] {
				return nil
			}
		}
		row.Retain()
		page.Changes = append(page.Changes, Change{Position: want, Row: row})
		if len(page.Changes) == opts.Limit {
			return errPageFull
		}
		return nil
	})
	if errors.Is(err, errPageFull) {
		return true, nil
	}
	return false, err
}

// withFragments returns a copy of m that lists only the fragments keep accepts.
// A table read through it reads those fragments as it would through m (every read
// takes the manifest's fragment list as what there is to read); m is not changed.
func withFragments(m *table.Manifest, keep func(table.Fragment) bool) *table.Manifest {
	sub := *m
	sub.Fragments = nil
	for _, f := range m.Fragments {
		if keep(f) {
			sub.Fragments = append(sub.Fragments, f)
		}
	}
	return &sub
}

// candidates keeps the k smallest distinct Positions offered to it, safe for
// concurrent offers: a max-heap whose top is the worst one kept.
type candidates struct {
	mu      sync.Mutex
	k       int
	h       positionHeap
	kept    map[rowkey.Position]bool
	dropped bool // some Position was turned away (or pushed out) for lack of room
}

func newCandidates(k int) *candidates {
	return &candidates{k: k, kept: make(map[rowkey.Position]bool, k)}
}

// offer considers ps (one batch's worth, so the lock is taken once per batch).
func (c *candidates) offer(ps []rowkey.Position) {
	if len(ps) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		switch {
		case c.kept[p]: // the same row in two places (a tie of _seq between shards)
		case len(c.h) < c.k:
			heap.Push(&c.h, p)
			c.kept[p] = true
		case p.Less(c.h[0]):
			delete(c.kept, c.h[0])
			c.h[0] = p
			heap.Fix(&c.h, 0)
			c.kept[p] = true
			c.dropped = true
		default:
			c.dropped = true
		}
	}
}

// sorted returns the kept Positions in increasing order.
func (c *candidates) sorted() []rowkey.Position {
	out := slices.Clone(c.h)
	slices.SortFunc(out, rowkey.Position.Compare)
	return out
}

// positionHeap is a max-heap of Positions.
type positionHeap []rowkey.Position

func (h positionHeap) Len() int           { return len(h) }
func (h positionHeap) Less(i, j int) bool { return h[j].Less(h[i]) }
func (h positionHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *positionHeap) Push(x any)        { *h = append(*h, x.(rowkey.Position)) }
func (h *positionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
