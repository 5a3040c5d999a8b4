package cache

import (
	"fmt"
	"sync"
	"testing"
)

func TestLRUStaysWithinBudgetAndEvictsLeastRecentlyUsed(t *testing.T) {
	c := New[string, int](100)
	c.Add("a", 1, 40)
	c.Add("b", 2, 40)
	if _, ok := c.Get("a"); !ok { // a is now more recent than b
		t.Fatal("a missing")
	}
	c.Add("c", 3, 40) // must evict b, the least recently used
	if _, ok := c.Get("b"); ok {
		t.Fatal("b should have been evicted")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.Get(k); !ok {
			t.Fatalf("%s should be resident", k)
		}
	}
	if s := c.Stats(); s.Bytes != 80 || s.Entries != 2 {
		t.Fatalf("stats = %+v, want 80 bytes in 2 entries", s)
	}
}

func TestLRUDoesNotKeepValuesLargerThanBudget(t *testing.T) {
	c := New[string, int](10)
	c.Add("small", 1, 5)
	c.Add("huge", 2, 11)
	if _, ok := c.Get("huge"); ok {
		t.Fatal("an entry larger than the budget was kept")
	}
	if _, ok := c.Get("small"); !ok {
		t.Fatal("adding an oversized entry evicted a resident one")
	}
}

func TestLRUReplaceUpdatesSize(t *testing.T) {
	c := New[string, int](100)
	c.Add("a", 1, 60)
	c.Add("a", 2, 30)
	if v, _ := c.Get("a"); v != 2 {
		t.Fatalf("got %d, want the replacement value 2", v)
	}
	if s := c.Stats(); s.Bytes != 30 {
		t.Fatalf("bytes = %d after replace, want 30", s.Bytes)
	}
}

func TestLRUZeroBudgetCachesNothing(t *testing.T) {
	c := New[string, int](0)
	c.Add("a", 1, 1)
	if _, ok := c.Get("a"); ok {
		t.Fatal("zero budget must disable caching")
	}
}

func TestLRUConcurrentUseKeepsBudget(t *testing.T) {
	c := New[int, []byte](1000)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := (g*31 + i) % 97
				if v, ok := c.Get(k); ok && len(v) != 10+k%7 {
					panic(fmt.Sprintf("key %d has a value of length %d", k, len(v)))
				}
				c.Add(k, make([]byte, 10+k%7), int64(10+k%7))
			}
		}(g)
	}
	wg.Wait()
	if s := c.Stats(); s.Bytes > 1000 {
		t.Fatalf("resident bytes %d exceed budget 1000", s.Bytes)
	}
}
