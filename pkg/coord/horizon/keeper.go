package horizon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ErrFenced means a newer writer of the shard wrote its record: this one must not
// number rows (Open) or move the promise (its writes are dropped).
var ErrFenced = errors.New("horizon: a newer writer holds the shard")

const (
	// opTimeout bounds each etcd call.
	opTimeout = 5 * time.Second
	// txnOps bounds the keys of one publishing transaction (etcd refuses more than
	// --max-txn-ops, 128 by default, compares or puts in one).
	txnOps = 100
	// openAttempts bounds Open's retries of a transaction that lost a race.
	openAttempts = 10
)

// Promise is one writer's promise, as a Keeper publishes it.
type Promise struct {
	Target registry.Target
	Shard  string
	Epoch  uint64
	Seq    uint64
}

// held is a shard whose record this Keeper writes.
type held struct {
	epoch   uint64
	modRev  int64  // the key's mod revision as this Keeper last wrote it
	promise uint64 // as last written
}

// Keeper writes the records of the shards this worker's writers hold. It is safe
// for concurrent use.
type Keeper struct {
	client   *clientv3.Client
	keys     keys.Schema
	instance string
	clock    clock.PassiveClock
	log      *slog.Logger

	mu   sync.Mutex
	held map[string]*held // by key
}

// NewKeeper returns the Keeper of worker instance under prefix P.
func NewKeeper(client *clientv3.Client, prefix, instance string, clk clock.PassiveClock, log *slog.Logger) *Keeper {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Keeper{
		client: client, keys: keys.Under(prefix), instance: instance, clock: clk,
		log:  log.With("component", "horizon"),
		held: map[string]*held{},
	}
}

// Open registers the writer of shard at epoch, which has claimed the epoch in the
// shard manifest and numbered no row yet. It marks the shard open (keeping its
// promise) and returns the largest promise of the store, read in the same
// transaction: the writer must observe it before numbering a row (package doc).
// It fails with ErrFenced if a newer epoch wrote the record.
func (k *Keeper) Open(ctx context.Context, target registry.Target, shard string, epoch uint64) (floor uint64, err error) {
	key := k.keys.Horizon(target.String(), shard)
	for range openAttempts {
		cur, rev, err := k.get(ctx, key)
		if err != nil {
			return 0, err
		}
		if rev != 0 && cur.Epoch > epoch {
			return 0, fmt.Errorf("%w: %s at epoch %d, ours %d", ErrFenced, key, cur.Epoch, epoch)
		}
		rec := Record{Epoch: epoch, Promise: cur.Promise, Open: true, Instance: k.instance, At: k.clock.Now().UTC()}
		tctx, cancel := context.WithTimeout(ctx, opTimeout)
		resp, err := k.client.Txn(tctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, rec.encode()), clientv3.OpGet(k.keys.HorizonOf(target.String()), clientv3.WithPrefix())).
			Commit()
		cancel()
		if err != nil {
			return 0, fmt.Errorf("open %s: %w", key, err)
		}
		if !resp.Succeeded {
			continue // another writer's record moved under us: read it again
		}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			r, err := decode(kv.Value)
			if err != nil {
				return 0, fmt.Errorf("open %s: %s: %w", key, kv.Key, err)
			}
			floor = max(floor, r.Promise)
		}
		k.mu.Lock()
		k.held[key] = &held{epoch: epoch, modRev: resp.Header.Revision, promise: cur.Promise}
		k.mu.Unlock()
		return floor, nil
	}
	return 0, fmt.Errorf("open %s: the record kept changing over %d attempts", key, openAttempts)
}

func (k *Keeper) get(ctx context.Context, key string) (Record, int64, error) {
	gctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := k.client.Get(gctx, key)
	if err != nil {
		return Record{}, 0, fmt.Errorf("read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, 0, nil
	}
	r, err := decode(resp.Kvs[0].Value)
	if err != nil {
		return Record{}, 0, fmt.Errorf("%s: %w", key, err)
	}
	return r, resp.Kvs[0].ModRevision, nil
}

// update is one record write of Publish or Close.
type update struct {
	key string
	h   held // as it will be once written
	rec Record
}

// Publish writes the promises that moved past what this Keeper last wrote for
// shards it holds at their epoch; others are skipped (not opened here, or fenced).
// A record a newer writer took is dropped with a warning: that writer publishes
// now.
func (k *Keeper) Publish(ctx context.Context, ps []Promise) error {
	now := k.clock.Now().UTC()
	var ups []update
	k.mu.Lock()
	for _, p := range ps {
		key := k.keys.Horizon(p.Target.String(), p.Shard)
		h := k.held[key]
		if h == nil || h.epoch != p.Epoch || p.Seq <= h.promise {
			continue
		}
		ups = append(ups, update{key: key, h: held{epoch: h.epoch, modRev: h.modRev, promise: p.Seq},
			rec: Record{Epoch: h.epoch, Promise: p.Seq, Open: true, Instance: k.instance, At: now}})
	}
	k.mu.Unlock()
	var errs []error
	for len(ups) > 0 {
		n := min(len(ups), txnOps)
		if err := k.write(ctx, ups[:n]); err != nil {
			errs = append(errs, err)
		}
		ups = ups[n:]
	}
	return errors.Join(errs...)
}

// write writes ups in one transaction, or, if one of them lost its record to a
// newer writer, one by one to find which.
func (k *Keeper) write(ctx context.Context, ups []update) error {
	ok, rev, err := k.txn(ctx, ups)
	if err != nil {
		return err
	}
	if ok {
		k.wrote(ups, rev)
		return nil
	}
	var errs []error
	for i := range ups {
		ok, rev, err := k.txn(ctx, ups[i:i+1])
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			k.wrote(ups[i:i+1], rev)
		default:
			k.log.Warn("a newer writer took this shard's horizon record; no longer publishing it", "key", ups[i].key, "epoch", ups[i].h.epoch)
			k.mu.Lock()
			if h := k.held[ups[i].key]; h != nil && h.epoch == ups[i].h.epoch {
				delete(k.held, ups[i].key)
			}
			k.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

func (k *Keeper) txn(ctx context.Context, ups []update) (ok bool, rev int64, err error) {
	cmps := make([]clientv3.Cmp, len(ups))
	puts := make([]clientv3.Op, len(ups))
	for i, u := range ups {
		cmps[i] = clientv3.Compare(clientv3.ModRevision(u.key), "=", u.h.modRev)
		puts[i] = clientv3.OpPut(u.key, u.rec.encode())
	}
	tctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := k.client.Txn(tctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return false, 0, fmt.Errorf("publish %d horizon records: %w", len(ups), err)
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

// wrote records that ups landed at revision rev (a record closed is no longer held).
func (k *Keeper) wrote(ups []update, rev int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, u := range ups {
		h := k.held[u.key]
		if h == nil || h.epoch != u.h.epoch || h.modRev != u.h.modRev {
			continue // closed or reopened meanwhile
		}
		if !u.rec.Open {
			delete(k.held, u.key)
			continue
		}
		h.modRev, h.promise = rev, u.h.promise
	}
}

// Close records that the writer of shard at epoch closed. With nothing unsealed
// (idle) the shard is marked closed at promise and stops holding the store's
// horizon; otherwise it stays open at its last promise (the next writer seals what
// is left), and only the promise is moved. Either way the Keeper stops holding it.
func (k *Keeper) Close(ctx context.Context, target registry.Target, shard string, epoch, promise uint64, idle bool) error {
	key := k.keys.Horizon(target.String(), shard)
	k.mu.Lock()
	h := k.held[key]
	var u update
	if h != nil && h.epoch == epoch {
		u = update{key: key, h: held{epoch: epoch, modRev: h.modRev, promise: max(promise, h.promise)},
			rec: Record{Epoch: epoch, Promise: max(promise, h.promise), Open: !idle, Instance: k.instance, At: k.clock.Now().UTC()}}
	}
	k.mu.Unlock()
	if h == nil || h.epoch != epoch {
		return nil
	}
	ok, _, err := k.txn(ctx, []update{u})
	k.mu.Lock()
	if cur := k.held[key]; cur == h {
		delete(k.held, key)
	}
	k.mu.Unlock()
	if err != nil {
		return fmt.Errorf("close %s: %w", key, err)
	}
	if !ok {
		k.log.Info("a newer writer took this shard's horizon record before it closed", "key", key, "epoch", epoch)
	}
	return nil
}

// DeleteStore deletes the records of every shard of a deleted store.
func (k *Keeper) DeleteStore(ctx context.Context, target registry.Target) error {
	prefix := k.keys.HorizonOf(target.String())
	k.mu.Lock()
	for key := range k.held {
		if strings.HasPrefix(key, prefix) {
			delete(k.held, key)
		}
	}
	k.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := k.client.Delete(dctx, prefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("delete %s: %w", prefix, err)
	}
	return nil
}

// Run publishes source's promises every interval, and soon after Wake, no more
// often than minSpacing, until ctx is done.
func (k *Keeper) Run(ctx context.Context, source func() []Promise, wake <-chan struct{}, interval, minSpacing time.Duration, clk clock.Clock) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-clk.After(interval):
		case <-wake:
		}
		if err := k.Publish(ctx, source()); err != nil && ctx.Err() == nil {
			k.log.Warn("horizon promises not published; publishing again at the next tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(minSpacing):
		}
	}
}
