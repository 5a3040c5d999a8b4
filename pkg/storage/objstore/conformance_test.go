package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// The conformance suite: what Tidemark's table and WAL formats assume of every store,
// checked on every driver (mem, file, Azurite, MinIO, fake-gcs-server), beside the
// operations bucket_test.go covers one by one (missing keys, deletes of missing
// keys, overwrites, small ranged reads, key order) and the single-client races of
// putifabsent_test.go.

const (
	// independentClients race on each key: as many as a large cluster's workers
	// committing to one table at once.
	independentClients = 16
	raceRounds         = 20
)

// TestPutIfAbsentRacedByIndependentClients: every commit, seal, claim and fence is a
// put-if-absent that workers race on, each with its own connection to the store.
// Exactly one must win, every loser must get ErrExists (S3 answers a loser 412, or 409
// ConditionalRequestConflict while the winner is in flight; GCS 412; Azure 409), and
// the stored bytes must be the winner's: a loser that silently overwrote, or an
// unclassified answer, would let two merges both believe their commit landed.
func TestPutIfAbsentRacedByIndependentClients(t *testing.T) {
	for _, d := range objstoretest.Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			d.Require(t)
			t.Parallel()
			ctx := context.Background()
			clients := independentBuckets(t, d, independentClients)
			for r := range raceRounds {
				key := fmt.Sprintf("race/_versions/%08d.json", r)
				payload := func(c int) []byte {
					// Large enough that the uploads overlap on the wire.
					return bytes.Repeat(fmt.Appendf(nil, "client %02d round %03d;", c, r), 2048)
				}
				errs := make([]error, len(clients))
				start := make(chan struct{})
				var wg sync.WaitGroup
				for c, b := range clients {
					wg.Go(func() {
						<-start
						errs[c] = b.PutIfAbsent(ctx, key, payload(c))
					})
				}
				close(start)
				wg.Wait()

				winner := -1
				for c, err := range errs {
					switch {
					case err == nil && winner >= 0:
						t.Fatalf("round %d: clients %d and %d both won %s", r, winner, c, key)
					case err == nil:
						winner = c
					case !errors.Is(err, objstore.ErrExists) || errors.Is(err, objstore.ErrUnavailable):
						t.Fatalf("round %d: client %d: %v (want nil or ErrExists alone)", r, c, err)
					}
				}
				if winner < 0 {
					t.Fatalf("round %d: no client won %s; errors %v", r, key, errs)
				}
				// Read back through another client than the winner's.
				got, err := clients[(winner+1)%len(clients)].Get(ctx, key)
				if err != nil {
					t.Fatalf("round %d: read back %s: %v", r, key, err)
				}
				if !bytes.Equal(got, payload(winner)) {
					t.Fatalf("round %d: %s holds %.40q..., not winner %d's bytes", r, key, got, winner)
				}
			}
		})
	}
}

// independentBuckets opens n Buckets over one new, empty bucket of d, each opened
// separately (its own SDK client and connections); on mem, whose opens are separate
// stores, it is one Bucket n times.
func independentBuckets(t *testing.T, d objstoretest.Driver, n int) []*objstore.Bucket {
	t.Helper()
	clients := make([]*objstore.Bucket, n)
	if d.URL == nil {
		b := d.Open(t)
		for i := range clients {
			clients[i] = b
		}
		return clients
	}
	u := d.URL(t)
	for i := range clients {
		b, err := objstore.Open(context.Background(), u)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		t.Cleanup(func() { _ = b.Close() })
		clients[i] = b
	}
	return clients
}

// TestRangedReadsAtEveryPosition: fragments are read by range (a footer at the end,
// row groups in the middle), and a range that reaches past the end (a tail read of
// a fixed size) must return what is there, not fail: S3 answers a range that starts
// at or past the end 416, which must not reach callers as the store failing.
func TestRangedReadsAtEveryPosition(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		const key = "range/fragment.parquet"
		data := []byte("0123456789abcdefghij") // 20 bytes
		if err := b.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name       string
			off, n     int64
			wantOffset int64 // the bytes wanted are data[wantOffset:wantOffset+wantLen]
			wantLen    int64
		}{
			{"start", 0, 4, 0, 4},
			{"middle", 7, 5, 7, 5},
			{"end", 16, 4, 16, 4},
			{"last byte", 19, 1, 19, 1},
			{"to the end", 12, -1, 12, 8},
			{"past the end", 15, 100, 15, 5},
			{"whole", 0, -1, 0, 20},
			{"empty at the start", 0, 0, 0, 0},
			{"starting at the end", 20, -1, 20, 0},
			{"starting at the end, bounded", 20, 10, 20, 0},
			{"starting past the end", 25, 10, 20, 0},
		}
		var rs []objstore.ByteRange
		for _, c := range cases {
			got, err := b.GetRange(ctx, key, c.off, c.n)
			want := data[c.wantOffset : c.wantOffset+c.wantLen]
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: GetRange(%d, %d) = %q, %v; want %q", c.name, c.off, c.n, got, err, want)
			}
			if c.n >= 0 {
				rs = append(rs, objstore.ByteRange{Off: c.off, N: c.n})
			}
		}
		// The same ranges in one call (a key-index lookup's on file://) answer the same.
		got, err := b.GetRanges(ctx, key, rs)
		if err != nil || len(got) != len(rs) {
			t.Fatalf("GetRanges of %d ranges = %d answers, %v", len(rs), len(got), err)
		}
		k := 0
		for _, c := range cases {
			if c.n < 0 {
				continue
			}
			if want := data[c.wantOffset : c.wantOffset+c.wantLen]; !bytes.Equal(got[k], want) {
				t.Errorf("%s: GetRanges' answer for [%d,+%d) = %q; want %q", c.name, c.off, c.n, got[k], want)
			}
			k++
		}
		if _, err := b.GetRange(ctx, "range/missing", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("GetRange of a missing object = %v, want ErrNotFound", err)
		}
		if _, err := b.GetRanges(ctx, "range/missing", rs[:1]); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("GetRanges of a missing object = %v, want ErrNotFound", err)
		}
		if _, err := b.GetRanges(ctx, key, []objstore.ByteRange{{Off: 0, N: -1}}); err == nil {
			t.Errorf("GetRanges of a range of length -1: no error")
		}
	})
}

// TestAPrefixOrAPathThroughAnObjectIsNoObject: on a store a key names an object
// or nothing; on file:// "a/b" of an object "a/b/c" is a directory and "a/b/c/d"
// a path through a file. Every read (get, a bounded get, a ranged get, a stat) of
// either must be ErrNotFound, as on the stores, or a reader that looks before it
// writes (a WAL seal, a version probe) would take a directory for an object.
func TestAPrefixOrAPathThroughAnObjectIsNoObject(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		if err := b.Put(ctx, "dir/sub/object", []byte("bytes")); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"dir/sub", "dir", "dir/sub/object/below"} {
			if _, err := b.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("Get(%q) = %v, want ErrNotFound", key, err)
			}
			if _, err := b.GetMax(ctx, key, 100); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("GetMax(%q) = %v, want ErrNotFound", key, err)
			}
			if _, err := b.GetRange(ctx, key, 0, 2); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("GetRange(%q) = %v, want ErrNotFound", key, err)
			}
			if _, err := b.GetRanges(ctx, key, []objstore.ByteRange{{Off: 0, N: 2}}); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("GetRanges(%q) = %v, want ErrNotFound", key, err)
			}
			if _, err := b.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("Stat(%q) = %v, want ErrNotFound", key, err)
			}
		}
		if got, err := b.GetMax(ctx, "dir/sub/object", 5); err != nil || string(got) != "bytes" {
			t.Errorf("GetMax of 5 bytes at a limit of 5 = %q, %v", got, err)
		}
		if _, err := b.GetMax(ctx, "dir/sub/object", 4); !errors.Is(err, objstore.ErrTooLarge) {
			t.Errorf("GetMax of 5 bytes at a limit of 4 = %v, want ErrTooLarge", err)
		}
	})
}

// TestListingPagesPastAThousandKeys: S3 and GCS list 1,000 keys a page, and a
// delimited listing counts common prefixes against the page too. Garbage collection
// and the scanner list whole stores: a listing that stops at the first page, or
// repeats or drops an entry at a page boundary, would leave objects behind or delete
// live ones.
func TestListingPagesPastAThousandKeys(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		const dirs = 1100
		// d/00000/x ... d/01099/x, and beside every 100th "directory" an object
		// (d/00100.json sorts before d/00100/): 1,111 objects, 1,100 common prefixes.
		// Not an object of the directory's own name: file:// cannot hold both.
		var keys []string
		for i := range dirs {
			keys = append(keys, fmt.Sprintf("d/%05d/x", i))
			if i%100 == 0 {
				keys = append(keys, fmt.Sprintf("d/%05d.json", i))
			}
		}
		putConcurrently(t, b, keys)
		slices.Sort(keys)

		all, err := b.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := objectKeys(all); !slices.Equal(got, keys) {
			t.Fatalf("List: %d keys, want %d (first difference at %d)", len(got), len(keys), firstDifference(got, keys))
		}

		var delimited, want []string
		for _, k := range keys {
			if dir, _, ok := strings.Cut(strings.TrimPrefix(k, "d/"), "/"); ok {
				want = append(want, "d/"+dir+"/")
			} else {
				want = append(want, k)
			}
		}
		want = slices.Compact(want)
		err = b.Walk(ctx, "d/", "/", func(o objstore.Object) error {
			if o.IsDir != strings.HasSuffix(o.Key, "/") {
				t.Errorf("Walk entry %+v: IsDir must match a trailing delimiter", o)
			}
			delimited = append(delimited, o.Key)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(delimited, want) {
			t.Fatalf("Walk(d/, /): %d entries, want %d (first difference at %d)",
				len(delimited), len(want), firstDifference(delimited, want))
		}
		names, err := b.ListDirs(ctx, "d/")
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != dirs || names[0] != "00000" || names[dirs-1] != fmt.Sprintf("%05d", dirs-1) {
			t.Fatalf("ListDirs(d/) = %d names from %q, want %d", len(names), names[:min(3, len(names))], dirs)
		}
	})
}

// TestDelimitedListingsOfNestedAndEmptiedDirectories: a listing with "/" as the
// delimiter names a common prefix once for everything under it however deep, cut
// at the first delimiter after the prefix even when the prefix ends inside a name,
// and never one that holds nothing any more (file:// keeps the directories its
// deletes emptied; a store's WAL lists its shards this way on every refresh).
func TestDelimitedListingsOfNestedAndEmptiedDirectories(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		keys := []string{"n/deep/a/b/c/x", "n/deep/a/y", "n/deep/z", "n/sh-1/g/0001", "n/sh-1/g/0002",
			"n/sh-2/e/0001", "n/sh.json", "n/shallow", "n/gone/e/0001", "n/gone/e/0002", "n/part/only/x", "n/top"}
		putConcurrently(t, b, keys)
		for _, k := range []string{"n/gone/e/0001", "n/gone/e/0002", "n/part/only/x"} {
			if err := b.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		walk := func(prefix string) []string {
			t.Helper()
			var got []string
			err := b.Walk(ctx, prefix, "/", func(o objstore.Object) error {
				if o.IsDir != strings.HasSuffix(o.Key, "/") {
					t.Errorf("Walk(%s) entry %+v: IsDir must match a trailing delimiter", prefix, o)
				}
				got = append(got, o.Key)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		for prefix, want := range map[string][]string{
			"n/":       {"n/deep/", "n/sh-1/", "n/sh-2/", "n/sh.json", "n/shallow", "n/top"},
			"n/sh":     {"n/sh-1/", "n/sh-2/", "n/sh.json", "n/shallow"},
			"n/deep/":  {"n/deep/a/", "n/deep/z"},
			"n/deep/a": {"n/deep/a/"},
			"n/gone/":  nil,
		} {
			if got := walk(prefix); !slices.Equal(got, want) {
				t.Errorf("Walk(%s, /) = %q, want %q", prefix, got, want)
			}
		}
		names, err := b.ListDirs(ctx, "n/")
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"deep", "sh-1", "sh-2"}; !slices.Equal(names, want) {
			t.Errorf("ListDirs(n/) = %q, want %q", names, want)
		}
	})
}

// putConcurrently writes every key (its own name as bytes) from 16 goroutines, so a
// thousand-key listing test takes seconds on a remote store, not minutes.
func putConcurrently(t *testing.T, b *objstore.Bucket, keys []string) {
	t.Helper()
	work := make(chan string)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range work {
				if err := b.Put(context.Background(), k, []byte(k)); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestLargeObjects: sorted fragments run to tens of MiB, which S3 clients upload in
// parts (gocloud's S3 uploader from 16 MiB on) and GCS clients in chunks. A large
// object must round-trip whole, its tail must read by range (footers live there),
// GetMax must refuse it from its size, and a conditional write of a large object must
// keep its put-if-absent guarantee (S3 checks If-None-Match on the multipart
// completion).
func TestLargeObjects(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		const size = 20 << 20
		data := make([]byte, size)
		_, _ = rand.Read(data)
		const key = "large/fragment.parquet"
		if err := b.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
		got, err := b.Get(ctx, key)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get of a %d-byte object: %d bytes, equal %v, %v", size, len(got), bytes.Equal(got, data), err)
		}
		if o, err := b.Stat(ctx, key); err != nil || o.Size != size {
			t.Fatalf("Stat = %+v, %v; want size %d", o, err, size)
		}
		tail, err := b.GetRange(ctx, key, size-(1<<20), 2<<20)
		if err != nil || !bytes.Equal(tail, data[size-(1<<20):]) {
			t.Fatalf("GetRange of the last MiB (asking 2): %d bytes, %v", len(tail), err)
		}
		if _, err := b.GetMax(ctx, key, size-1); !errors.Is(err, objstore.ErrTooLarge) {
			t.Fatalf("GetMax one byte under the size = %v, want ErrTooLarge", err)
		}

		const condKey = "large/_versions/00000001.json"
		if err := b.PutIfAbsent(ctx, condKey, data); err != nil {
			t.Fatalf("PutIfAbsent of a new large object: %v", err)
		}
		other := bytes.Repeat([]byte{'x'}, size)
		if err := b.PutIfAbsent(ctx, condKey, other); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("PutIfAbsent of a large object over an existing one = %v, want ErrExists", err)
		}
		if got, err := b.Get(ctx, condKey); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after the losing large PutIfAbsent: %d bytes, equal to the first %v, %v",
				len(got), bytes.Equal(got, data), err)
		}
	})
}
