package table

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
)

// fuzzKey is the key the fuzzed objects claim to be read from; every error must
// name it, as errors from a real read name the object.
const fuzzKey = "rollout/t/_versions/00000000000000000002.json"

// realObjects builds a small table (two commits, the second superseding a row of
// the first, so there is a deletion vector and a merged_generations watermark) and
// returns its manifests, bloom filters and deletion vectors as stored: the seeds
// every decoder fuzz target starts from.
func realObjects(f *testing.F) (manifests, blooms, dvs [][]byte, dvRows []int64) {
	f.Helper()
	ctx := context.Background()
	b := memBucket(f)
	tb := createTable(f, b)
	mustAppend(f, tb, row{"a", 1, 1}, row{"b", 1, 2}, row{"c", 1, 3})
	rec := batch(row{"a", 2, 4}, row{"d", 2, 5})
	defer rec.Release()
	m, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}, Shard: "worker-1", Generation: 3})
	if err != nil {
		f.Fatal(err)
	}
	get := func(key string) []byte {
		data, err := b.Get(ctx, key)
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	for v := uint64(1); v <= m.Version; v++ {
		manifests = append(manifests, get(tb.versionKey(v)))
	}
	for _, fr := range m.Fragments {
		blooms = append(blooms, get(tb.key(fr.Bloom)))
		if fr.Deletions != nil {
			dvs = append(dvs, get(tb.key(fr.Deletions.Path)))
			dvRows = append(dvRows, fr.Rows)
		}
	}
	if len(dvs) == 0 {
		f.Fatal("the seed table has no deletion vector")
	}
	return manifests, blooms, dvs, dvRows
}

// compactedManifests returns the manifest of a compacted table, whose fragment
// mixes shards (shard_runs) and which records last_compaction, and variants of it
// with shard runs that do not describe the fragment's rows (each must be refused).
func compactedManifests(f *testing.F) (good []byte, bad [][]byte) {
	f.Helper()
	ctx := context.Background()
	tb := createTable(f, memBucket(f))
	for i, shard := range []string{"a", "b", ""} {
		rec := batch(row{"x" + shard, 1, 1}, row{"y" + shard, 2, int64(i)})
		_, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}, Shard: shard, Generation: 1})
		rec.Release()
		if err != nil {
			f.Fatal(err)
		}
	}
	if _, err := tb.Compact(ctx, CompactOptions{Level0Trigger: 2}); err != nil {
		f.Fatal(err)
	}
	m := withShardRuns(tb.Latest(), ShardRun{"", 2}, ShardRun{"a", 2}, ShardRun{"b", 2})
	if len(m.Fragments) != 1 || m.LastCompaction == nil {
		f.Fatalf("compacted manifest %+v, want one fragment", m)
	}
	good, err := encodeManifest(m)
	if err != nil {
		f.Fatal(err)
	}
	for _, edit := range []func(fr *Fragment, m *Manifest){
		func(fr *Fragment, _ *Manifest) { fr.ShardRuns[0].Rows++ },
		func(fr *Fragment, _ *Manifest) { fr.ShardRuns[1].Rows = 0 },
		func(fr *Fragment, _ *Manifest) { fr.ShardRuns[2].Rows = -fr.ShardRuns[2].Rows },
		func(fr *Fragment, _ *Manifest) { fr.ShardRuns[0].Rows, fr.ShardRuns[1].Rows = 1<<62, 1<<62 },
		func(fr *Fragment, _ *Manifest) { fr.ShardRuns = fr.ShardRuns[:2] },
		func(fr *Fragment, _ *Manifest) { fr.Shard = "a" },
		func(_ *Fragment, m *Manifest) { m.LastCompaction.Version = m.Version + 1 },
		func(_ *Fragment, m *Manifest) { m.LastCompaction.Outputs = -1 },
	} {
		c := *m
		fr := m.Fragments[0]
		fr.ShardRuns = append([]ShardRun(nil), fr.ShardRuns...)
		c.Fragments = []Fragment{fr}
		lc := *m.LastCompaction
		c.LastCompaction = &lc
		edit(&c.Fragments[0], &c)
		data, err := encodeManifest(&c)
		if err != nil {
			f.Fatal(err)
		}
		bad = append(bad, data)
	}
	return good, bad
}

// checkCorrupt fails t unless err is one of the table's sentinels and names key.
func checkCorrupt(t *testing.T, err error, key string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedFormat) {
		t.Fatalf("error %v is neither ErrCorrupt nor ErrUnsupportedFormat", err)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("error %v does not name %s", err, key)
	}
}

// FuzzDecodeManifest: decoding never panics; a refused manifest is ErrCorrupt or
// ErrUnsupportedFormat naming the key; an accepted one satisfies the invariants
// readers rely on (a schema with id and _seq, no fragment with negative live rows)
// and re-encodes to bytes that decode to a manifest encoding the same.
func FuzzDecodeManifest(f *testing.F) {
	manifests, _, _, _ := realObjects(f)
	for _, m := range manifests {
		f.Add(m)
	}
	compacted, badRuns := compactedManifests(f)
	f.Add(compacted)
	for _, b := range badRuns {
		if _, err := decodeManifest(fuzzKey, b); !errors.Is(err, ErrCorrupt) {
			f.Fatalf("bad shard runs decode with %v, want ErrCorrupt:\n%s", err, b)
		}
		f.Add(b)
	}
	last := string(manifests[len(manifests)-1])
	for _, s := range []string{
		"", "null", "{}", "[]", `{"format_version":1}`, `{"format_version":99,"version":1}`,
		`{"format_version":1,"version":1,"schema":"","primary_key":"id"}`,
		`{"format_version":1,"version":1,"schema":"QUFBQQ==","primary_key":"id"}`,
	} {
		f.Add([]byte(s))
	}
	for _, r := range [][2]string{
		{`"rows":3`, `"rows":-3`},
		{`"count":1`, `"count":9`},
		{`"primary_key":"id"`, `"primary_key":"_seq"`},
		{`"merged_generations":{`, `"merged_generations":{"x":-1,`},
		{`"created_at":"`, `"created_at":"99999-`},
	} {
		// A seed that no longer changes the manifest (its encoding changed) would
		// silently stop covering its case.
		if !strings.Contains(last, r[0]) {
			f.Fatalf("seed edit %q: not in the manifest:\n%s", r[0], last)
		}
		f.Add([]byte(strings.Replace(last, r[0], r[1], 1)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeManifest(fuzzKey, data)
		if err != nil {
			checkCorrupt(t, err, fuzzKey)
			return
		}
		if err := checkSchema(m.ArrowSchema()); err != nil {
			t.Fatalf("accepted a manifest whose schema fails checkSchema: %v", err)
		}
		for _, fr := range m.Fragments {
			if fr.LiveRows() < 0 {
				t.Fatalf("accepted fragment %s with %d live rows", fr.Path, fr.LiveRows())
			}
			if len(fr.ShardRuns) > 0 {
				sum := int64(0)
				for _, r := range fr.ShardRuns {
					if r.Rows <= 0 {
						t.Fatalf("accepted fragment %s with a shard run of %d rows", fr.Path, r.Rows)
					}
					sum += r.Rows
				}
				if sum != fr.Rows || fr.Shard != "" {
					t.Fatalf("accepted fragment %s of %d rows, shard %q, with shard runs %+v", fr.Path, fr.Rows, fr.Shard, fr.ShardRuns)
				}
				if fr.Rows <= math.MaxUint32 {
					got, want := fr.ShardAt(uint32(fr.Rows-1)), fr.ShardRuns[len(fr.ShardRuns)-1].Shard
					if got != want || fr.ShardAt(0) != fr.ShardRuns[0].Shard {
						t.Fatalf("fragment %s with runs %+v: ShardAt of its last row is %q, want %q", fr.Path, fr.ShardRuns, got, want)
					}
				}
			}
		}
		if lc := m.LastCompaction; lc != nil && (lc.Version > m.Version || lc.Sources < 0 || lc.Outputs < 0) {
			t.Fatalf("accepted last_compaction %+v in version %d", *lc, m.Version)
		}
		enc, err := encodeManifest(m)
		if err != nil {
			t.Fatalf("accepted manifest does not re-encode: %v", err)
		}
		again, err := decodeManifest(fuzzKey, enc)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, enc)
		}
		enc2, err := encodeManifest(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, enc2) || !again.ArrowSchema().Equal(m.ArrowSchema()) {
			t.Fatalf("manifest changes across encode/decode:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzDecodeBloom: a bloom filter object decodes to a filter or to ErrCorrupt naming
// the key, never a panic; a decoded filter re-encodes to one that decodes equal.
// sealed fuzzes the payload behind a valid envelope, which random bytes would almost
// never reach past the checksum.
func FuzzDecodeBloom(f *testing.F) {
	_, blooms, _, _ := realObjects(f)
	for _, b := range blooms {
		f.Add(false, b)
		f.Add(true, b[envelopeHeader:])
	}
	f.Add(false, []byte(bloomMagic))
	f.Add(true, []byte{})
	f.Add(true, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})                                                 // m=1, k=1, no bitset
	f.Add(true, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}) // huge m
	f.Fuzz(func(t *testing.T, sealed bool, data []byte) {
		key := "rollout/t/data/x.bloom"
		if sealed {
			data = seal(bloomMagic, data)
		}
		bf, err := decodeBloom(key, data)
		if err != nil {
			checkCorrupt(t, err, key)
			return
		}
		enc, err := encodeBloom(bf)
		if err != nil {
			t.Fatalf("decoded filter does not re-encode: %v", err)
		}
		again, err := decodeBloom(key, enc)
		if err != nil {
			t.Fatalf("re-encoded filter does not decode: %v", err)
		}
		if !again.Equal(bf) {
			t.Fatal("filter changes across encode/decode")
		}
		bf.TestString("a") // a decoded filter must be usable, not just decodable
	})
}

// FuzzDecodeDeletions: a deletion vector decodes to a bitmap whose offsets are all
// below the fragment's row count, or to ErrCorrupt naming the key, never a panic;
// a decoded bitmap re-encodes to one that decodes equal.
func FuzzDecodeDeletions(f *testing.F) {
	_, _, dvs, rows := realObjects(f)
	for i, d := range dvs {
		f.Add(false, d, rows[i])
		f.Add(true, d[envelopeHeader:], rows[i])
	}
	big := roaring.BitmapOf(0, 1, 70000, 1<<20)
	big.AddRange(100, 5000)
	bigEnc, err := encodeDeletions(big)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(false, bigEnc, int64(1<<21))
	f.Add(false, bigEnc, int64(10)) // offsets beyond the fragment
	f.Add(true, []byte{}, int64(1))
	f.Add(true, []byte{0x3b, 0x30, 0, 0, 1, 0, 0, 0}, int64(1)) // run-container cookie, cut short
	f.Add(true, []byte{0x3a, 0x30, 0, 0, 0xff, 0xff, 0xff, 0x7f}, int64(1))
	f.Fuzz(func(t *testing.T, sealed bool, data []byte, rows int64) {
		key := "rollout/t/_deletions/x.bin"
		if sealed {
			data = seal(deletionMagic, data)
		}
		bm, err := decodeDeletions(key, data, rows)
		if err != nil {
			checkCorrupt(t, err, key)
			return
		}
		if !bm.IsEmpty() && int64(bm.Maximum()) >= rows {
			t.Fatalf("accepted offset %d in a %d-row fragment", bm.Maximum(), rows)
		}
		enc, err := encodeDeletions(bm.Clone())
		if err != nil {
			t.Fatalf("decoded bitmap does not re-encode: %v", err)
		}
		again, err := decodeDeletions(key, enc, rows)
		if err != nil {
			t.Fatalf("re-encoded bitmap does not decode: %v", err)
		}
		if !again.Equals(bm) {
			t.Fatalf("bitmap changes across encode/decode: %v vs %v", bm, again)
		}
	})
}
