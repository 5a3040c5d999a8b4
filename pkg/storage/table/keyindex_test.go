package table

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// buildIndex writes n rows with ids id(i) (increasing), _seq i*7 and shard i%shards.
func buildIndex(t testing.TB, n, shards int, id func(int) string) ([]byte, int64, *indexTop) {
	t.Helper()
	w := newIndexWriter()
	for i := range n {
		if err := w.add(id(i), uint64(i*7), fmt.Sprint("s", i%shards)); err != nil {
			t.Fatal(err)
		}
	}
	return w.finish([]indexGroup{{rows: int64(n), off: 4, n: 1000}})
}

// Every row of an index reads back through its top and blocks, found by id and by
// offset, whatever the block boundaries, and ids that are not there are not found.
func TestKeyIndexRoundTrip(t *testing.T) {
	for _, c := range []struct {
		n, shards int
		id        func(int) string
	}{
		{1, 1, func(i int) string { return "only" }},
		{5, 1, func(i int) string { return fmt.Sprint("a", i) }},
		{20_000, 3, func(i int) string { return fmt.Sprintf("id-%08d", i) }}, // shared prefixes, many blocks
		{3000, 2, func(i int) string { return strings.Repeat("x", 300) + fmt.Sprintf("%06d", i) }},
		{2, 1, func(i int) string { return []string{"", "\xff"}[i] }}, // the empty id and a byte above ASCII
	} {
		t.Run(fmt.Sprint(c.n, "x", c.shards), func(t *testing.T) {
			data, topOff, written := buildIndex(t, c.n, c.shards, c.id)
			top, err := decodeIndexTop("k", data[topOff:], topOff, int64(len(data)), int64(c.n))
			if err != nil {
				t.Fatal(err)
			}
			if len(top.blocks) != len(written.blocks) || top.rows != int64(c.n) || len(top.shards) != c.shards {
				t.Fatalf("top %d blocks %d rows %d shards, wrote %d blocks", len(top.blocks), top.rows, len(top.shards), len(written.blocks))
			}
			if c.n > 1000 && len(top.blocks) < 2 {
				t.Fatalf("%d rows in one block", c.n)
			}
			blocks := make([]*indexBlock, len(top.blocks))
			raws := make([]*rawBlock, len(top.blocks)) // searched in place by lookups
			for b, ref := range top.blocks {
				if raws[b], err = checkRawBlock("k", ref, data[ref.off:ref.off+ref.n]); err != nil {
					t.Fatal(err)
				}
				if ref.n > int64(indexBlockBytes+len(c.id(c.n-1))+64) {
					t.Fatalf("block %d is %d bytes, cut at %d", b, ref.n, indexBlockBytes)
				}
				if blocks[b], err = decodeIndexBlock("k", top, ref, data[ref.off:ref.off+ref.n]); err != nil {
					t.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range min(c.n, 500) {
				i := rng.IntN(c.n)
				b := top.find(c.id(i))
				if b < 0 || top.blockOf(int64(i)) != b {
					t.Fatalf("row %d: find %d, blockOf %d", i, b, top.blockOf(int64(i)))
				}
				j, ok := blocks[b].search(c.id(i))
				if !ok || blocks[b].row+int64(j) != int64(i) || blocks[b].seqs[j] != uint64(i*7) ||
					top.shards[blocks[b].shards[j]] != fmt.Sprint("s", i%c.shards) {
					t.Fatalf("row %d: found %v at %d in block %d", i, ok, j, b)
				}
				if _, ok := blocks[b].search(c.id(i) + "\x00"); ok {
					t.Fatalf("found %q, which is not there", c.id(i)+"\x00")
				}
				rj, seq, shard, ok, err := raws[b].find("k", len(top.shards), []byte(c.id(i)))
				if err != nil || !ok || rj != j || seq != uint64(i*7) || top.shards[shard] != fmt.Sprint("s", i%c.shards) {
					t.Fatalf("row %d in place: found %v at %d (seq %d, shard %d, %v), want %d", i, ok, rj, seq, shard, err, j)
				}
				if _, _, _, ok, err := raws[b].find("k", len(top.shards), []byte(c.id(i)+"\x00")); ok || err != nil {
					t.Fatalf("found %q in place (%v), which is not there", c.id(i)+"\x00", err)
				}
			}
			if top.blockOf(int64(c.n)) != -1 || top.blockOf(-1) != -1 {
				t.Fatal("blockOf past the rows found a block")
			}
		})
	}
}

// The writer refuses rows out of order or repeated: a sorted fragment's index is the
// proof that its rows are in id order.
func TestKeyIndexRefusesUnsortedRows(t *testing.T) {
	w := newIndexWriter()
	if err := w.add("b", 1, ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b", "a"} {
		if err := w.add(id, 2, ""); err == nil {
			t.Fatalf("added %q after %q", id, "b")
		}
	}
}

// A flipped byte anywhere in an index is reported as corrupt, never decoded into
// wrong rows: the top and every block carry a checksum.
func TestKeyIndexDetectsCorruption(t *testing.T) {
	data, topOff, _ := buildIndex(t, 2000, 2, func(i int) string { return fmt.Sprintf("k%06d", i) })
	check := func(what string, d []byte) {
		t.Helper()
		top, err := decodeIndexTop("k", d[topOff:], topOff, int64(len(d)), 2000)
		if err == nil {
			for _, ref := range top.blocks {
				if _, err = decodeIndexBlock("k", top, ref, d[ref.off:ref.off+ref.n]); err != nil {
					break
				}
			}
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", what, err)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		d := slices.Clone(data)
		i := rng.IntN(len(d))
		d[i] ^= byte(1 + rng.IntN(255))
		check(fmt.Sprint("byte ", i, " flipped"), d)
	}
	check("truncated", data[:len(data)-1])
	if _, err := decodeIndexTop("k", data[topOff:], topOff, int64(len(data)), 1999); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("row count off by one: %v", err)
	}
}

// Random ids and shards through a sorted fragment's index give the same versions as
// the rows they came from.
func FuzzDecodeKeyIndex(f *testing.F) {
	data, topOff, _ := buildIndex(f, 300, 2, func(i int) string { return fmt.Sprintf("f%04d", i) })
	f.Add(data, topOff, int64(300))
	f.Add(data[:len(data)/2], topOff, int64(300))
	f.Add([]byte(indexMagic), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, topOff, rows int64) {
		if topOff < 0 || topOff > int64(len(data)) {
			return
		}
		top, err := decodeIndexTop(fuzzKey, data[topOff:], topOff, int64(len(data)), rows)
		if err != nil {
			checkCorrupt(t, err, fuzzKey)
			return
		}
		var prev string
		var row int64
		for b, ref := range top.blocks {
			blk, err := decodeIndexBlock(fuzzKey, top, ref, data[ref.off:ref.off+ref.n])
			if err != nil {
				checkCorrupt(t, err, fuzzKey)
				return
			}
			if blk.row != row || len(blk.ids) != ref.entries {
				t.Fatalf("block %d at row %d with %d ids, top says row %d, %d entries", b, blk.row, len(blk.ids), row, ref.entries)
			}
			for j, id := range blk.ids {
				if (b > 0 || j > 0) && id <= prev && j > 0 {
					t.Fatalf("block %d: id %q after %q", b, id, prev)
				}
				prev = id
				_ = rowkey.Version{Seq: blk.seqs[j], Shard: top.shards[blk.shards[j]]}
			}
			row += int64(ref.entries)
		}
	})
}

// A lookup walks a block in place (rawBlock.find). Invariant: it finds exactly
// the ids the block holds, at their position, and for
// any other id answers not found at the first entry past it, whatever the ids
// share: prefixes of one another, the empty id, bytes above ASCII, and blocks
// whose entries keep fewer bytes of the previous id than they could (FORMAT.md
// allows it; this writer keeps all it can).
// A cursor that walks the block once for ascending ids answers each the same.
func TestAnInPlaceLookupFindsWhatASearchOfTheIdsFinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 29))
	alphabet := []byte{'a', 'b', 'c', 0x00, 0xff}
	randomID := func() []byte {
		id := make([]byte, rng.IntN(6))
		for i := range id {
			id[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return id
	}
	for round := range 300 {
		set := map[string]bool{}
		for range 1 + rng.IntN(60) {
			set[string(randomID())] = true
		}
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range set {
				if !yield(id) {
					return
				}
			}
		})
		// The block, each entry keeping some of the bytes it shares with the last
		// (all of them in half the rounds, as the writer does).
		var body []byte
		prev := ""
		for i, id := range ids {
			shared := 0
			for shared < len(id) && shared < len(prev) && id[shared] == prev[shared] {
				shared++
			}
			if round%2 == 1 && shared > 0 {
				shared = rng.IntN(shared + 1)
			}
			body = binary.AppendUvarint(body, uint64(shared))
			body = binary.AppendUvarint(body, uint64(len(id)-shared))
			body = append(body, id[shared:]...)
			body = binary.AppendUvarint(body, uint64(i*3))
			body = binary.AppendUvarint(body, uint64(i%2))
			prev = id
		}
		blk := &rawBlock{entries: len(ids), body: body}
		var targets []string
		for _, id := range ids {
			targets = append(targets, id, id+"\x00", id+"a")
			if id != "" {
				targets = append(targets, id[:len(id)-1], id[:len(id)-1]+string(id[len(id)-1]+1))
			}
		}
		for range 20 {
			targets = append(targets, string(randomID()))
		}
		// check holds an answer for target to what a search of the ids finds.
		check := func(how, target string, j int, seq uint64, shard uint32, found bool, err error) {
			t.Helper()
			want, wantFound := slices.BinarySearch(ids, target)
			if err != nil || j != want || found != wantFound ||
				(found && (seq != uint64(want*3) || shard != uint32(want%2))) {
				t.Fatalf("round %d, ids %q: %s(%q) = %d, %v (seq %d, shard %d, %v); want %d, %v",
					round, ids, how, target, j, found, seq, shard, err, want, wantFound)
			}
		}
		for _, target := range targets {
			j, seq, shard, found, err := blk.find("k", 2, []byte(target))
			check("find", target, j, seq, shard, found, err)
		}
		// One cursor through an ascending sample of the targets (a lookup of many
		// ids in one block) answers each as a search does.
		slices.Sort(targets)
		targets = slices.Compact(targets)
		var c blockCursor
		c.reset(blk)
		for _, target := range targets {
			if rng.IntN(3) == 0 {
				continue
			}
			j, seq, shard, found, err := c.find("k", 2, []byte(target))
			check("a cursor's find", target, j, seq, shard, found, err)
		}
	}
}
