package wal

// Promise returns a _seq P that the shard keeps as long as this writer is its
// writer: every row of the shard with _seq <= P is sealed (in a generation of a
// manifest version already written), and every row the shard holds later has a
// _seq above P. It is what the change feed's horizon is made of (issue 32): a
// reader that learns P and then reads the shard's manifest sees every row of the
// shard up to P.
//
// With unsealed rows (in the memtable, or numbered for an entry whose write has
// not succeeded) P is just below the lowest of them. With none, P is the present:
// the clock moves to it, so the rows of later appends are numbered above it. Both
// hold under mu, which the committer takes to number a batch.
//
// P never decreases for one writer, and a writer opened later numbers its rows
// above it once told of it (Observe). ok is false once the writer is fenced: a
// newer epoch owns the shard, and its promises are the ones that count.
func (w *Writer) Promise() (p uint64, ok bool) {
	w.qmu.Lock()
	fenced := w.fenced != nil
	w.qmu.Unlock()
	if fenced {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	lo := w.unsureLo
	if m := w.mem.seqLo(); m != 0 && (lo == 0 || m < lo) {
		lo = m
	}
	if lo != 0 {
		return lo - 1, true
	}
	// Observe may have raised the floor without a batch numbered since: apply it, so
	// the promise is above it too.
	w.clock.observe(w.observed.Load())
	return w.clock.now(), true
}
