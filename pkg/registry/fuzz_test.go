package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/objstore"
)

// keysOf lists object keys Tidemark builds from a store name: the registry object,
// and keys under the store's table directory (a manifest, a fragment, a WAL entry).
func keysOf(k Kind, name string) []string {
	dir := Dir(k, name)
	return []string{
		key(k, name),
		dir + "/_versions/00000000000000000001.json",
		dir + "/data/0b5e8c2e-6f43-4f7a-9a55-0d3a2c1f7e21.parquet",
		dir + "/_wal/worker-1/entries/00000000000000000001.arrow",
	}
}

// FuzzParseTarget: ParseTarget never panics; it fails only with ErrInvalidName; an
// accepted target formats back to the same string and its name passes
// ValidateName.
func FuzzParseTarget(f *testing.F) {
	for _, seed := range []string{
		"foo", "generic:foo", "generic_x", "_x", "a.b-c", strings.Repeat("n", 128),
		"", "generic:", "generic:generic:x", "rollout:x", "a/b", "generic:../x", "..", "a..",
		"a__0x41", "_registry", "generic:_stats", strings.Repeat("n", 129), "é", "a\x00", "GENERIC:x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, target string) {
		k, name, err := ParseTarget(target)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ParseTarget(%q) = %v, not ErrInvalidName", target, err)
			}
			return
		}
		if !k.Valid() {
			t.Fatalf("ParseTarget(%q) gave kind %q", target, k)
		}
		if got := Target(k, name); got != target {
			t.Fatalf("ParseTarget(%q) = %s %q, which formats as %q", target, k, name, got)
		}
		if err := ValidateName(name); err != nil {
			t.Fatalf("ParseTarget(%q) accepted name %q that ValidateName refuses: %v", target, name, err)
		}
		if len(target) > len(genericPrefix)+maxNameLen {
			t.Fatalf("accepted a %d-byte target", len(target))
		}
	})
}

// FuzzValidateName: ValidateName never panics and fails only with ErrInvalidName;
// every object key built from an accepted name is one objstore accepts, and the
// registry listing recovers the name from its key. A name that validates but whose
// keys the bucket refuses is a store that can be created and then never read.
func FuzzValidateName(f *testing.F) {
	for _, seed := range []string{
		"a", "A_b-c.d", "_x", "0", strings.Repeat("n", 128), "a..b", "a.", "a-",
		"", "../x", "a/b", "a:b", ".x", "-x", "_registry", "a b", "é", "a\x00",
		"a..", "x__0x2e", ".tidemark-tmp", "x.attrs", "_registry.json",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := ValidateName(name); err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ValidateName(%q) = %v, not ErrInvalidName", name, err)
			}
			return
		}
		if name == "" || len(name) > maxNameLen {
			t.Fatalf("accepted a %d-byte name", len(name))
		}
		for _, k := range Kinds() {
			for _, key := range keysOf(k, name) {
				if err := objstore.ValidateKey(key); err != nil {
					t.Fatalf("name %q validates, but its key %q does not: %v", name, key, err)
				}
			}
			prefix := root + "/" + string(k) + "/"
			got, ok := strings.CutSuffix(strings.TrimPrefix(key(k, name), prefix), ".json")
			if !ok || got != name {
				t.Fatalf("registry key %q lists as %q", key(k, name), got)
			}
			back, parsed, err := ParseTarget(Target(k, name))
			if err != nil || back != k || parsed != name {
				t.Fatalf("Target(%s, %q) parses to %s %q, %v", k, name, back, parsed, err)
			}
		}
	})
}
