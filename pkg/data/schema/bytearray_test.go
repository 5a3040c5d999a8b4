package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// byteArraySpec has a binary column and a list of binary.
const byteArraySpec = `{"columns":[["id",{"type":"string"}],["blob",{"type":"binary","nullable":true}],` +
	`["blobs",{"type":"list","item":{"type":"binary"},"nullable":true}]]}`

// A generic store's binary value is base64 or an array of bytes, as the
// reference's generic codec (generic_codec.rs as_bytes) reads it; both spellings
// store the same bytes, and the answer is always base64.
func TestGenericBinaryTakesByteArrays(t *testing.T) {
	codec := mustSpec(t, byteArraySpec).Codec()
	rows := []json.RawMessage{
		json.RawMessage(`{"id":"a","blob":"AAH/","blobs":["AAH/"]}`),
		json.RawMessage(`{"id":"b","blob":[0, 1,255],"blobs":[[0,1,255],[]]}`),
		json.RawMessage(`{"id":"c","blob":[]}`),
	}
	rec, err := codec.Decode(rows)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	blob := rec.Column(1).(*array.Binary)
	if string(blob.Value(0)) != "\x00\x01\xff" || string(blob.Value(1)) != "\x00\x01\xff" || blob.IsNull(2) || len(blob.Value(2)) != 0 {
		t.Errorf("blob column: %q %q %q (null %v)", blob.Value(0), blob.Value(1), blob.Value(2), blob.IsNull(2))
	}
	enc, err := EncodeRows(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(enc[1]), `{"id":"b","blob":"AAH/","blobs":["AAH/",""]}`; got != want {
		t.Errorf("encoded %s, want %s", got, want)
	}
}

// An element that is not a byte is a 400 naming the row, the column and the
// element's index; the rollout schema keeps base64 only.
func TestGenericByteArrayErrorsNameTheIndex(t *testing.T) {
	codec := mustSpec(t, byteArraySpec).Codec()
	for row, want := range map[string]string{
		`{"id":"a","blob":[1,256]}`:        `row 0, column "blob" at [1]: expected a byte (an integer 0-255), got number 256`,
		`{"id":"a","blob":[-1]}`:           `row 0, column "blob" at [0]: expected a byte (an integer 0-255), got number -1`,
		`{"id":"a","blob":[1,2,1.5]}`:      `row 0, column "blob" at [2]: expected a byte (an integer 0-255), got number 1.5`,
		`{"id":"a","blob":[1e2]}`:          `row 0, column "blob" at [0]: expected a byte (an integer 0-255), got number 1e2`,
		`{"id":"a","blob":["1"]}`:          `row 0, column "blob" at [0]: expected a byte (an integer 0-255), got string "1"`,
		`{"id":"a","blob":[null]}`:         `row 0, column "blob" at [0]: expected a byte (an integer 0-255), got null`,
		`{"id":"a","blobs":[[1],[7,300]]}`: `row 0, column "blobs" at [1][1]: expected a byte (an integer 0-255), got number 300`,
		`{"id":"a","blob":{"b":1}}`:        `row 0, column "blob": expected a base64 string or an array of bytes (integers 0-255), got an object`,
		`{"id":"a","blob":7}`:              `row 0, column "blob": expected a base64 string or an array of bytes (integers 0-255), got number 7`,
	} {
		_, err := codec.Decode([]json.RawMessage{json.RawMessage(row)})
		var e *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &e) || err.Error() != want {
			t.Errorf("%s: error %v, want %q", row, err, want)
		}
	}
	_, err := DecodeRollouts([]json.RawMessage{json.RawMessage(`{"id":"x","rollout_id":"r","binary_payload":[1,2]}`)}, testNow)
	if err == nil || !strings.Contains(err.Error(), "base64") {
		t.Errorf("rollout binary_payload as an array: %v, want the base64 error", err)
	}
}
