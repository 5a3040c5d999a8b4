package store

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
)

// Current returns the store now as a View: one fresh snapshot, base and pending
// rows, as Store's reads take, but fixed for every read through it. A reader
// that must say which version it reads, and with which schema, before it reads
// a row (an Arrow stream's schema message) reads through it; its reads answer
// what the Store's own would have at that snapshot.
func (s *Store) Current(ctx context.Context) (*View, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	return &View{s: s, snap: snap, current: true}, nil
}

// Schema is the table schema of the view's version: every column in table
// order, _seq last. Rows the view hands out from pending generations may order
// or type a column otherwise (the WAL's schema); readers conform them by name.
func (v *View) Schema() *arrow.Schema { return v.snap.Base.ArrowSchema() }
