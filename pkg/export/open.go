package export

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// The format's types, under the names callers of this package use.
type (
	// Spec is what a caller asks an export for (exportfmt.Spec).
	Spec = exportfmt.Spec
	// Manifest is an export's _manifest.json (exportfmt.Manifest).
	Manifest = exportfmt.Manifest
	// Progress is how far a running export got (exportfmt.Progress).
	Progress = exportfmt.Progress
)

// Open opens the scan an export of spec reads from st: the store at
// spec.Version (merged rows only), or now (merged and pending rows) when it is 0,
// with spec's columns and filter. A spec that Validate refuses, a column the
// store lacks, a filter that does not compile and a version the store does not
// hold are Invalid errors naming the problem.
func Open(ctx context.Context, st *store.Store, spec Spec) (*store.Scan, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	var opts store.ScanOptions
	if len(spec.Columns) > 0 {
		cols := st.ColumnsExcept(nil)
		for _, c := range spec.Columns {
			if !slices.Contains(cols, c) {
				return nil, fmt.Errorf("%w: column %q: store %s has no such column", exportfmt.ErrInvalidSpec, c, st.Target())
			}
		}
		opts.Columns = spec.Columns
	}
	if spec.Filter != "" {
		var err error
		if opts.Filter, opts.FilterColumns, err = st.CompileFilter(spec.Filter); err != nil {
			return nil, fmt.Errorf("store %s: %w", st.Target(), err)
		}
	}
	if spec.Version == 0 {
		return st.OpenScan(ctx, opts)
	}
	view, err := st.At(ctx, spec.Version)
	if err != nil {
		return nil, err
	}
	return view.OpenScan(ctx, opts)
}

// OpenDestination opens the bucket spec.Destination names, with throttled
// requests resent as every Tidemark bucket has them (objstore.WithRetry). A
// destination Validate refuses is an Invalid error; one that does not open
// (a missing directory that cannot be created, a driver's unknown parameter) is
// Invalid too: the same spec fails the same way.
func OpenDestination(ctx context.Context, spec Spec) (*objstore.Bucket, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	b, err := objstore.Open(ctx, spec.Destination)
	if err != nil {
		return nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("export destination: %w", err))
	}
	return objstore.WithRetry(b, objstore.ThrottleBackoff, clock.RealClock{}, objstore.DefaultThrottleRetry), nil
}
