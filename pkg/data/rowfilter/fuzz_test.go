package rowfilter

import (
	"errors"
	"testing"
)

// FuzzFilter: Compile never panics, every error it returns is a typed *Error
// (a 400, never a 500), and a predicate that compiles evaluates on every row
// to exactly one of TRUE, FALSE and UNKNOWN: p, NOT (p) and (p) IS NULL keep
// disjoint sets of rows that together cover the batch.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		"n = 1", "name LIKE 'a\\_%' ESCAPE '\\\\'", "n IN (1, NULL)", "NOT (ok AND n > 2) OR name IS NULL",
		"ts >= '2024-05-01' AND score BETWEEN 0.1 AND 1", "x <=> NULL", "`CamelCase` != 3 XOR ok IS NOT TRUE",
		"n = (SELECT 1)", "n = 1; DROP TABLE t", "lower(name) = 'a'", "name = \"x\"", "vec IS NOT NULL",
		"big NOT LIKE '%Ö_'", "m NOT IN (1.5, 2)", "n = 0x1f", "ts = date '2024-05-02'", "((n))",
	} {
		f.Add(s)
	}
	rec := testBatch(f, testRows)
	defer rec.Release()
	f.Fuzz(func(t *testing.T, predicate string) {
		p, err := Compile(predicate, testSchema)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || fe.Kind == nil {
				t.Fatalf("Compile(%q) = %v (%T), want a typed *Error", predicate, err, err)
			}
			return
		}
		mask, err := p.Mask(rec)
		if err != nil || len(mask) != int(rec.NumRows()) {
			t.Fatalf("Mask(%q) = %d rows, %v", predicate, len(mask), err)
		}
		// A trailing comment would swallow the closing parenthesis.
		not, err1 := Compile("NOT ("+predicate+"\n)", testSchema)
		null, err2 := Compile("("+predicate+"\n) IS NULL", testSchema)
		if err1 != nil || err2 != nil {
			return
		}
		notMask, _ := not.Mask(rec)
		nullMask, _ := null.Mask(rec)
		for i := range mask {
			n := 0
			for _, m := range []bool{mask[i], notMask[i], nullMask[i]} {
				if m {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%q on row %d: TRUE %v, NOT TRUE %v, IS NULL %v: want exactly one", predicate, i, mask[i], notMask[i], nullMask[i])
			}
		}
	})
}
