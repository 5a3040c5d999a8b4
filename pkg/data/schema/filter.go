package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// rolloutFilterKeys are the keys a rollout list may filter on: the string columns
// compare with a JSON string, include_in_training with a JSON boolean.
var rolloutFilterKeys = []string{
	RolloutIDColumn, ProblemIDColumn, "dataset", "policy_version",
	RoleColumn, ContentTypeColumn, "artifact_type", "include_in_training",
}

// Filters is a conjunction of equality tests on columns. The zero value matches
// every row. A row whose filtered column is null matches no filter on it.
type Filters struct {
	terms []filterTerm
}

type filterTerm struct {
	column string
	str    string
	b      bool
	isBool bool
}

// ParseRolloutFilters parses the filters query parameter of a rollout list, a
// JSON object such as {"dataset":"gsm8k","include_in_training":true}. An empty
// string means no filters. A key outside RolloutFilterKeys or a value of the
// wrong JSON type is an *Error naming the key (errors.Is(err, ErrInvalid)).
func ParseRolloutFilters(text string) (Filters, error) {
	if strings.TrimSpace(text) == "" {
		return Filters{}, nil
	}
	raw := []byte(text)
	if !json.Valid(raw) {
		return Filters{}, &Error{Row: -1, Reason: "filters are not valid JSON"}
	}
	raw = trimSpace(raw)
	if raw[0] != '{' {
		return Filters{}, &Error{Row: -1, Reason: "filters must be a JSON object, got " + describe(raw)}
	}
	var f Filters
	seen := map[string]bool{}
	err := eachMember(raw, func(k string, v []byte) error {
		i, ok := rolloutCodec.index[k]
		if !ok || !isRolloutFilter(k) {
			return &Error{Row: -1, Column: k, Reason: "unknown filter key (allowed: " + strings.Join(rolloutFilterKeys, ", ") + ")"}
		}
		if seen[k] {
			return &Error{Row: -1, Column: k, Reason: "filter key given twice"}
		}
		seen[k] = true
		t := filterTerm{column: k}
		switch rolloutSchema.Field(i).Type.ID() {
		case arrow.BOOL:
			if v[0] != 't' && v[0] != 'f' {
				return &Error{Row: -1, Column: k, Reason: "filter value must be a boolean, got " + describe(v)}
			}
			t.isBool, t.b = true, v[0] == 't'
		default:
			if v[0] != '"' {
				return &Error{Row: -1, Column: k, Reason: "filter value must be a string, got " + describe(v)}
			}
			s, err := unquote(v)
			if err != nil {
				return locate(err, -1, k)
			}
			t.str = s
		}
		f.terms = append(f.terms, t)
		return nil
	})
	if err != nil {
		return Filters{}, locate(err, -1, "")
	}
	sort.Slice(f.terms, func(a, b int) bool { return f.terms[a].column < f.terms[b].column })
	return f, nil
}

// RolloutFilterKeys returns the keys ParseRolloutFilters accepts.
func RolloutFilterKeys() []string { return append([]string(nil), rolloutFilterKeys...) }

func isRolloutFilter(k string) bool {
	for _, c := range rolloutFilterKeys {
		if c == k {
			return true
		}
	}
	return false
}

// Empty reports whether f matches every row.
func (f Filters) Empty() bool { return len(f.terms) == 0 }

// Columns are the columns Mask reads, each once, in term order: a list reads
// these (with the row key) to filter, not every column of every row.
func (f Filters) Columns() []string {
	var cols []string
	for _, t := range f.terms {
		if !slices.Contains(cols, t.column) {
			cols = append(cols, t.column)
		}
	}
	return cols
}

// String describes f for logs, e.g. `dataset="gsm8k" include_in_training=true`.
func (f Filters) String() string {
	parts := make([]string, len(f.terms))
	for i, t := range f.terms {
		if t.isBool {
			parts[i] = fmt.Sprintf("%s=%v", t.column, t.b)
		} else {
			parts[i] = fmt.Sprintf("%s=%q", t.column, t.str)
		}
	}
	return strings.Join(parts, " ")
}

// Mask evaluates f on every row of rec. rec must have every filtered column, with
// its Rollout type (batches may carry other columns, _seq included).
func (f Filters) Mask(rec arrow.RecordBatch) ([]bool, error) {
	cols, err := f.bind(rec)
	if err != nil {
		return nil, err
	}
	mask := make([]bool, rec.NumRows())
	for row := range mask {
		mask[row] = f.match(cols, row)
	}
	return mask, nil
}

// Match reports whether row of rec passes f; a batch that lacks a filtered
// column (or has it with another type) matches nothing.
func (f Filters) Match(rec arrow.RecordBatch, row int) bool {
	cols, err := f.bind(rec)
	return err == nil && f.match(cols, row)
}

// bind finds the filtered columns of rec, in term order.
func (f Filters) bind(rec arrow.RecordBatch) ([]arrow.Array, error) {
	cols := make([]arrow.Array, len(f.terms))
	for i, t := range f.terms {
		idx := rec.Schema().FieldIndices(t.column)
		if len(idx) != 1 {
			return nil, fmt.Errorf("filter on %q: batch has %d such columns", t.column, len(idx))
		}
		c := rec.Column(idx[0])
		_, isStr := c.(*array.String)
		_, isBool := c.(*array.Boolean)
		if (t.isBool && !isBool) || (!t.isBool && !isStr) {
			return nil, fmt.Errorf("filter on %q: column has type %s", t.column, c.DataType())
		}
		cols[i] = c
	}
	return cols, nil
}

func (f Filters) match(cols []arrow.Array, row int) bool {
	for i, t := range f.terms {
		c := cols[i]
		if c.IsNull(row) {
			return false
		}
		if t.isBool {
			if c.(*array.Boolean).Value(row) != t.b {
				return false
			}
		} else if c.(*array.String).Value(row) != t.str {
			return false
		}
	}
	return true
}
