package consumers

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// MaxNameLen bounds a consumer name, in bytes.
const MaxNameLen = 128

// ErrInvalidName reports a consumer name ValidateName refuses.
var ErrInvalidName = errclass.New(errclass.Invalid, "invalid consumer name")

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)

// ValidateName checks a consumer name: 1 to MaxNameLen characters of
// [A-Za-z0-9._-], the first not '.' or '-'. The error wraps ErrInvalidName and
// says what is wrong, for a client to read.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w %.32q...: %d characters, at most %d", ErrInvalidName, name, len(name), MaxNameLen)
	case !namePattern.MatchString(name):
		return fmt.Errorf("%w %q: use letters, digits, '_', '.' and '-', not starting with '.' or '-'", ErrInvalidName, name)
	}
	return nil
}

// Record is a consumer's committed cursor in one store.
type Record struct {
	// Target is the store; its text ("<name>", "generic:<name>") is in the key.
	Target   registry.Target
	Consumer string
	// Cursor is the committed position: the consumer has processed every row
	// before it.
	Cursor rowkey.Position
	// CommittedAt is when the cursor was last moved (the committer's clock).
	CommittedAt time.Time
	// Revision is the etcd mod revision of the key: it grows with every write.
	Revision int64
}

// value is a Record as stored: JSON an operator reads with etcdctl.
type value struct {
	Cursor      string    `json:"cursor"`
	CommittedAt time.Time `json:"committed_at"`
}

func encode(r Record) string {
	data, err := json.Marshal(value{Cursor: r.Cursor.Cursor(), CommittedAt: r.CommittedAt.UTC()})
	if err != nil {
		panic(fmt.Sprintf("consumers: encode %s/%s: %v", r.Target, r.Consumer, err)) // only plain fields
	}
	return string(data)
}

// ErrCorrupt reports a stored value that does not decode: a human must look at
// the key it names (delete it to let the consumer start over).
var ErrCorrupt = errclass.New(errclass.Halt, "corrupt consumer record")

func decode(key string, target registry.Target, consumer string, data []byte, rev int64) (Record, error) {
	var v value
	if err := json.Unmarshal(data, &v); err != nil {
		return Record{}, fmt.Errorf("%w %s: %v", ErrCorrupt, key, err)
	}
	pos, err := rowkey.ParseCursor(v.Cursor)
	if err != nil {
		return Record{}, fmt.Errorf("%w %s: %v", ErrCorrupt, key, err)
	}
	return Record{Target: target, Consumer: consumer, Cursor: pos, CommittedAt: v.CommittedAt, Revision: rev}, nil
}
