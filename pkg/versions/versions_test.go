package versions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/objstore"
	"github.com/tidemark-io/tidemark/pkg/objstore/objstoretest"
)

func TestEmptyLogHasNoLatest(t *testing.T) {
	l := New(objstoretest.Mem(t), "t/_versions", "t/_latest_version")
	if _, err := l.Latest(context.Background(), 0); !errors.Is(err, ErrEmpty) {
		t.Fatalf("got %v, want ErrEmpty", err)
	}
}

func TestLatestFollowsCreatesWithStaleMissingOrBogusHint(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	l := New(b, "t/_versions", "t/_latest_version")
	for v := uint64(1); v <= 5; v++ {
		if _, err := l.Create(ctx, v, []byte(fmt.Sprint(v))); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string) {
		t.Helper()
		if v, err := l.Latest(ctx, 0); err != nil || v != 5 {
			t.Fatalf("%s: latest = %d, %v; want 5", what, v, err)
		}
	}
	check("fresh hint")
	if err := b.Put(ctx, "t/_latest_version", []byte("2\n")); err != nil {
		t.Fatal(err)
	}
	check("stale hint")
	if err := b.Put(ctx, "t/_latest_version", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	check("bogus hint")
	if err := b.Delete(ctx, "t/_latest_version"); err != nil {
		t.Fatal(err)
	}
	check("no hint")
	if vs, err := l.List(ctx); err != nil || len(vs) != 5 {
		t.Fatalf("list = %v, %v", vs, err)
	}
}

func TestConcurrentCreatesOfOneVersionHaveOneWinner(t *testing.T) {
	ctx := context.Background()
	l := New(objstoretest.Mem(t), "t/_versions", "t/_latest_version")
	var wins, losses int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := l.Create(ctx, 1, []byte(fmt.Sprint(i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, objstore.ErrExists):
				losses++
			default:
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if wins != 1 || losses != 7 {
		t.Fatalf("%d wins, %d losses; want 1 and 7", wins, losses)
	}
}
