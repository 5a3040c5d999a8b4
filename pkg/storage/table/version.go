package table

import (
	"context"
	"fmt"
)

// HasVersion reports whether manifest version v is stored: written, and not yet
// pruned by retention (Cleanup). A reader holding manifest v reads its files only
// while this holds; once it does not, garbage collection may delete them.
func (t *Table) HasVersion(ctx context.Context, v uint64) (bool, error) {
	ok, err := t.versions.Exists(ctx, v)
	if err != nil {
		return false, fmt.Errorf("table %s version %d: %w", t.dir, v, err)
	}
	return ok, nil
}
