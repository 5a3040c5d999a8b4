package store

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// deleteConcurrency bounds parallel object deletes when a store is deleted.
const deleteConcurrency = 16

// Stores opens, caches, creates and deletes the stores of one worker.
type Stores struct {
	cfg     Config
	reg     *registry.Registry
	maxOpen int

	mu    sync.Mutex
	open  map[registry.Target]*handle
	lru   *list.List // of *handle, front = most recently used
	locks map[registry.Target]*nameLock
}

type handle struct {
	s       *Store
	refs    int
	evicted bool
	el      *list.Element
}

type nameLock struct {
	mu   sync.Mutex
	refs int
}

// NewStores returns the store set of a worker: cfg is shared by every handle; at
// most maxOpen handles stay open (least recently used ones are sealed and closed).
func NewStores(cfg Config, maxOpen int) *Stores {
	cfg.setDefaults()
	if maxOpen <= 0 {
		maxOpen = 1024
	}
	return &Stores{cfg: cfg, reg: registry.New(cfg.Bucket), maxOpen: maxOpen,
		open: map[registry.Target]*handle{}, lru: list.New(), locks: map[registry.Target]*nameLock{}}
}

// Registry is the registry the stores are recorded in.
func (ss *Stores) Registry() *registry.Registry { return ss.reg }

// lockName serializes create/open/delete of one store; the returned func unlocks.
func (ss *Stores) lockName(target registry.Target) func() {
	ss.mu.Lock()
	l := ss.locks[target]
	if l == nil {
		l = &nameLock{}
		ss.locks[target] = l
	}
	l.refs++
	ss.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		ss.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(ss.locks, target)
		}
		ss.mu.Unlock()
	}
}

// Release is returned with every Store; call it when done with the handle.
type Release func()

// Create registers a new store and creates its base table. e needs Kind and Name
// (and Schema for a generic store, as canonical spec JSON). A second create of the
// same name fails with registry.ErrExists.
func (ss *Stores) Create(ctx context.Context, e registry.Entry) (registry.Entry, error) {
	unlock := ss.lockName(e.Target())
	defer unlock()
	input, _, err := inputSchema(e)
	if err != nil {
		return registry.Entry{}, err
	}
	s, err := wal.StoreSchema(input)
	if err != nil {
		return registry.Entry{}, err
	}
	if _, err := ss.reg.Get(ctx, e.Kind, e.Name); err == nil {
		return registry.Entry{}, fmt.Errorf("%s store %q: %w", e.Kind, e.Name, registry.ErrExists)
	} else if !errors.Is(err, registry.ErrNotFound) {
		return registry.Entry{}, err
	}
	// A directory of its own (registry.IncarnationDir): what an earlier life of the
	// name left, or a delete of it still removes, is in another directory.
	id, err := uuid.NewV7()
	if err != nil {
		return registry.Entry{}, fmt.Errorf("%s store %q: incarnation id: %w", e.Kind, e.Name, err)
	}
	dir := registry.IncarnationDir(e.Kind, e.Name, strings.ReplaceAll(id.String(), "-", ""))
	// The table first: a crash after it leaves an unregistered directory (garbage);
	// a registry object is never left pointing at nothing.
	if _, err := table.Create(ctx, ss.cfg.Bucket, dir, s, ss.cfg.TableOptions...); err != nil {
		return registry.Entry{}, err
	}
	e.URI = dir
	if e.CreatedAt.IsZero() {
		e.CreatedAt = ss.cfg.Clock.Now().UTC()
	}
	created, err := ss.reg.Create(ctx, e)
	if err != nil {
		// A concurrent create of the name on another worker registered first: our
		// directory is nobody's.
		if derr := ss.deleteData(context.WithoutCancel(ctx), dir); derr != nil {
			ss.cfg.Logger.Warn("removing the table of a create that lost", "dir", dir, "err", derr)
		}
		return registry.Entry{}, err
	}
	return created, nil
}

// Open returns the open handle of a registered store, opening it if needed. It
// fails with registry.ErrNotFound for an unknown store.
func (ss *Stores) Open(ctx context.Context, k registry.Kind, name string) (*Store, Release, error) {
	target := registry.NewTarget(k, name)
	if s, rel := ss.acquire(target); s != nil {
		return s, rel, nil
	}
	unlock := ss.lockName(target)
	defer unlock()
	if s, rel := ss.acquire(target); s != nil {
		return s, rel, nil
	}
	e, err := ss.reg.Get(ctx, k, name)
	if err != nil {
		return nil, nil, err
	}
	tb, err := table.Open(ctx, ss.cfg.Bucket, e.URI, ss.cfg.TableOptions...)
	if err != nil {
		return nil, nil, fmt.Errorf("store %s: %w", target, err)
	}
	s, err := newStore(ctx, &ss.cfg, e, tb)
	if err != nil {
		return nil, nil, err
	}
	ss.mu.Lock()
	h := &handle{s: s, refs: 1}
	h.el = ss.lru.PushFront(h)
	ss.open[target] = h
	victims := ss.evictLocked()
	ss.mu.Unlock()
	ss.closeAll(ctx, victims)
	return s, ss.releaser(h), nil
}

// OpenShard opens a registered store as the writer of another shard than this
// worker's own: an adopter drains the shard of a worker that did not come back
// through it (merge.Merger.Adopt). The handle is this caller's alone, never cached
// or shared with the store's ordinary handle; close it with Store.Close.
func (ss *Stores) OpenShard(ctx context.Context, k registry.Kind, name, shard string) (*Store, error) {
	if err := wal.ValidateShard(shard); err != nil {
		return nil, err
	}
	e, err := ss.reg.Get(ctx, k, name)
	if err != nil {
		return nil, err
	}
	tb, err := table.Open(ctx, ss.cfg.Bucket, e.URI, ss.cfg.TableOptions...)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", e.Target(), err)
	}
	cfg := ss.cfg
	cfg.Shard = shard
	cfg.Logger = cfg.Logger.With("adopted_shard", shard)
	s, err := newStore(ctx, &cfg, e, tb)
	if err != nil {
		return nil, err
	}
	s.adopting = true
	return s, nil
}

func (ss *Stores) acquire(target registry.Target) (*Store, Release) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	h := ss.open[target]
	if h == nil {
		return nil, nil
	}
	if h.s.isDeleted() {
		// Deleted through another worker; the name may have been created again.
		ss.lru.Remove(h.el)
		delete(ss.open, target)
		h.evicted = true
		return nil, nil
	}
	h.refs++
	ss.lru.MoveToFront(h.el)
	return h.s, ss.releaser(h)
}

func (ss *Stores) releaser(h *handle) Release {
	var once sync.Once
	return func() {
		once.Do(func() {
			ss.mu.Lock()
			h.refs--
			closeNow := h.evicted && h.refs == 0
			ss.mu.Unlock()
			if closeNow {
				ss.closeAll(context.Background(), []*Store{h.s})
			}
		})
	}
}

// evictLocked drops least recently used handles beyond maxOpen and returns those
// nobody uses any more, to be closed outside the lock.
func (ss *Stores) evictLocked() []*Store {
	var victims []*Store
	for ss.lru.Len() > ss.maxOpen {
		h := ss.lru.Remove(ss.lru.Back()).(*handle)
		delete(ss.open, h.s.Target())
		h.evicted = true
		if h.refs == 0 {
			victims = append(victims, h.s)
		}
	}
	return victims
}

func (ss *Stores) closeAll(ctx context.Context, stores []*Store) {
	for _, s := range stores {
		if err := s.close(ctx, true); err != nil {
			s.log.Warn("closing evicted store", "err", err)
		}
	}
}

// Resident returns the open stores (for sweepers), each acquired; call every Release.
func (ss *Stores) Resident() ([]*Store, []Release) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	stores := make([]*Store, 0, len(ss.open))
	rels := make([]Release, 0, len(ss.open))
	for _, h := range ss.open {
		h.refs++
		stores = append(stores, h.s)
		rels = append(rels, ss.releaser(h))
	}
	return stores, rels
}

// Delete deletes a store: its handle is fenced (later appends fail), every object of
// its directory is deleted, then its registry object. Registry last: until then a
// retry of the delete finds the store and finishes the job.
func (ss *Stores) Delete(ctx context.Context, k registry.Kind, name string) error {
	target := registry.NewTarget(k, name)
	unlock := ss.lockName(target)
	defer unlock()
	e, err := ss.reg.Get(ctx, k, name)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	h := ss.open[target]
	if h != nil {
		ss.lru.Remove(h.el)
		delete(ss.open, target)
	}
	ss.mu.Unlock()
	if h != nil {
		h.s.markDeleted()
		if err := h.s.close(ctx, false); err != nil {
			h.s.log.Warn("closing deleted store", "err", err)
		}
	}
	if err := ss.deleteData(ctx, e.URI); err != nil {
		return err
	}
	if ss.cfg.Horizon != nil {
		if err := ss.cfg.Horizon.DeleteStore(ctx, target); err != nil {
			return fmt.Errorf("delete %s: %w", target, err)
		}
	}
	return ss.reg.Delete(ctx, k, name)
}

// deleteData deletes every object under dir.
func (ss *Stores) deleteData(ctx context.Context, dir string) error {
	objs, err := ss.cfg.Bucket.List(ctx, dir+"/")
	if err != nil {
		return fmt.Errorf("delete %s: %w", dir, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deleteConcurrency)
	for _, o := range objs {
		g.Go(func() error { return ss.cfg.Bucket.Delete(gctx, o.Key) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("delete %s: %w", dir, err)
	}
	return nil
}

// Close seals and closes every open store (graceful shutdown).
func (ss *Stores) Close(ctx context.Context) error {
	ss.mu.Lock()
	stores := make([]*Store, 0, len(ss.open))
	for t, h := range ss.open {
		stores = append(stores, h.s)
		delete(ss.open, t)
	}
	ss.lru.Init()
	ss.mu.Unlock()
	var errs []error
	for _, s := range stores {
		errs = append(errs, s.close(ctx, true))
	}
	return errors.Join(errs...)
}
