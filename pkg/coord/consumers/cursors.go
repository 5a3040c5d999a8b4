package consumers

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ErrNotFound means the consumer never committed a cursor in the store (or the
// store's consumers were deleted).
var ErrNotFound = errclass.New(errclass.Gone, "consumer has no committed cursor")

// Cursors reads and writes the committed cursors under P/consumers/. It holds no
// state besides its location and clock, and is safe for concurrent use.
type Cursors struct {
	client *clientv3.Client
	keys   keys.Schema
	clock  clock.PassiveClock
}

// Option configures Cursors.
type Option func(*Cursors)

// WithClock stamps committed_at from clk (the real clock by default).
func WithClock(clk clock.PassiveClock) Option { return func(c *Cursors) { c.clock = clk } }

// New returns the cursors under prefix P (keys.DefaultPrefix when empty).
func New(client *clientv3.Client, prefix string, opts ...Option) *Cursors {
	c := &Cursors{client: client, keys: keys.Under(prefix), clock: clock.RealClock{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Get returns the consumer's committed cursor in target, or ErrNotFound.
func (c *Cursors) Get(ctx context.Context, target registry.Target, consumer string) (Record, error) {
	if err := ValidateName(consumer); err != nil {
		return Record{}, err
	}
	key := c.keys.Consumer(target.String(), consumer)
	resp, err := c.client.Get(ctx, key)
	if err != nil {
		return Record{}, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, fmt.Errorf("consumer %q of store %s: %w", consumer, target, ErrNotFound)
	}
	kv := resp.Kvs[0]
	return decode(key, target, consumer, kv.Value, kv.ModRevision)
}

// List returns the consumers of target in name order, at most limit of them
// (0: all); more says whether there are others. A record that does not decode
// is returned as an error naming its key.
func (c *Cursors) List(ctx context.Context, target registry.Target, limit int) (records []Record, more bool, err error) {
	prefix := c.keys.ConsumersOf(target.String())
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := c.client.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, false, fmt.Errorf("list %s: %w", prefix, err)
	}
	records, err = c.decodeAll(target, prefix, resp.Kvs)
	return records, resp.More, err
}

// ListMany returns the consumers of each of targets, at most limit in all (0:
// no bound), reading up to txnOps stores per etcd round trip: a caller with many
// stores (the lag metric) pays a round trip per txnOps stores, not per store.
// more says whether the limit left consumers out.
func (c *Cursors) ListMany(ctx context.Context, targets []registry.Target, limit int) (byTarget map[registry.Target][]Record, more bool, err error) {
	byTarget = map[registry.Target][]Record{}
	n := 0
	for start := 0; start < len(targets); start += txnOps {
		batch := targets[start:min(start+txnOps, len(targets))]
		ops := make([]clientv3.Op, len(batch))
		for i, t := range batch {
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if limit > 0 {
				opts = append(opts, clientv3.WithLimit(int64(limit-n)))
			}
			ops[i] = clientv3.OpGet(c.keys.ConsumersOf(t.String()), opts...)
		}
		resp, err := c.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, false, fmt.Errorf("list %s...: %w", c.keys.ConsumersPrefix(), err)
		}
		for i, r := range resp.Responses {
			rr := r.GetResponseRange()
			recs, err := c.decodeAll(batch[i], c.keys.ConsumersOf(batch[i].String()), rr.Kvs)
			if err != nil {
				return nil, false, err
			}
			cut := limit > 0 && n+len(recs) > limit // the batch's gets were bounded together
			if cut {
				recs = recs[:limit-n]
			}
			if len(recs) > 0 {
				byTarget[batch[i]] = recs
			}
			n += len(recs)
			if limit > 0 && n >= limit {
				return byTarget, cut || rr.More || start+i+1 < len(targets), nil
			}
		}
	}
	return byTarget, false, nil
}

// txnOps bounds the operations of one transaction, under etcd's default
// --max-txn-ops (128).
const txnOps = 64

func (c *Cursors) decodeAll(target registry.Target, prefix string, kvs []*mvccpb.KeyValue) ([]Record, error) {
	out := make([]Record, 0, len(kvs))
	for _, kv := range kvs {
		key := string(kv.Key)
		r, err := decode(key, target, strings.TrimPrefix(key, prefix), kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// DeleteStore deletes every consumer of target and returns how many there were:
// the store is deleted, and a store created again under its name starts with none.
func (c *Cursors) DeleteStore(ctx context.Context, target registry.Target) (int64, error) {
	prefix := c.keys.ConsumersOf(target.String())
	resp, err := c.client.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("delete %s: %w", prefix, err)
	}
	return resp.Deleted, nil
}
