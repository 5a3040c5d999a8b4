package store

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/data/rowfilter"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// CompileFilter compiles a filter of the store's rows from its text, as the
// store's kind takes it: a generic store's SQL predicate (package rowfilter,
// against the store's columns; an empty predicate is an error), a rollout store's
// JSON object of equalities (schema.ParseRolloutFilters; empty matches every
// row). It returns what ListOptions, ChangesOptions and ScanOptions take: the
// mask function and the columns it reads, nil and nil for a filter that keeps
// every row. A filter that does not parse, names a column the store lacks or
// compares mismatched types is an Invalid error naming the problem.
func (s *Store) CompileFilter(text string) (mask func(arrow.RecordBatch) ([]bool, error), columns []string, err error) {
	if s.entry.Kind == registry.KindRollout {
		f, err := schema.ParseRolloutFilters(text)
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("filters: %w", err)
		case f.Empty():
			return nil, nil, nil
		}
		return f.Mask, f.Columns(), nil
	}
	f, err := rowfilter.Compile(text, s.input)
	if err != nil {
		// rowfilter's errors are worded for the client already ("filter: ...").
		return nil, nil, errclass.Wrap(errclass.Invalid, err)
	}
	return f.Mask, f.Columns(), nil
}
