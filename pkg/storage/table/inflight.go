package table

import (
	"context"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// A lookup of many ids (a batch get, a merge's conflict check and the deletion
// vectors it writes) is bounded by the requests it has in flight, not by the
// fragments it looks into: one fragment may need one key-index block or fifty,
// and what an object store charges is a round trip per wave of requests, so a
// bound by fragments either leaves slots idle (a wave of fragments needing one
// block each) or waits one wave per few fragments when there are many. Every
// fragment's work starts at once; each request waits for a slot of the
// operation's budget, held only while the request is out (never while waiting
// for another), so no nesting of waits can deadlock.
//
// The budget travels in the context, as the operation's own: a request made
// under a context that carries none (a scan, a compaction, verify) is not held
// back here and is bounded by its caller, as before.

// requestsInFlight is the budget of one lookup: a merge of 1,000 random ids into
// a store of 10M rows needs about 1,100 requests (a key-index block per id, a
// deletion vector per fragment touched), so 128 at once cost it about nine
// round trips beyond the merge's own, where 8 to 32 fragments at once cost
// thirty. It stays well under what one prefix of an object store serves (S3:
// 3,500 writes and 5,500 reads a second), and a store that throttles has its
// refusals sent again (objstore.WithRetry).
const requestsInFlight = 128

type requestBudgetKey struct{}

// requestBudget is the slots of one operation.
type requestBudget chan struct{}

// withRequestBudget returns ctx carrying a new budget of n requests in flight,
// shared by every request made under ctx or a context derived from it.
func withRequestBudget(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, requestBudgetKey{}, make(requestBudget, n))
}

// requestSlot waits for a slot of ctx's budget (at once when ctx carries none) and
// returns the function that gives it back.
func requestSlot(ctx context.Context) (release func(), err error) {
	b, _ := ctx.Value(requestBudgetKey{}).(requestBudget)
	if b == nil {
		return func() {}, nil
	}
	select {
	case b <- struct{}{}:
		return func() { <-b }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// getRange, get and put are the bucket's, each request waiting for a slot of
// ctx's budget first.
func (t *Table) getRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	release, err := requestSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.bucket.GetRange(ctx, key, off, n)
}

func (t *Table) getRanges(ctx context.Context, key string, rs []objstore.ByteRange) ([][]byte, error) {
	release, err := requestSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.bucket.GetRanges(ctx, key, rs)
}

func (t *Table) get(ctx context.Context, key string) ([]byte, error) {
	release, err := requestSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.bucket.Get(ctx, key)
}

func (t *Table) put(ctx context.Context, key string, data []byte) error {
	release, err := requestSlot(ctx)
	if err != nil {
		return err
	}
	defer release()
	return t.bucket.Put(ctx, key, data)
}
