package objstore_test

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestFileURLForms(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	t.Chdir(tmp)
	for _, c := range []struct{ url, dir string }{
		{"file://" + filepath.ToSlash(tmp) + "/abs", filepath.Join(tmp, "abs")},
		{"file://localhost" + filepath.ToSlash(tmp) + "/host", filepath.Join(tmp, "host")},
		{"file://./rel/dir", filepath.Join(tmp, "rel", "dir")},
		{"file:opaque/dir", filepath.Join(tmp, "opaque", "dir")},
		{"file://.", tmp},
		{"file://" + filepath.ToSlash(tmp) + "/pre?prefix=p/", filepath.Join(tmp, "pre", "p")},
	} {
		b, err := objstore.Open(ctx, c.url)
		if err != nil {
			t.Errorf("Open(%s): %v", c.url, err)
			continue
		}
		if err := b.Put(ctx, "k", []byte("v")); err != nil {
			t.Errorf("%s: %v", c.url, err)
		}
		if got, err := os.ReadFile(filepath.Join(c.dir, "k")); err != nil || string(got) != "v" {
			t.Errorf("%s: object not at %s: %q, %v", c.url, c.dir, got, err)
		}
		_ = b.Close()
	}
	for _, bad := range []string{
		"file://data/x",          // a host: a mistyped file:///data/x?
		"file://",                // no path
		"file:///x?prefix=p",     // prefix must name a directory
		"file:///x?prefix=../p/", // prefix must be a valid key
		"file:///x?metadata=skip",
	} {
		if b, err := objstore.Open(ctx, bad); err == nil {
			_ = b.Close()
			t.Errorf("Open(%s) succeeded, want an error", bad)
		}
	}
}

// TestFileStagingIsInvisible: staged writes live in <root>/.tidemark-tmp, which must
// never show up as objects (a store listing would see a store named ".tidemark-tmp"),
// must be empty after writes, and no gocloud .attrs sidecars may appear.
func TestFileStagingIsInvisible(t *testing.T) {
	ctx := context.Background()
	dataURL := objstoretest.FileURL(t)
	u, _ := url.Parse(dataURL)
	root := filepath.FromSlash(u.Path)
	b, err := objstore.Open(ctx, dataURL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Put(ctx, "s/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfAbsent(ctx, "s/b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfAbsent(ctx, "s/b", []byte("b")); !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}
	staging := filepath.Join(root, ".tidemark-tmp")
	if left, err := os.ReadDir(staging); err != nil || len(left) != 0 {
		t.Errorf("staging directory after writes: %v, %v; want it empty", left, err)
	}
	// A crashed writer's leftover must not be listed either.
	if err := os.WriteFile(filepath.Join(staging, "123-crashed"), []byte("partial"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, delim := range []string{"", "/", "-"} {
		var keys []string
		if err := b.Walk(ctx, "", delim, func(o objstore.Object) error { keys = append(keys, o.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		want := []string{"s/a", "s/b"}
		if delim == "/" {
			want = []string{"s/"}
		}
		if !slices.Equal(keys, want) {
			t.Errorf("Walk(\"\", %q) = %q, want %q", delim, keys, want)
		}
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if strings.HasSuffix(p, ".attrs") {
			t.Errorf("sidecar file %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFileOpenRemovesOnlyStaleStagedFiles(t *testing.T) {
	dataURL := objstoretest.FileURL(t)
	u, _ := url.Parse(dataURL)
	staging := filepath.Join(filepath.FromSlash(u.Path), ".tidemark-tmp")
	if err := os.MkdirAll(staging, 0o777); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(staging, "1-stale"), filepath.Join(staging, "2-fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	b, err := objstore.Open(context.Background(), dataURL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale staged file still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh staged file (maybe a write in flight) was removed: %v", err)
	}
}

// TestFileDeleteOfADirectoryIsNotFound: on object stores "a" and "a/b" are unrelated
// keys, so deleting the missing object "a" must succeed and leave "a/b" alone.
func TestFileDeleteOfADirectoryIsNotFound(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.File(t)
	if err := b.Put(ctx, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "a"); err != nil {
		t.Errorf("Delete(a) with a/b present = %v, want nil", err)
	}
	if _, err := b.Get(ctx, "a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get(a) = %v, want ErrNotFound", err)
	}
	if ok, err := b.Exists(ctx, "a/b"); !ok || err != nil {
		t.Errorf("a/b after Delete(a): %v, %v", ok, err)
	}
}

// TestOpenAzblobURLWithEnvironmentCredentials opens Azurite the way production does:
// DATA_URL=azblob://… with AZURE_STORAGE_ACCOUNT/KEY in the environment. gocloud reads
// those once per process, on the first azblob:// open; this is the only test here that
// opens that scheme (objstoretest uses its own), so setting them here is enough.
func TestOpenAzblobURLWithEnvironmentCredentials(t *testing.T) {
	dataURL, env := objstoretest.AzuriteURL(t)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ctx := context.Background()
	b, err := objstore.Open(ctx, dataURL+"&prefix=tidemark/")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.PutIfAbsent(ctx, "_registry/rollout/s.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfAbsent(ctx, "_registry/rollout/s.json", []byte("{}")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second PutIfAbsent = %v, want ErrExists", err)
	}
	if dirs, err := b.ListDirs(ctx, "_registry/"); err != nil || !slices.Equal(dirs, []string{"rollout"}) {
		t.Fatalf("ListDirs = %q, %v", dirs, err)
	}
}

func TestFileBucketThroughASymlinkedDirectory(t *testing.T) {
	ctx := context.Background()
	real, link := filepath.Join(t.TempDir(), "real"), filepath.Join(t.TempDir(), "link")
	if err := os.Mkdir(real, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
	b, err := objstore.Open(ctx, "file://"+filepath.ToSlash(link))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Put(ctx, "x/y", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.List(ctx, ""); err != nil || !slices.Equal(objectKeys(got), []string{"x/y"}) {
		t.Errorf("List through a symlinked root = %q, %v; want [x/y]", objectKeys(got), err)
	}
}

// A reader reads one object's ranges in one GetRanges call only where a request
// is a few system calls (Local): file://, also behind the retries and behind a
// Faults that only counts; a store, or a Faults that makes requests wait (the
// benchmarks' stand-in for one), has its ranges sent at once instead. A Faults
// still counts a request per range of a GetRanges call, as a store would serve
// them.
func TestOnlyLocalFilesAreLocal(t *testing.T) {
	ctx := context.Background()
	file, err := objstore.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mem, err := objstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	f := objstore.NewFaults(rand.NewPCG(1, 2))
	counted := objstore.WithFaults(file, f)
	for _, c := range []struct {
		name string
		b    *objstore.Bucket
		want bool
	}{
		{"file://", file, true},
		{"file:// with retries", objstore.WithRetry(file, objstore.ThrottleBackoff, clock.RealClock{}, time.Second), true},
		{"file:// behind a Faults that counts", counted, true},
		{"mem://", mem, false},
	} {
		if got := c.b.Local(); got != c.want {
			t.Errorf("%s: Local() = %v, want %v", c.name, got, c.want)
		}
	}
	if err := counted.Put(ctx, "k", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	f.ResetCounters()
	got, err := counted.GetRanges(ctx, "k", []objstore.ByteRange{{Off: 1, N: 2}, {Off: 8, N: 5}})
	if err != nil || len(got) != 2 || string(got[0]) != "12" || string(got[1]) != "89" {
		t.Fatalf("GetRanges = %q, %v", got, err)
	}
	if n := f.Requests(objstore.OpGetRange); n != 2 {
		t.Errorf("a GetRanges of 2 ranges counted %d ranged reads, want 2", n)
	}
	f.SetLatency(time.Millisecond, 0)
	if counted.Local() {
		t.Errorf("file:// behind a Faults with latency: Local() = true, want false")
	}
}
