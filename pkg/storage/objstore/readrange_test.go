package objstore

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// readRange answers what the reader holds, whatever the length it was told:
// fewer bytes when the object ends first, all of them when a backend answers
// more than the range, and the reader's error.
func TestReadRangeAnswersWhatTheReaderHolds(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	for _, c := range []struct {
		name   string
		held   int
		length int64
	}{
		{"exact", 4096, 4096},
		{"object ends first", 100, 4096},
		{"empty object", 0, 4096},
		{"longer answer", 5000, 4096},
		{"to the end", 3000, -1},
		{"past the preallocation", 3000, rangeBuffer + 1},
	} {
		got, err := readRange(iotest.HalfReader(bytes.NewReader(data[:c.held])), c.length)
		if err != nil || !bytes.Equal(got, data[:c.held]) {
			t.Errorf("%s: %d bytes (%v), want %d", c.name, len(got), err, c.held)
		}
	}
	boom := errors.New("boom")
	if _, err := readRange(io.MultiReader(bytes.NewReader(data[:10]), iotest.ErrReader(boom)), 100); !errors.Is(err, boom) {
		t.Errorf("a failing reader: %v, want %v", err, boom)
	}
}
