package schema

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrInvalid is what every error about client input (a row, a spec, a filter) is:
// errors.Is(err, ErrInvalid) tells an API handler to answer 400 with err's message.
var ErrInvalid = errclass.New(errclass.Invalid, "invalid input")

// Error is an input error located in a request: which row, which column, and where
// inside the column's value. It matches ErrInvalid under errors.Is.
type Error struct {
	// Row is the 0-based index of the row in the request, or -1 when the error is
	// not about one row (a schema spec, a filter).
	Row int
	// Column is the column (or filter key) the error is about, "" for the row as a
	// whole.
	Column string
	// Path locates the offending value inside the column's value: "[3]" for a list
	// element, ".weight" for a struct field, "" for the value itself.
	Path string
	// Reason says what is wrong, e.g. `expected an integer, got number 1.5`.
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Row >= 0 {
		b.WriteString("row ")
		b.WriteString(strconv.Itoa(e.Row))
	}
	if e.Column != "" {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString("column ")
		b.WriteString(strconv.Quote(e.Column))
		if e.Path != "" {
			b.WriteString(" at ")
			b.WriteString(e.Path)
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true, and gives the error ErrInvalid's
// class (errclass walks Unwrap, not Is methods).
func (e *Error) Unwrap() error { return ErrInvalid }

// valueError is an error inside one value; the caller that knows the row and the
// column turns it into an *Error. Path segments are prepended on the way out of
// nested values.
type valueError struct {
	path   string
	reason string
}

func (e *valueError) Error() string { return e.path + ": " + e.reason }

func invalidValue(format string, args ...any) error {
	return &valueError{reason: fmt.Sprintf(format, args...)}
}

// atPath prefixes a nested value's error with seg ("[3]", ".weight").
func atPath(err error, seg string) error {
	var ve *valueError
	if errors.As(err, &ve) {
		ve.path = seg + ve.path
		return ve
	}
	return err
}

// locate turns a value error into an *Error for row and column. An *Error is
// located already and is returned as it is.
func locate(err error, row int, column string) *Error {
	var located *Error
	if errors.As(err, &located) {
		return located
	}
	var ve *valueError
	if errors.As(err, &ve) {
		return &Error{Row: row, Column: column, Path: ve.path, Reason: ve.reason}
	}
	return &Error{Row: row, Column: column, Reason: err.Error()}
}
