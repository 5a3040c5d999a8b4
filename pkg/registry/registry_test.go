package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "A_b-c.d", "_x", "0", strings.Repeat("n", 128)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want ok", ok, err)
		}
	}
	for _, bad := range []string{"", "../x", "a/b", "a:b", ".x", "-x", "_registry", "_stats", "a b", "é", strings.Repeat("n", 129), "a\x00"} {
		if err := ValidateName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string][2]string{
		"foo":        {"rollout", "foo"},
		"generic:gs": {"generic", "gs"},
		"generic_x":  {"rollout", "generic_x"},
		"_x":         {"rollout", "_x"},
	} {
		k, n, err := ParseTarget(in)
		if err != nil || string(k) != want[0] || n != want[1] {
			t.Errorf("ParseTarget(%q) = %s %s %v, want %v", in, k, n, err, want)
		}
		if Target(k, n) != in {
			t.Errorf("Target(%s, %s) = %q, want %q", k, n, Target(k, n), in)
		}
	}
	for _, bad := range []string{"", "generic:", "a/b", "generic:../x", "rollout:x", "generic:a:b"} {
		if _, _, err := ParseTarget(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseTarget(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestCreateGetListDelete(t *testing.T) {
	ctx := context.Background()
	r := New(objstoretest.Mem(t))
	if _, err := r.Create(ctx, Entry{Name: "r1", Kind: KindRollout}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, Entry{Name: "g1", Kind: KindGeneric, Schema: []byte(`{"columns":[]}`), SealOnAdd: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, Entry{Name: "r1", Kind: KindRollout}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v, want ErrExists", err)
	}
	// Kinds are separate namespaces.
	if _, err := r.Create(ctx, Entry{Name: "r1", Kind: KindGeneric}); err != nil {
		t.Fatalf("same name, other kind: %v", err)
	}
	g, err := r.Get(ctx, KindGeneric, "g1")
	if err != nil || !g.SealOnAdd || string(g.Schema) != `{"columns":[]}` || g.URI != "generic/g1" || g.Target() != "generic:g1" {
		t.Fatalf("get g1 = %+v, %v", g, err)
	}
	names, err := r.Names(ctx, KindRollout)
	if err != nil || fmt.Sprint(names) != "[r1]" {
		t.Fatalf("rollout names = %v, %v", names, err)
	}
	entries, err := r.List(ctx, KindGeneric)
	if err != nil || len(entries) != 2 {
		t.Fatalf("generic entries = %v, %v", entries, err)
	}
	if err := r.Delete(ctx, KindRollout, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, KindRollout, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if err := r.Delete(ctx, KindRollout, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := r.Get(ctx, KindRollout, "../x"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("get of a bad name: %v", err)
	}
}

// Workers race to create the same store; exactly one must win on every driver.
func TestConcurrentCreateHasOneWinner(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		r := New(open(t))
		var wins, exists int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := r.Create(ctx, Entry{Name: "s", Kind: KindRollout})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, ErrExists):
					exists++
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || exists != 7 {
			t.Fatalf("%d wins and %d ErrExists, want 1 and 7", wins, exists)
		}
	})
}
