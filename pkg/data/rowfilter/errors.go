package rowfilter

import (
	"errors"
	"fmt"
)

// ErrInvalid matches every error Compile returns: the predicate, not the store,
// is wrong, so a server answers 400.
var ErrInvalid = errors.New("invalid filter")

// The kinds of invalid filter; each *Error matches exactly one of them.
var (
	// ErrSyntax: the text is not a SQL expression.
	ErrSyntax = errors.New("syntax error")
	// ErrUnsupported: valid SQL this package does not evaluate (a function, a
	// subquery, arithmetic, a second statement, ORDER BY, ...).
	ErrUnsupported = errors.New("unsupported")
	// ErrUnknownColumn: a column the store's schema does not have.
	ErrUnknownColumn = errors.New("unknown column")
	// ErrType: operands whose types cannot meet, or a constant that is not a
	// value of the column's type.
	ErrType = errors.New("type mismatch")
	// ErrTooComplex: longer than MaxBytes or nested deeper than MaxDepth.
	ErrTooComplex = errors.New("too complex")
)

// Error is a compile error: Kind is one of the sentinels above, Column the
// column it concerns (if any), Msg the explanation a client reads.
type Error struct {
	Kind   error
	Column string
	Msg    string
}

func (e *Error) Error() string { return "filter: " + e.Msg }

// Is makes errors.Is match ErrInvalid and the error's Kind.
func (e *Error) Is(target error) bool { return target == ErrInvalid || target == e.Kind }

func errorf(kind error, column, format string, args ...any) *Error {
	return &Error{Kind: kind, Column: column, Msg: fmt.Sprintf(format, args...)}
}
