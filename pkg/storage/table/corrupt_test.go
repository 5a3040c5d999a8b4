package table

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// Every damaged object must surface as an error that names it; none may panic.

func TestCorruptManifestIsAnErrorNamingTheObject(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b)
	mustAppend(t, tb, row{"a", 1, 1})
	key := tb.versionKey(2)
	data, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"truncated":        data[:len(data)/2],
		"empty":            {},
		"not json":         []byte("\x00\x01garbage"),
		"bad schema":       []byte(strings.Replace(string(data), `"schema":"`, `"schema":"AAAA`, 1)),
		"version mismatch": []byte(strings.Replace(string(data), `"version":2,`, `"version":7,`, 1)),
	} {
		t.Run(name, func(t *testing.T) {
			if err := b.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			if err := b.Put(ctx, key, bad); err != nil {
				t.Fatal(err)
			}
			_, err := Open(ctx, b, "rollout/t")
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) {
				t.Fatalf("got %v, want ErrCorrupt naming %s", err, key)
			}
		})
	}
}

func TestManifestFromANewerFormatIsRefused(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	createTable(t, b)
	key := "rollout/t/_versions/00000000000000000002.json"
	if err := b.Put(ctx, key, []byte(`{"format_version": 99, "version": 2}`)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, b, "rollout/t")
	if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "99") || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("got %v, want ErrUnsupportedFormat naming version 99", err)
	}
}

func TestCorruptFragmentIsAnErrorNotAPanic(t *testing.T) {
	ctx := context.Background()
	for name, damage := range map[string]func([]byte) []byte{
		"truncated": func(d []byte) []byte { return d[:len(d)-10] },
		"zeroed":    func(d []byte) []byte { return make([]byte, len(d)) },
		"flipped mid": func(d []byte) []byte {
			c := append([]byte(nil), d...)
			c[len(c)/2] ^= 0xff
			c[len(c)/3] ^= 0xff
			return c
		},
		"footer": func(d []byte) []byte { c := append([]byte(nil), d...); c[len(c)-12] ^= 0x55; return c },
	} {
		t.Run(name, func(t *testing.T) {
			b := memBucket(t)
			tb := createTable(t, b)
			m := mustAppend(t, tb, row{"a", 1, 1}, row{"b", 1, 2})
			key := tb.key(m.Fragments[0].Path)
			data, err := b.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Put(ctx, key, damage(data)); err != nil {
				t.Fatal(err)
			}
			fresh, err := Open(ctx, b, "rollout/t") // nothing cached
			if err != nil {
				t.Fatal(err)
			}
			err = fresh.Scan(ctx, fresh.Latest(), ScanOptions{}, func(arrow.RecordBatch, string) error { return nil })
			if err == nil {
				// Some bit flips land in compressed values that still decode; the
				// zeroed and truncated cases must always fail.
				if name == "truncated" || name == "zeroed" {
					t.Fatal("scan of a damaged fragment succeeded")
				}
				return
			}
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("error %v does not name %s", err, key)
			}
		})
	}
}

func TestCorruptDeletionVectorAndBloomAreErrors(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b)
	mustAppend(t, tb, row{"a", 1, 1}, row{"b", 1, 1})
	m := mustAppend(t, tb, row{"a", 2, 2})
	dv := tb.key(m.Fragments[0].Deletions.Path)
	bl := tb.key(m.Fragments[1].Bloom)
	for _, key := range []string{dv, bl} {
		data, err := b.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)-1] ^= 0x01
		if err := b.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	fresh, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	err = fresh.Scan(ctx, fresh.Latest(), ScanOptions{}, func(arrow.RecordBatch, string) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), dv) {
		t.Fatalf("scan: %v, want ErrCorrupt naming %s", err, dv)
	}
	_, _, err = fresh.Get(ctx, fresh.Latest(), "a")
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get: %v, want ErrCorrupt", err)
	}
}
