package table

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// shardRows is one shard's rows, by generation, for the tests of appends of
// several shards. A row's value names its shard and seq (shard index*1000+seq), so
// a test sees which write won.
type shardRows struct {
	shard string
	gens  [][]row
}

// randomShards makes n shards of gens generations of rows over a few ids, with
// _seq values unique within a shard (a shard numbers its writes) and often equal
// across shards, so ties are settled by the shard order.
func randomShards(rng *rand.Rand, n, gens int) []shardRows {
	out := make([]shardRows, n)
	for i := range out {
		out[i].shard = fmt.Sprintf("w%d", i+1)
		seqs := rng.Perm(60)
		for range gens {
			var rows []row
			for range 1 + rng.IntN(6) {
				seq := uint64(seqs[0] + 1)
				seqs = seqs[1:]
				rows = append(rows, row{id: fmt.Sprintf("id%02d", rng.IntN(12)), seq: seq, value: int64((i+1)*1000) + int64(seq)})
			}
			out[i].gens = append(out[i].gens, rows)
		}
	}
	return out
}

// part is the shard's generations from..to (1-based, inclusive) as one Part.
func (s shardRows) part(from, to int) Part {
	p := Part{Shard: s.shard, Generation: uint64(to)}
	for g := from; g <= to; g++ {
		p.Records = append(p.Records, batch(s.gens[g-1]...))
	}
	return p
}

// newestOf is the winner per id over the rows of shards' generations up to
// upTo[shard], by rowkey.Version.
func newestOf(shards []shardRows, upTo map[string]int) map[string]row {
	type win struct {
		v rowkey.Version
		r row
	}
	wins := map[string]win{}
	for _, s := range shards {
		for g := 0; g < upTo[s.shard]; g++ {
			for _, r := range s.gens[g] {
				v := rowkey.Version{Seq: r.seq, Shard: s.shard}
				if w, ok := wins[r.id]; !ok || v.Newer(w.v) || v == w.v {
					wins[r.id] = win{v, r}
				}
			}
		}
	}
	out := map[string]row{}
	for id, w := range wins {
		out[id] = w.r
	}
	return out
}

func release(parts []Part) {
	for _, p := range parts {
		for _, r := range p.Records {
			r.Release()
		}
	}
}

// One append of several shards makes one version holding the newest row of every
// id across them (a _seq tie goes to the shard that sorts last, as reads order
// them), with every shard's watermark advanced.
func TestAnAppendOfSeveralShardsCommitsOnceWithEveryWatermark(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	parts := []Part{
		{Shard: "w2", Generation: 4, Records: []arrow.RecordBatch{batch(row{"a", 5, 2005}, row{"c", 2, 2002})}},
		{Shard: "w1", Generation: 7, Records: []arrow.RecordBatch{batch(row{"a", 5, 1005}, row{"b", 1, 1001})}},
		{Shard: "w3", Generation: 1, Records: []arrow.RecordBatch{batch(row{"b", 7, 3007})}},
	}
	defer release(parts)
	created := tb.Latest().Version
	m, err := appendRows(ctx, tb, Append{Parts: parts})
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != created+1 || len(m.Fragments) != 1 {
		t.Fatalf("version %d with %d fragments, want one version of one fragment", m.Version, len(m.Fragments))
	}
	for shard, want := range map[string]uint64{"w1": 7, "w2": 4, "w3": 1} {
		if got := m.Watermark(shard); got != want {
			t.Errorf("watermark of %s = %d, want %d", shard, got, want)
		}
	}
	got := liveRows(t, tb, m)
	if got["a"].value != 2005 || got["b"].value != 3007 || got["c"].value != 2002 || len(got) != 3 {
		t.Fatalf("rows %v, want a from w2 (the tie), b from w3, c from w2", got)
	}
	for id, shard := range map[string]string{"a": "w2", "b": "w3", "c": "w2"} {
		rec, v, err := tb.Get(ctx, m, id)
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
		if v.Shard != shard {
			t.Errorf("get %s: version %+v, want shard %s", id, v, shard)
		}
	}
	if _, err := tb.Prepare(ctx, m, Append{Parts: parts}); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("prepare over covering watermarks: %v, want ErrAlreadyCommitted", err)
	}
	if _, err := tb.Prepare(ctx, m, Append{Parts: []Part{{Generation: 2}}}); err == nil {
		t.Fatal("a part without its shard was accepted")
	}
}

// A store merge (every shard in one append) races one shard's own merge, either
// committing first, over random rows with _seq ties across shards: whichever order,
// every id ends with its newest row exactly once, and every watermark at the
// highest generation committed. The race is the interleaving of a master's merge of
// the store with a worker's own sweeper merging its shard.
func TestAStoreMergeRacingAShardsOwnMergeKeepsTheNewestRowOnce(t *testing.T) {
	ctx := context.Background()
	for iter := range 40 {
		rng := rand.New(rand.NewPCG(uint64(iter), 31))
		tb := createTable(t, memBucket(t))
		shards := randomShards(rng, 3, 3)
		base := tb.Latest()
		// The store merge takes generations 1..2 of every shard; the owner of w1
		// merges 1..own (1 to 3) of its own.
		var all []Part
		for _, s := range shards {
			all = append(all, s.part(1, 2))
		}
		own := 1 + rng.IntN(3)
		ownPart := shards[0].part(1, own)
		store, err := tb.Prepare(ctx, base, Append{Parts: all})
		if err != nil {
			t.Fatal(err)
		}
		one, err := tb.Prepare(ctx, base, Append{Records: ownPart.Records, Shard: ownPart.Shard, Generation: ownPart.Generation})
		if err != nil {
			t.Fatal(err)
		}
		first, second := store, one
		if rng.IntN(2) == 0 {
			first, second = one, store
		}
		if _, err := first.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := second.Commit(ctx); err != nil && !errors.Is(err, ErrAlreadyCommitted) {
			t.Fatal(err)
		}
		release(all)
		release([]Part{ownPart})
		m, err := tb.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		upTo := map[string]int{"w1": max(2, own), "w2": 2, "w3": 2}
		for shard, g := range upTo {
			if got := m.Watermark(shard); got != uint64(g) {
				t.Fatalf("iteration %d: watermark of %s = %d, want %d", iter, shard, got, g)
			}
		}
		want := newestOf(shards, upTo)
		got := liveRows(t, tb, m) // fails on an id live twice
		if len(got) != len(want) {
			t.Fatalf("iteration %d: %d live ids, want %d", iter, len(got), len(want))
		}
		for id, w := range want {
			if got[id].value != w.value {
				t.Fatalf("iteration %d: id %s holds %d, want %d (own merge up to %d)", iter, id, got[id].value, w.value, own)
			}
		}
	}
}
