package mergesvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// storeCheckTimeout bounds StoreGone's registry read.
const storeCheckTimeout = 10 * time.Second

// StoreGone returns err, the failure of an operation on the store kind/name, as an
// error wrapping store.ErrDeleted if the store is no longer registered when it
// failed: a store deleted (by any worker) under a read, an add or a merge leaves
// that operation with whatever it tripped over - an object that vanished between
// a listing and its read, a closed writer, a shard manifest gone from under a seal
// - and its caller must hear "deleted" (404, NOT_FOUND, a skipped merge task), not
// a conflict to retry or an internal error.
//
// Only the classes such a wreck can take are checked (Conflict, Halt, Internal):
// the registry is the one place that says whether a store exists, and reading it
// only on those failures costs the paths that succeed nothing. A store that is
// registered again (deleted and created again meanwhile) keeps err: retrying the
// operation runs it against the new store.
func StoreGone(ctx context.Context, reg *registry.Registry, kind registry.Kind, name string, err error) error {
	switch errclass.Of(err) {
	case errclass.Conflict, errclass.Halt, errclass.Internal:
	default:
		return err
	}
	// Its own bound: the answer is owed even to a request whose context ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCheckTimeout)
	defer cancel()
	if _, gerr := reg.Get(ctx, kind, name); !errors.Is(gerr, registry.ErrNotFound) {
		return err
	}
	// err is kept as text only: its class (a conflict, a "corrupt" half-deleted
	// object) is not what happened.
	return fmt.Errorf("%s store %q: %w while the request ran (%v)", kind, name, store.ErrDeleted, err)
}
