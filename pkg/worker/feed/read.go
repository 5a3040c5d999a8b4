package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Horizons is the worker's view of each store's horizon (issue 32): every row that
// will ever be live in the store with _seq at or below it is sealed already.
type Horizons interface {
	// Horizon returns the store's horizon and whether one is known (false: no
	// shard has published yet; the feed answers nothing yet, not an error).
	Horizon(ctx context.Context, target registry.Target) (h uint64, ok bool, err error)
	// Changed is closed when any horizon may have moved (for long polls).
	Changed() <-chan struct{}
}

// DefaultMaxWait caps a long poll's wait (FEED_MAX_WAIT).
const DefaultMaxWait = 30 * time.Second

// ErrHorizonUnavailable means the store's horizon could not be read (etcd away
// or slow): nothing says which rows are safe to deliver, so none are.
var ErrHorizonUnavailable = errors.New("the store's horizon could not be read")

// Request is one page of a store's feed.
type Request struct {
	// Cursor is where the page starts: rows after it. With Now the page starts
	// at the store's horizon when Read began instead (the beginning while no
	// horizon is known: nothing is deliverable yet, so nothing is skipped).
	Cursor rowkey.Position
	Now    bool
	// Wait, if positive, is how long Read waits for rows while the page is empty
	// (a long poll).
	Wait time.Duration
	// Options are the page's limit, columns and filter; Read sets After, Horizon
	// and HorizonReadAt.
	Options store.ChangesOptions
}

// Read answers one page of st's feed: the rows after the request's cursor, up to
// the store's horizon. With Wait it reads pages until one has rows, Wait has
// passed, or stopping is closed (the server shuts down), and after each empty
// page it waits for a horizon to move.
//
// The order of one round is the feed's correctness, and it is kept here, in one
// place, so no caller can get it wrong:
//
//  1. take the channel of Horizons.Changed, so a horizon that moves after the read
//     below still wakes the wait (taken after the read, a move in between would be
//     missed and the poll would sleep until its deadline with rows deliverable);
//  2. note the store's clock, then read the horizon H: the page's snapshot is
//     refreshed after that time (store.ChangesOptions.HorizonReadAt), so it holds
//     every row with _seq <= H (the horizon's promise) and no row below the next
//     cursor can appear later (store/changes.go's rule 4);
//  3. read the page up to H.
//
// Errors wrap ErrHorizonUnavailable, ctx's error, or the store's.
func Read(ctx context.Context, hz Horizons, st *store.Store, req Request, stopping <-chan struct{}) (store.ChangesPage, error) {
	var deadline <-chan time.Time
	if req.Wait > 0 {
		timer := time.NewTimer(req.Wait)
		defer timer.Stop()
		deadline = timer.C
	}
	opts := req.Options
	cursor, resolved := req.Cursor, !req.Now
	for {
		changed := hz.Changed()
		readAt := st.Now()
		h, ok, err := hz.Horizon(ctx, st.Target())
		if err != nil {
			if ctx.Err() != nil {
				return store.ChangesPage{}, ctx.Err()
			}
			return store.ChangesPage{}, fmt.Errorf("store %s: %w: %w", st.Target(), ErrHorizonUnavailable, err)
		}
		if !resolved {
			if ok {
				cursor = rowkey.After(h)
			}
			resolved = true
		}
		page := store.ChangesPage{Next: cursor}
		if ok {
			opts.After, opts.Horizon, opts.HorizonReadAt = cursor, h, readAt
			if page, err = st.Changes(ctx, opts); err != nil {
				return store.ChangesPage{}, err
			}
		}
		if len(page.Changes) > 0 || deadline == nil {
			return page, nil
		}
		cursor = page.Next
		select {
		case <-changed:
		case <-deadline:
			return page, nil
		case <-stopping:
			return page, nil
		case <-ctx.Done():
			return store.ChangesPage{}, ctx.Err()
		}
	}
}
