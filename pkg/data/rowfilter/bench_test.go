package rowfilter

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// BenchmarkMask measures evaluation speed in rows/s over one batch of 64k rows
// (the predicate compiled once, as a list does): go test -run '^$' -bench Mask
// ./pkg/data/rowfilter/
func BenchmarkMask(b *testing.B) {
	rows := make([]testRow, 1<<16)
	for i := range rows {
		rows[i] = testRows[1+i%(len(testRows)-1)]
		rows[i].id = fmt.Sprint("r", i)
		if i%10 == 0 {
			rows[i] = testRow{id: rows[i].id} // some nulls
		}
	}
	rec := testBatch(b, rows)
	defer rec.Release()
	// The floor: "n = 2" as a hand-written loop over the typed array, so a
	// run on a loaded machine still tells how far the tree walk is from it.
	b.Run("baseline: n = 2 by hand", func(b *testing.B) {
		col := rec.Column(3).(*array.Int64)
		for b.Loop() {
			mask := make([]bool, col.Len())
			for i := range mask {
				mask[i] = col.IsValid(i) && col.Value(i) == 2
			}
		}
		b.ReportMetric(float64(b.N)*float64(rec.NumRows())/b.Elapsed().Seconds(), "rows/s")
	})
	for _, predicate := range []string{
		"n = 2",
		"n > 1 AND score < 1.5",
		"name LIKE 'a%'",
		"name LIKE '%l_c%'",
		"name IN ('alice', 'bob', 'carol', 'dave')",
		"ts >= '2024-05-01T00:00:00Z' AND (ok OR x IS NULL) AND NOT (m BETWEEN 15 AND 25)",
	} {
		f, err := Compile(predicate, testSchema)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(predicate, func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Mask(rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(rec.NumRows())/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkCompile measures parsing and checking one predicate.
func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		if _, err := Compile("ts >= '2024-05-01T00:00:00Z' AND (ok OR x IS NULL) AND name LIKE 'a%' AND n IN (1, 2, 3)", testSchema); err != nil {
			b.Fatal(err)
		}
	}
}
