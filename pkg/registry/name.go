package registry

import (
	"fmt"
	"strings"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrInvalidName means a store name or target string that Tidemark refuses.
var ErrInvalidName = errclass.New(errclass.Invalid, "invalid store name")

// Kind is a store kind.
type Kind string

// The store kinds.
const (
	KindRollout Kind = "rollout"
	KindGeneric Kind = "generic"
)

// Kinds lists every kind, in a fixed order.
func Kinds() []Kind { return []Kind{KindRollout, KindGeneric} }

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindRollout || k == KindGeneric }

const maxNameLen = 128

// reserved names would collide with top-level directories of DATA_URL.
var reserved = map[string]bool{"_registry": true, "_stats": true}

// ValidateName checks a store name: 1-128 characters of [A-Za-z0-9._-], the first
// one not '.' or '-', not ending in "..", without "__0x", and not reserved. Names
// become object keys, so this is also what keeps "../x" and friends out of the
// bucket; the last two rules are objstore.ValidateKey's (a name ending in ".." puts
// "../" in every key under the store, and fileblob reads "__0x" as an escape), so a
// name that validates never makes a store whose objects cannot be written.
func ValidateName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidName, name, why) }
	switch {
	case name == "":
		return bad("empty")
	case len(name) > maxNameLen:
		return bad(fmt.Sprintf("%d characters, at most %d", len(name), maxNameLen))
	case reserved[name]:
		return bad("reserved")
	case strings.HasSuffix(name, ".."):
		return bad(`must not end in ".."`)
	case strings.Contains(name, "__0x"):
		return bad(`must not contain "__0x"`)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
		if i == 0 && !alnum {
			return bad("must start with a letter, digit or '_'")
		}
		if !alnum && c != '.' && c != '-' {
			return bad(fmt.Sprintf("character %q not allowed (use A-Z a-z 0-9 . _ -)", c))
		}
	}
	return nil
}

// genericPrefix marks a generic store in a target's text.
const genericPrefix = "generic:"

// Target names a store unambiguously across kinds: in tasks, stats rows, etcd keys
// and the APIs. Its text (String) is "<name>" for a rollout store and
// "generic:<name>" for a generic one; a name cannot contain ':', so the text parses
// back to the same target.
//
// Text is parsed once where it enters (a route's path, a gRPC request, an etcd key
// or record, a command's argument) and the value is passed everywhere else. A
// Target made by ParseTarget or UnmarshalText holds a valid name; NewTarget trusts
// its caller (a registry entry, a name validated already). The zero Target is no
// store: its text is empty, and it is how a filter says "any".
type Target struct {
	Kind Kind
	Name string
}

// NewTarget returns the target of the store of kind k named name, without
// validating them: for code that holds a store's kind and name already.
func NewTarget(k Kind, name string) Target { return Target{Kind: k, Name: name} }

// ParseTarget parses a target's text, validating the name: "<name>" is a rollout
// store, "generic:<name>" a generic store.
func ParseTarget(text string) (Target, error) {
	t := Target{Kind: KindRollout, Name: text}
	if rest, ok := strings.CutPrefix(text, genericPrefix); ok {
		t = Target{Kind: KindGeneric, Name: rest}
	}
	if err := t.Validate(); err != nil {
		return Target{}, err
	}
	return t, nil
}

// Validate checks a target made without parsing (NewTarget, a literal) as
// ParseTarget checks its text, with the same error: an ErrInvalidName naming the
// target's text. Code that writes a target into etcd keys validates it first.
func (t Target) Validate() error {
	if err := ValidateName(t.Name); err != nil {
		return fmt.Errorf("target %q: %w", t.String(), err)
	}
	if !t.Kind.Valid() {
		return fmt.Errorf("target %q: %w: unknown kind %q", t.String(), ErrInvalidName, t.Kind)
	}
	return nil
}

// MustParseTarget is ParseTarget of a text known to be valid (a constant, a
// test's literal); it panics on an invalid one.
func MustParseTarget(text string) Target {
	t, err := ParseTarget(text)
	if err != nil {
		panic(err)
	}
	return t
}

// String is the target's text: "<name>" or "generic:<name>"; empty for the zero
// Target. Etcd keys and the wire carry this text.
func (t Target) String() string {
	if t.Kind == KindGeneric {
		return genericPrefix + t.Name
	}
	return t.Name
}

// Compare orders targets by their text, the order of the etcd keys they name.
func (t Target) Compare(o Target) int { return strings.Compare(t.String(), o.String()) }

// IsZero reports whether t is the zero Target, no store.
func (t Target) IsZero() bool { return t == Target{} }

// MarshalText is the target's text, so a JSON record holding a Target stores the
// same string it stored when targets were strings.
func (t Target) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText parses a target's text as ParseTarget does: a record holding an
// invalid target does not decode.
func (t *Target) UnmarshalText(text []byte) error {
	parsed, err := ParseTarget(string(text))
	if err != nil {
		return err
	}
	*t = parsed
	return nil
}

// Dir is the table directory of a store registered before stores had incarnations
// (and the default of an Entry created without a URI): <kind>/<name>.
func Dir(k Kind, name string) string { return string(k) + "/" + name }

// IncarnationDir is the table directory of one life of a store,
// <kind>/<name>@<incarnation>: a store deleted and created again under its name
// lives in a new directory, so nothing of its earlier life (a delete still
// removing files, a stale handle still appending, a losing concurrent create) can
// land in it or remove from it. "@" cannot appear in a name, so two stores' dirs
// never share a prefix. The registry entry's URI names the directory; readers never
// derive it from the name.
func IncarnationDir(k Kind, name, incarnation string) string {
	return Dir(k, name) + "@" + incarnation
}
