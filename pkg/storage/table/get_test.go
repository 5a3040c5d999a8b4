package table

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// A batch get decodes each row group only from the first row it wants to the
// last (readRowsAt seeks to its first row): every row it answers must be the
// row of its id, whatever its place in its group (first, last, middle, several
// of one group apart or adjacent), with every column, the nested one included,
// and whatever the order of the ids asked.
func TestGetManyAnswersRowsAnywhereInTheirRowGroups(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t), rowGroups(100))
	const n = 1000 // ten row groups of 100 rows
	rows := make([]row, n)
	for i := range rows {
		rows[i] = row{fmt.Sprintf("id-%04d", i), uint64(7 + i%5), int64(i * 3)}
	}
	m := mustAppend(t, tb, rows...)
	if len(m.Fragments) != 1 {
		t.Fatalf("%d fragments, want 1", len(m.Fragments))
	}
	var ids []string
	for _, i := range []int{999, 0, 99, 100, 150, 151, 152, 199, 250, 255, 498, 301, 600, 699, 700, 701, 999 - 1} {
		ids = append(ids, rows[i].id)
	}
	ids = append(ids, "id-missing")
	got := map[string]bool{}
	err := tb.GetMany(ctx, m, ids, nil, func(i int, rec arrow.RecordBatch, v rowkey.Version) error {
		var want row
		for _, r := range rows {
			if r.id == ids[i] {
				want = r
			}
		}
		if rec.NumRows() != 1 {
			return fmt.Errorf("id %s: %d rows", ids[i], rec.NumRows())
		}
		id := rec.Column(0).(*array.String).Value(0)
		val := rec.Column(1).(*array.Int64).Value(0)
		toks := rec.Column(2).(*array.List)
		start, end := toks.ValueOffsets(0)
		vals := toks.ListValues().(*array.Int32)
		seq := rec.Column(3).(*array.Uint64).Value(0)
		if id != want.id || val != want.value || seq != want.seq || v.Seq != want.seq ||
			end-start != 2 || vals.Value(int(start)) != int32(want.value) || vals.Value(int(start)+1) != int32(want.seq) {
			return fmt.Errorf("id %s: got id %s value %d seq %d (version %d) tokens %s, want %+v",
				ids[i], id, val, seq, v.Seq, toks.ValueStr(0), want)
		}
		got[ids[i]] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids)-1 {
		t.Fatalf("%d rows answered, want %d (every id but the missing one)", len(got), len(ids)-1)
	}
}
