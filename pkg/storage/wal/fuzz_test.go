package wal

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// fuzzSchema is the input schema of the fuzz seeds: nested and nullable columns, so
// the seeds exercise list offsets and validity bitmaps.
var fuzzSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "value", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// walObjects writes a shard the way production does (open, two appends, a seal,
// an append left unsealed) and returns its stored objects by kind: the seeds of
// every WAL decoder fuzz target.
type walObjects struct {
	manifests   map[uint64][]byte // by version
	entries     [][]byte
	generations [][]byte
}

func realWALObjects(f *testing.F) walObjects {
	f.Helper()
	ctx := context.Background()
	b, err := objstore.Open(ctx, "mem://")
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	quiet := slog.New(slog.DiscardHandler)
	w, err := OpenWriter(ctx, b, "rollout/t", "w1", fuzzSchema, WithLogger(quiet))
	if err != nil {
		f.Fatal(err)
	}
	appendRows := func(ids ...string) {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, fuzzSchema)
		defer rb.Release()
		for i, id := range ids {
			rb.Field(0).(*array.StringBuilder).Append(id)
			rb.Field(1).(*array.Int64Builder).Append(int64(i))
			lb := rb.Field(2).(*array.ListBuilder)
			if i%2 == 0 {
				lb.Append(true)
				lb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{1, 2, int32(i)}, nil)
			} else {
				lb.AppendNull()
			}
			rb.Field(3).(*array.StringBuilder).AppendNull()
		}
		rec := rb.NewRecordBatch()
		defer rec.Release()
		if err := w.Append(ctx, rec); err != nil {
			f.Fatal(err)
		}
	}
	appendRows("a", "b", "c")
	appendRows("b", "d")
	if _, err := w.Seal(ctx); err != nil {
		f.Fatal(err)
	}
	appendRows("e")
	var objs walObjects
	objs.manifests = map[uint64][]byte{}
	list, err := b.List(ctx, "rollout/t/")
	if err != nil {
		f.Fatal(err)
	}
	for _, o := range list {
		data, err := b.Get(ctx, o.Key)
		if err != nil {
			f.Fatal(err)
		}
		switch {
		case strings.Contains(o.Key, "/"+entriesDir+"/"):
			objs.entries = append(objs.entries, data)
		case strings.Contains(o.Key, "/"+manifestsDir+"/"):
			name := strings.TrimSuffix(o.Key[strings.LastIndex(o.Key, "/")+1:], ".json")
			v, err := strconv.ParseUint(name, 10, 64)
			if err != nil {
				f.Fatalf("manifest key %s: %v", o.Key, err)
			}
			objs.manifests[v] = data
		case strings.Contains(o.Key, "/"+genDir+"/"):
			objs.generations = append(objs.generations, data)
		}
	}
	w.Abandon()
	if len(objs.entries) == 0 || len(objs.manifests) < 2 || len(objs.generations) == 0 {
		f.Fatalf("seed shard has %d entries, %d manifests, %d generations", len(objs.entries), len(objs.manifests), len(objs.generations))
	}
	return objs
}

// FuzzValidateShard: every key a shard writes, for a shard name ValidateShard
// accepts, is one objstore accepts: a worker whose INSTANCE_ID validates must be
// able to write its WAL.
func FuzzValidateShard(f *testing.F) {
	for _, s := range []string{"w1", "worker-0.pod_a", "a..", "x__0x2e", ".x", "", strings.Repeat("w", 129), "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateShard(name) != nil {
			return
		}
		const dir = "generic/store"
		for _, key := range []string{
			entryKey(dir, name, 1),
			GenerationKey(dir, Generation{Path: generationPath(name, "0123abcd", 7)}),
			shardRoot(dir, name) + "/" + manifestsDir + "/00000000000000000001.json",
			shardRoot(dir, name) + "/" + latestHint,
		} {
			if err := objstore.ValidateKey(key); err != nil {
				t.Fatalf("shard %q validates, but its key %q does not: %v", name, key, err)
			}
		}
		if pos, ok := parseEntryPos(entryKey(dir, name, 42)); !ok || pos != 42 {
			t.Fatalf("entry key of shard %q parses to %d, %v", name, pos, ok)
		}
	})
}

// checkWALError fails t unless err is one of the WAL's decode sentinels naming key.
func checkWALError(t *testing.T, err error, key string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedFormat) {
		t.Fatalf("error %v is neither ErrCorrupt nor ErrUnsupportedFormat", err)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("error %v does not name %s", err, key)
	}
}

// FuzzDecodeShardManifest: decoding never panics; a refused manifest is ErrCorrupt or
// ErrUnsupportedFormat naming the key; an accepted one holds the invariants the
// writer and merges rely on (ascending generations at or below current_generation)
// and re-encodes to bytes that decode to a manifest encoding the same.
func FuzzDecodeShardManifest(f *testing.F) {
	objs := realWALObjects(f)
	var newest []byte
	for v, m := range objs.manifests {
		f.Add(m, v)
		if v == uint64(len(objs.manifests)) {
			newest = m
		}
	}
	n := uint64(len(objs.manifests))
	for _, s := range []string{
		"", "null", "{}", `{"format_version":1,"version":1,"shard":"w1","writer_epoch":1}`,
		`{"format_version":7,"version":1}`, `{"format_version":1,"version":1,"shard":"w1","writer_epoch":1,"generations":null}`,
		strings.Replace(string(newest), `"generation": 1`, `"generation": 0`, 1),
		strings.Replace(string(newest), `"current_generation": 1`, `"current_generation": 0`, 1),
		strings.Replace(string(newest), `"rows": `, `"rows": -`, 1),
		strings.Replace(string(newest), `"generations": [`, `"generations": [{"generation":1,"path":"x"},`, 1),
		strings.Replace(string(newest), `"updated_at": "`, `"updated_at": "0000-`, 1),
	} {
		f.Add([]byte(s), n)
	}
	f.Fuzz(func(t *testing.T, data []byte, v uint64) {
		key := "rollout/t/_wal/w1/_manifests/" + strconv.FormatUint(v, 10) + ".json"
		m, err := decodeManifest(key, "w1", v, data)
		if err != nil {
			checkWALError(t, err, key)
			return
		}
		if m.Version != v || m.Shard != "w1" {
			t.Fatalf("accepted version %d of shard %q as version %d of w1", m.Version, m.Shard, v)
		}
		for i, g := range m.Generations {
			if got, ok := m.Generation(g.Generation); !ok || got != g {
				t.Fatalf("Generation(%d) does not find generation %d", g.Generation, i)
			}
			if g.Generation > m.CurrentGeneration {
				t.Fatalf("accepted generation %d above current %d", g.Generation, m.CurrentGeneration)
			}
		}
		if len(m.Generations) > 0 {
			if p := m.Pending(m.Generations[0].Generation - 1); len(p) != len(m.Generations) {
				t.Fatalf("Pending below the oldest generation is %d of %d", len(p), len(m.Generations))
			}
		}
		enc, err := encodeManifest(m.clone())
		if err != nil {
			t.Fatalf("accepted manifest does not re-encode: %v", err)
		}
		again, err := decodeManifest(key, "w1", v, enc)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, enc)
		}
		enc2, err := encodeManifest(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("manifest changes across encode/decode:\n%s\n%s", enc, enc2)
		}
	})
}

// validateRecords fully validates every column of recs: decoded bytes are about to
// be read by value (memtable inserts, merges), and a corrupt offset there panics.
func validateRecords(t *testing.T, recs []arrow.RecordBatch) {
	t.Helper()
	for _, r := range recs {
		for i, c := range r.Columns() {
			if err := array.ValidateFull(c); err != nil {
				t.Fatalf("decoder accepted column %d that fails validation: %v", i, err)
			}
		}
	}
}

// FuzzDecodeEntry: an entry object decodes or fails with ErrCorrupt (or
// ErrUnsupportedFormat) naming the key, never a panic; an accepted entry's arrays
// are valid, its row count is the metadata's, and it re-encodes to an entry that
// decodes to the same writer, epoch and rows.
func FuzzDecodeEntry(f *testing.F) {
	objs := realWALObjects(f)
	for _, e := range objs.entries {
		f.Add(e)
		f.Add(e[:len(e)/2])
	}
	f.Add([]byte{})
	f.Add([]byte("ARROW1\x00\x00"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0})
	schema, err := storeSchema(fuzzSchema)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const key = "rollout/t/_wal/w1/entries/00000000000000000001.arrow"
		e, err := decodeEntry(key, data, schema)
		if err != nil {
			checkWALError(t, err, key)
			return
		}
		defer e.release()
		validateRecords(t, e.recs)
		var rows int64
		for _, r := range e.recs {
			rows += r.NumRows()
		}
		if rows != e.rows || e.epoch == 0 || e.writerID == "" {
			t.Fatalf("accepted entry: %d rows counted, %d recorded, epoch %d, writer %q", rows, e.rows, e.epoch, e.writerID)
		}
		if len(e.recs) > 1 {
			return // encodeEntry writes one batch; production entries have at most one
		}
		var rec arrow.RecordBatch
		if len(e.recs) == 1 {
			rec = e.recs[0]
		}
		enc, err := encodeEntry(schema, rec, "w1", e.writerID, e.epoch, e.gapFrom)
		if err != nil {
			t.Fatalf("accepted entry does not re-encode: %v", err)
		}
		again, err := decodeEntry(key, enc, schema)
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		defer again.release()
		if again.writerID != e.writerID || again.epoch != e.epoch || again.gapFrom != e.gapFrom || again.rows != e.rows {
			t.Fatalf("entry changes across encode/decode: %+v vs %+v", again, e)
		}
		if rec != nil && !array.RecordEqual(rec, again.recs[0]) {
			t.Fatal("entry rows change across encode/decode")
		}
	})
}

// FuzzDecodeGeneration: a generation file decodes or fails with ErrCorrupt (or
// ErrUnsupportedFormat) naming the key, never a panic; an accepted one has the
// columns readers depend on and valid arrays.
func FuzzDecodeGeneration(f *testing.F) {
	objs := realWALObjects(f)
	for _, g := range objs.generations {
		f.Add(g)
		f.Add(g[:len(g)-10])
	}
	f.Add([]byte{})
	f.Add([]byte("ARROW1\x00\x00ARROW1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const key = "rollout/t/_wal/w1/gen/x_gen_1.arrow"
		g, err := decodeGeneration(key, data)
		if err != nil {
			checkWALError(t, err, key)
			return
		}
		if err := checkGenerationSchema(g.Schema); err != nil {
			t.Fatalf("accepted a generation whose schema fails: %v", err)
		}
		validateRecords(t, g.Records)
		var rows int64
		for _, r := range g.Records {
			rows += r.NumRows()
		}
		if rows != g.Rows {
			t.Fatalf("%d rows counted, %d recorded", rows, g.Rows)
		}
	})
}
