package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

var (
	// ErrExists means a store of that kind and name is already registered.
	ErrExists = errclass.New(errclass.Exists, "store already exists")
	// ErrNotFound means no store of that kind and name is registered.
	ErrNotFound = errclass.New(errclass.Gone, "store not found")
	// ErrCorrupt means a registry object that does not decode, or that names another
	// store than its key. A human must look at the named object.
	ErrCorrupt = errclass.New(errclass.Halt, "corrupt registry object")
)

const root = "_registry"

// maxEntryBytes bounds a registry object, read and written. The largest part is a
// generic store's schema spec (at most 1024 columns, a few hundred bytes each); a
// bigger object is damage and is refused before it is read into memory.
const maxEntryBytes = 4 << 20

// Entry is one registered store.
type Entry struct {
	Name      string    `json:"name"`
	Kind      Kind      `json:"kind"`
	URI       string    `json:"uri"` // the table directory within DATA_URL
	CreatedAt time.Time `json:"created_at"`
	// Schema is a generic store's schema spec, as the client gave it (canonicalized
	// by the caller); empty for rollout stores.
	Schema json.RawMessage `json:"schema,omitempty"`
	// SealOnAdd makes every add to a generic store seal before it is acknowledged.
	SealOnAdd bool `json:"seal_on_add,omitempty"`
	// MaxConsumerLag, when positive, refuses adds to the store while one of its
	// named consumers lags behind the change feed's horizon by more than it (the
	// worker's add backpressure); zero (absent in objects written before it) is off.
	MaxConsumerLag Duration `json:"max_consumer_lag,omitempty"`
}

// Target is the entry's target.
func (e Entry) Target() Target { return NewTarget(e.Kind, e.Name) }

// Registry reads and writes registry objects. It holds no state besides its bucket.
type Registry struct {
	bucket *objstore.Bucket
}

// New returns the registry stored in bucket.
func New(bucket *objstore.Bucket) *Registry { return &Registry{bucket: bucket} }

func key(k Kind, name string) string { return root + "/" + string(k) + "/" + name + ".json" }

func check(k Kind, name string) error {
	if !k.Valid() {
		return fmt.Errorf("unknown store kind %q", k)
	}
	return ValidateName(name)
}

// Create registers e (Name and Kind set; URI and CreatedAt are filled in when empty)
// with put-if-absent. A second create of the same kind and name fails with ErrExists,
// whatever its contents; a create whose own write landed unanswered does not.
func (r *Registry) Create(ctx context.Context, e Entry) (Entry, error) {
	if err := check(e.Kind, e.Name); err != nil {
		return Entry{}, err
	}
	if e.MaxConsumerLag < 0 {
		return Entry{}, fmt.Errorf("register %s: %w: max_consumer_lag %s is negative", e.Target(), ErrInvalidOption, time.Duration(e.MaxConsumerLag))
	}
	if e.URI == "" {
		e.URI = Dir(e.Kind, e.Name)
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = time.Now().UTC()
	}
	data, err := json.Marshal(e)
	if err != nil {
		return Entry{}, fmt.Errorf("register %s: %w", e.Target(), err)
	}
	if len(data) > maxEntryBytes {
		return Entry{}, fmt.Errorf("register %s: registry object of %d bytes, at most %d: %w", e.Target(), len(data), maxEntryBytes, objstore.ErrTooLarge)
	}
	if err := r.bucket.PutIfAbsent(ctx, key(e.Kind, e.Name), data); err != nil {
		if errors.Is(err, objstore.ErrExists) {
			return r.ownOrExists(ctx, e, data)
		}
		return Entry{}, fmt.Errorf("register %s: %w", e.Target(), err)
	}
	return e, nil
}

// ownOrExists settles a create answered "exists": the object may be this create's
// own, written by a request whose answer was lost and which the storage SDK sent
// again, to be answered 412 as if another had won (S3, GCS). Its bytes tell: they
// carry this create's creation time to the nanosecond.
func (r *Registry) ownOrExists(ctx context.Context, e Entry, data []byte) (Entry, error) {
	got, err := r.bucket.GetMax(ctx, key(e.Kind, e.Name), maxEntryBytes)
	if err == nil && bytes.Equal(got, data) {
		return e, nil
	}
	return Entry{}, fmt.Errorf("%s store %q: %w", e.Kind, e.Name, ErrExists)
}

// Get returns the registered store, or ErrNotFound.
func (r *Registry) Get(ctx context.Context, k Kind, name string) (Entry, error) {
	if err := check(k, name); err != nil {
		return Entry{}, err
	}
	data, err := r.bucket.GetMax(ctx, key(k, name), maxEntryBytes)
	if errors.Is(err, objstore.ErrNotFound) {
		return Entry{}, fmt.Errorf("%s store %q: %w", k, name, ErrNotFound)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("registry: %w", err)
	}
	return decodeEntry(k, name, data)
}

// decodeEntry parses the registry object of store k/name.
func decodeEntry(k Kind, name string, data []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, fmt.Errorf("registry object %s: %w: %v", key(k, name), ErrCorrupt, err)
	}
	if e.Name != name || e.Kind != k {
		return Entry{}, fmt.Errorf("registry object %s: %w: names %s store %q", key(k, name), ErrCorrupt, e.Kind, e.Name)
	}
	return e, nil
}

// Names lists the registered names of kind k in order, with one listing and no
// reads: what the scanner needs for thousands of stores.
func (r *Registry) Names(ctx context.Context, k Kind) ([]string, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("unknown store kind %q", k)
	}
	prefix := root + "/" + string(k) + "/"
	var names []string
	err := r.bucket.Walk(ctx, prefix, "/", func(o objstore.Object) error {
		if o.IsDir {
			return nil
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ".json")
		if ok && ValidateName(name) == nil {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return names, nil
}

// List returns the entries of kind k (one read per store).
func (r *Registry) List(ctx context.Context, k Kind) ([]Entry, error) {
	names, err := r.Names(ctx, k)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		e, err := r.Get(ctx, k, n)
		if errors.Is(err, ErrNotFound) {
			continue // deleted between the listing and the read
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Delete removes the registry object. Callers delete the store's data first: once
// the object is gone the store does not exist, and its name can be created again.
func (r *Registry) Delete(ctx context.Context, k Kind, name string) error {
	if err := check(k, name); err != nil {
		return err
	}
	if ok, err := r.bucket.Exists(ctx, key(k, name)); err != nil {
		return fmt.Errorf("registry: %w", err)
	} else if !ok {
		return fmt.Errorf("%s store %q: %w", k, name, ErrNotFound)
	}
	if err := r.bucket.Delete(ctx, key(k, name)); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}
