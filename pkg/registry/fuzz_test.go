package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
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

// FuzzStoreNames tries every input both as a target string and as a store name.
//
// As a target: ParseTarget never panics and fails only with ErrInvalidName; an
// accepted target formats back to the same string and its name passes ValidateName.
//
// As a name: ValidateName never panics and fails only with ErrInvalidName; every
// object key built from an accepted name is one objstore accepts, and the registry
// listing recovers the name from its key. A name that validates but whose keys the
// bucket refuses is a store that can be created and then never written.
func FuzzStoreNames(f *testing.F) {
	for _, seed := range []string{
		"foo", "generic:foo", "generic_x", "_x", "a.b-c", strings.Repeat("n", 128), "a..b", "a.", "a-",
		"", "generic:", "generic:generic:x", "rollout:x", "a/b", "generic:../x", "..", "a..", "../x", "a:b",
		".x", "-x", "a b", "a__0x41", "x__0x2e", "_registry", "generic:_stats", ".tidemark-tmp", "x.attrs",
		"_registry.json", strings.Repeat("n", 129), "é", "a\x00", "GENERIC:x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkTarget(t, s)
		checkName(t, s)
	})
}

func checkTarget(t *testing.T, target string) {
	parsed, err := ParseTarget(target)
	k, name := parsed.Kind, parsed.Name
	if err != nil {
		if !errors.Is(err, ErrInvalidName) {
			t.Fatalf("ParseTarget(%q) = %v, not ErrInvalidName", target, err)
		}
		return
	}
	if !k.Valid() {
		t.Fatalf("ParseTarget(%q) gave kind %q", target, k)
	}
	if got := parsed.String(); got != target {
		t.Fatalf("ParseTarget(%q) = %s %q, which formats as %q", target, k, name, got)
	}
	if err := ValidateName(name); err != nil {
		t.Fatalf("ParseTarget(%q) accepted name %q that ValidateName refuses: %v", target, name, err)
	}
	if len(target) > len(genericPrefix)+maxNameLen {
		t.Fatalf("accepted a %d-byte target", len(target))
	}
}

func checkName(t *testing.T, name string) {
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
		back, err := ParseTarget(NewTarget(k, name).String())
		if err != nil || back != NewTarget(k, name) {
			t.Fatalf("Target(%s, %q) parses to %s %q, %v", k, name, back.Kind, back.Name, err)
		}
	}
}

// FuzzDecodeRegistryEntry: a registry object decodes or fails with ErrCorrupt naming its key,
// never a panic; an accepted entry names the store of its key, and re-encodes (as
// Create writes it) to an object that decodes equal.
func FuzzDecodeRegistryEntry(f *testing.F) {
	created := time.Date(2026, 11, 29, 19, 45, 0, 123456789, time.UTC)
	for _, e := range []Entry{
		{Name: "demo", Kind: KindRollout, URI: "rollout/demo", CreatedAt: created},
		{Name: "demo", Kind: KindGeneric, URI: "generic/demo", CreatedAt: created,
			Schema: json.RawMessage(`{"columns":[["id",{"type":"string"}]]}`), SealOnAdd: true},
	} {
		data, err := json.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(e.Kind), data)
	}
	f.Add("generic", []byte(`{"name":"demo","kind":"generic","schema":[1,2`))
	f.Add("rollout", []byte(`{"name":"other","kind":"rollout"}`))
	f.Add("rollout", []byte(`{"name":"demo","kind":"rollout","created_at":"10000-01-01T00:00:00Z"}`))
	f.Add("rollout", []byte(`null`))
	f.Fuzz(func(t *testing.T, kind string, data []byte) {
		k := Kind(kind)
		if !k.Valid() {
			k = KindRollout
		}
		e, err := decodeEntry(k, "demo", data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key(k, "demo")) {
				t.Fatalf("error %v is not ErrCorrupt naming %s", err, key(k, "demo"))
			}
			return
		}
		if e.Name != "demo" || e.Kind != k || e.Target() != NewTarget(k, "demo") {
			t.Fatalf("accepted %+v from the key of %s store demo", e, k)
		}
		enc, err := json.Marshal(e)
		if err != nil {
			return // e.g. a created_at beyond year 9999: Create never writes one
		}
		again, err := decodeEntry(k, "demo", enc)
		if err != nil {
			t.Fatalf("re-encoded entry %s does not decode: %v", enc, err)
		}
		enc2, _ := json.Marshal(again)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("entry changes across encode/decode:\n%s\n%s", enc, enc2)
		}
	})
}
