package objstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestBucketOperationsOnEveryDriver(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)

		mustPut := func(key, data string) {
			t.Helper()
			if err := b.Put(ctx, key, []byte(data)); err != nil {
				t.Fatal(err)
			}
		}

		t.Run("missing objects wrap ErrNotFound and name the key", func(t *testing.T) {
			const key = "missing/object.json"
			_, err := b.Get(ctx, key)
			wantNotFound(t, "Get", key, err)
			_, err = b.GetRange(ctx, key, 0, 1)
			wantNotFound(t, "GetRange", key, err)
			_, err = b.Stat(ctx, key)
			wantNotFound(t, "Stat", key, err)
			if ok, err := b.Exists(ctx, key); ok || err != nil {
				t.Errorf("Exists(%q) = %v, %v; want false, nil", key, ok, err)
			}
			if err := b.Delete(ctx, key); err != nil {
				t.Errorf("Delete of a missing object = %v, want nil", err)
			}
		})

		t.Run("put get stat overwrite", func(t *testing.T) {
			mustPut("obj/a", "hello")
			got, err := b.Get(ctx, "obj/a")
			if err != nil || string(got) != "hello" {
				t.Fatalf("Get = %q, %v; want hello", got, err)
			}
			o, err := b.Stat(ctx, "obj/a")
			if err != nil || o.Size != 5 || o.Key != "obj/a" || o.ModTime.IsZero() || o.IsDir {
				t.Fatalf("Stat = %+v, %v", o, err)
			}
			mustPut("obj/a", "replaced, longer")
			if got, _ := b.Get(ctx, "obj/a"); string(got) != "replaced, longer" {
				t.Fatalf("after overwrite Get = %q", got)
			}
			mustPut("obj/empty", "")
			if got, err := b.Get(ctx, "obj/empty"); err != nil || len(got) != 0 {
				t.Fatalf("empty object: Get = %q, %v", got, err)
			}
			if ok, err := b.Exists(ctx, "obj/empty"); !ok || err != nil {
				t.Fatalf("Exists(empty object) = %v, %v", ok, err)
			}
		})

		t.Run("GetRange", func(t *testing.T) {
			mustPut("range/x", "0123456789")
			for _, c := range []struct {
				off, n int64
				want   string
			}{{0, 3, "012"}, {4, 2, "45"}, {7, -1, "789"}, {8, 100, "89"}, {0, 0, ""}, {0, -1, "0123456789"}} {
				got, err := b.GetRange(ctx, "range/x", c.off, c.n)
				if err != nil || string(got) != c.want {
					t.Errorf("GetRange(%d, %d) = %q, %v; want %q", c.off, c.n, got, err, c.want)
				}
			}
		})

		t.Run("PutIfAbsent", func(t *testing.T) {
			if err := b.PutIfAbsent(ctx, "pia/k", []byte("first")); err != nil {
				t.Fatal(err)
			}
			err := b.PutIfAbsent(ctx, "pia/k", []byte("second"))
			if !errors.Is(err, objstore.ErrExists) || !strings.Contains(err.Error(), "pia/k") {
				t.Fatalf("second PutIfAbsent = %v, want ErrExists naming the key", err)
			}
			if got, _ := b.Get(ctx, "pia/k"); string(got) != "first" {
				t.Fatalf("after losing PutIfAbsent Get = %q, want first", got)
			}
		})

		t.Run("delete", func(t *testing.T) {
			mustPut("del/x", "x")
			if err := b.Delete(ctx, "del/x"); err != nil {
				t.Fatal(err)
			}
			_, err := b.Get(ctx, "del/x")
			wantNotFound(t, "Get after Delete", "del/x", err)
			if err := b.Delete(ctx, "del/x"); err != nil {
				t.Fatalf("second Delete = %v, want nil", err)
			}
			if err := b.PutIfAbsent(ctx, "del/x", []byte("again")); err != nil {
				t.Fatalf("PutIfAbsent after Delete = %v", err)
			}
		})

		t.Run("invalid keys are refused before any request", func(t *testing.T) {
			for _, err := range []error{
				b.Put(ctx, "a//b", nil),
				b.PutIfAbsent(ctx, "../x", nil),
				b.Delete(ctx, "/abs"),
			} {
				if !errors.Is(err, objstore.ErrInvalidKey) {
					t.Errorf("got %v, want ErrInvalidKey", err)
				}
			}
			if _, err := b.Get(ctx, "x.attrs"); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Get(x.attrs) = %v, want ErrInvalidKey", err)
			}
		})
	})
}

// TestListingIsInKeyOrder uses keys whose key order differs from a directory walk's
// order ("a-c" < "a/b" because '-' < '/', but a walk visits directory "a" first).
func TestListingIsInKeyOrder(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		keys := []string{"t/a/b", "t/a-c", "t/a0", "t/a/c/d", "t/b", "t/a.x/y", "u/z", "s"}
		for _, k := range keys {
			if err := b.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}

		all, err := b.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(keys)
		slices.Sort(want)
		if got := objectKeys(all); !slices.Equal(got, want) {
			t.Errorf("List(\"\") = %q, want %q", got, want)
		}
		for _, o := range all {
			if o.Size != int64(len(o.Key)) || o.IsDir {
				t.Errorf("listed %+v: want size %d, not a dir", o, len(o.Key))
			}
		}

		under, err := b.List(ctx, "t/a")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := objectKeys(under), []string{"t/a-c", "t/a.x/y", "t/a/b", "t/a/c/d", "t/a0"}; !slices.Equal(got, want) {
			t.Errorf("List(t/a) = %q, want %q", got, want)
		}

		var delimited []string
		err = b.Walk(ctx, "t/", "/", func(o objstore.Object) error {
			if o.IsDir != strings.HasSuffix(o.Key, "/") {
				t.Errorf("Walk entry %+v: IsDir must match a trailing delimiter", o)
			}
			delimited = append(delimited, o.Key)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"t/a-c", "t/a.x/", "t/a/", "t/a0", "t/b"}; !slices.Equal(delimited, want) {
			t.Errorf("Walk(t/, /) = %q, want %q", delimited, want)
		}

		dirs, err := b.ListDirs(ctx, "t/")
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a.x", "a"}; !slices.Equal(dirs, want) {
			t.Errorf("ListDirs(t/) = %q, want %q", dirs, want)
		}
		top, err := b.ListDirs(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"t", "u"}; !slices.Equal(top, want) {
			t.Errorf("ListDirs(\"\") = %q, want %q", top, want)
		}

		if none, err := b.List(ctx, "nothing/here/"); err != nil || len(none) != 0 {
			t.Errorf("List of an empty prefix = %v, %v; want nothing", none, err)
		}

		stop := errors.New("stop")
		n := 0
		err = b.Walk(ctx, "", "", func(objstore.Object) error { n++; return stop })
		if err != stop || n != 1 {
			t.Errorf("Walk whose fn fails = %v after %d calls; want fn's error as is after 1", err, n)
		}
	})
}

func TestPrefixedBucketsAreIsolated(t *testing.T) {
	ctx := context.Background()
	for _, base := range []string{"mem://", objstoretest.FileURL(t)} {
		sep := "?"
		root, err := objstore.Open(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		p, err := objstore.Open(ctx, base+sep+"prefix=p/q/")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Put(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(base, "mem") {
			// Two mem:// opens are two stores; only the prefixed view can be checked.
			if got, _ := p.List(ctx, ""); !slices.Equal(objectKeys(got), []string{"k"}) {
				t.Errorf("%s: prefixed List = %q, want [k]", base, objectKeys(got))
			}
			continue
		}
		if got, err := root.Get(ctx, "p/q/k"); err != nil || string(got) != "v" {
			t.Errorf("%s: root view of p/q/k = %q, %v", base, got, err)
		}
		if err := root.Put(ctx, "p/other", []byte("x")); err != nil {
			t.Fatal(err)
		}
		got, err := p.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(objectKeys(got), []string{"k"}) {
			t.Errorf("%s: prefixed List = %q, want [k]", base, objectKeys(got))
		}
		if dirs, _ := root.ListDirs(ctx, ""); !slices.Equal(dirs, []string{"p"}) {
			t.Errorf("%s: root ListDirs = %q, want [p]", base, dirs)
		}
	}
}

func wantNotFound(t *testing.T, what, key string, err error) {
	t.Helper()
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s(%q) = %v, want an error wrapping ErrNotFound", what, key, err)
		return
	}
	if !strings.Contains(err.Error(), key) {
		t.Errorf("%s(%q) error %q does not name the key", what, key, err)
	}
}

func objectKeys(objs []objstore.Object) []string {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}
