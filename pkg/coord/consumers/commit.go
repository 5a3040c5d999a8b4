package consumers

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// ErrBehind means a commit's cursor is before the one already committed: the
// committed cursor stays. The error is a *BehindError naming it.
var ErrBehind = errclass.New(errclass.Precondition, "cursor behind the committed cursor")

// ErrContended means a commit lost maxCommitAttempts races in a row: other
// writers of the same key kept moving it. Retrying later is safe.
var ErrContended = errclass.New(errclass.Busy, "consumer cursor contended")

// BehindError is a commit refused because the committed cursor is ahead of it.
// It unwraps to ErrBehind.
type BehindError struct {
	// Committed is the consumer's record as it stands.
	Committed Record
	// Cursor is the cursor the commit brought.
	Cursor rowkey.Position
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("consumer %q of store %s: %v: %s is before the committed %s (committed at %s)",
		e.Committed.Consumer, e.Committed.Target, ErrBehind, e.Cursor.Cursor(), e.Committed.Cursor.Cursor(),
		e.Committed.CommittedAt.Format("2006-01-02T15:04:05.000Z07:00"))
}

func (e *BehindError) Unwrap() error { return ErrBehind }

// maxCommitAttempts bounds the read-compare-write rounds of one Commit. A round
// is lost only to another write of the key, and every write moves the cursor
// forward, so a commit ahead of everyone loses only while others keep
// committing; it stops with ErrContended rather than spin.
const maxCommitAttempts = 64

// Commit moves the consumer's cursor in target forward to cursor and returns the
// record as stored. A cursor equal to the committed one is a success that writes
// nothing (a consumer committing the same page twice); one before it fails with a
// *BehindError (ErrBehind) naming the committed cursor. A first commit creates
// the record, whatever its cursor.
func (c *Cursors) Commit(ctx context.Context, target registry.Target, consumer string, cursor rowkey.Position) (Record, error) {
	if err := ValidateName(consumer); err != nil {
		return Record{}, err
	}
	key := c.keys.Consumer(target.String(), consumer)
	resp, err := c.client.Get(ctx, key)
	if err != nil {
		return Record{}, fmt.Errorf("get %s: %w", key, err)
	}
	kvs := resp.Kvs
	for range maxCommitAttempts {
		var modRev int64 // 0: the key is absent
		if len(kvs) > 0 {
			cur, err := decode(key, target, consumer, kvs[0].Value, kvs[0].ModRevision)
			if err != nil {
				return Record{}, err
			}
			switch {
			case cursor.Less(cur.Cursor):
				return Record{}, &BehindError{Committed: cur, Cursor: cursor}
			case cursor == cur.Cursor:
				return cur, nil
			}
			modRev = cur.Revision
		}
		rec := Record{Target: target, Consumer: consumer, Cursor: cursor, CommittedAt: c.clock.Now()}
		// Commit transaction:
		//   if   mod_revision(P/consumers/<target>/<consumer>) == the revision read   nobody moved the cursor since we compared with it (0: still absent)
		//   then put P/consumers/<target>/<consumer> = {cursor, committed_at}       the larger cursor
		//   else get P/consumers/<target>/<consumer>                                what won the race, to compare again without another round trip
		txn, err := c.client.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(key), "=", modRev),
		).Then(
			clientv3.OpPut(key, encode(rec)),
		).Else(
			clientv3.OpGet(key),
		).Commit()
		if err != nil {
			return Record{}, fmt.Errorf("commit %s: %w", key, err)
		}
		if txn.Succeeded {
			rec.Revision = txn.Header.Revision
			return rec, nil
		}
		kvs = txn.Responses[0].GetResponseRange().Kvs
	}
	return Record{}, fmt.Errorf("commit %s: %w: lost %d races in a row", key, ErrContended, maxCommitAttempts)
}
