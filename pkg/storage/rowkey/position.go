package rowkey

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Position orders the live rows of a store for the change feed: by _seq, then by
// id. It is total over live rows: two live rows never share an id, and rows that
// share a _seq (two shards writing in the same millisecond) are ordered by id. A
// row keeps its Position through seals, merges and compactions, which move rows
// without changing their _seq; an overwritten id gets the Position of its newer
// write.
//
// The zero Position is before every row: a feed from the beginning.
type Position struct {
	Seq uint64
	ID  string
}

// Less reports whether p comes before o.
func (p Position) Less(o Position) bool {
	if p.Seq != o.Seq {
		return p.Seq < o.Seq
	}
	return p.ID < o.ID
}

// Compare returns -1, 0 or +1 as p is before, at or after o (for slices.SortFunc).
func (p Position) Compare(o Position) int {
	switch {
	case p.Less(o):
		return -1
	case o.Less(p):
		return 1
	}
	return 0
}

// After returns the first Position past every row whose _seq is at most seq: the
// cursor of a reader that has seen everything up to a horizon. Ids are never
// empty, so (seq+1, "") is before every row written at seq+1.
func After(seq uint64) Position { return Position{Seq: seq + 1} }

// ErrBadCursor reports a cursor that Tidemark did not write: a client's typo, or a
// cursor of a later format this build does not read.
var ErrBadCursor = errors.New("bad cursor")

// cursorVersion prefixes every cursor so a later format can be told apart.
const cursorVersion = "c1."

// Cursor encodes p for a URL: opaque to clients, versioned, URL-safe
// (base64url of the big-endian _seq and the id's bytes).
func (p Position) Cursor() string {
	buf := make([]byte, 8, 8+len(p.ID))
	binary.BigEndian.PutUint64(buf, p.Seq)
	buf = append(buf, p.ID...)
	return cursorVersion + base64.RawURLEncoding.EncodeToString(buf)
}

// ParseCursor decodes a cursor written by Cursor; "" is the zero Position.
func ParseCursor(s string) (Position, error) {
	if s == "" {
		return Position{}, nil
	}
	body, ok := strings.CutPrefix(s, cursorVersion)
	if !ok {
		return Position{}, fmt.Errorf("%w %q: not a cursor of this feed (want the next_cursor of an earlier answer)", ErrBadCursor, s)
	}
	buf, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(buf) < 8 {
		return Position{}, fmt.Errorf("%w %q: malformed", ErrBadCursor, s)
	}
	return Position{Seq: binary.BigEndian.Uint64(buf), ID: string(buf[8:])}, nil
}
