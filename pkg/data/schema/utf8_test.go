package schema

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The one-pass UTF-8 check of a string array's values gives the verdict of
// checking each value on its own: a character split across two values (each
// invalid, their concatenation valid) is refused, for arrays and their slices.
func TestValidStringsIsEachValueValid(t *testing.T) {
	alphabet := []string{"a", "é", "€", "\xc3", "\xa9", "\xe2\x82", "\xff", ""}
	rnd := rand.New(rand.NewPCG(1, 2))
	check := func(values []string) {
		t.Helper()
		var data []byte
		offs := []int32{0}
		for _, v := range values {
			data = append(data, v...)
			offs = append(offs, int32(len(data)))
		}
		arr := array.NewStringData(array.NewData(arrow.BinaryTypes.String, len(values), []*memory.Buffer{nil,
			memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offs)), memory.NewBufferBytes(data)}, nil, 0, 0))
		defer arr.Release()
		for from := 0; from <= len(values); from++ {
			for to := from; to <= len(values); to++ {
				want := true
				for _, v := range values[from:to] {
					want = want && utf8.ValidString(v)
				}
				s := array.NewSlice(arr, int64(from), int64(to)).(*array.String)
				if got := validStrings(s); got != want {
					t.Fatalf("values %q [%d:%d]: %v, want %v", values, from, to, got, want)
				}
				if err := validateFull(s); (err == nil) != want {
					t.Fatalf("values %q [%d:%d]: validateFull %v, want valid %v", values, from, to, err, want)
				}
				s.Release()
			}
		}
	}
	check([]string{"\xc3", "\xa9"}) // "é" split in two
	check([]string{"é", "", "€"})
	for range 2000 {
		values := make([]string, rnd.IntN(5))
		for i := range values {
			for range rnd.IntN(3) {
				values[i] += alphabet[rnd.IntN(len(alphabet))]
			}
		}
		check(values)
	}
}
