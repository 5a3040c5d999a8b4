package table

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
)

// Deletion vectors are roaring bitmaps of row offsets within one fragment, the same
// representation Iceberg and Delta use. A fragment's vector is replaced, never edited:
// a commit that deletes more rows writes the union as a new vector.
//
// A commit writes the vectors of every fragment it deletes from into one object
// (packDeletions), each in its own envelope, back to back: a merge of random ids
// into a large store deletes from most of its fragments, and one object per
// fragment cost a write each (a PUT on S3; a write, an fsync and a rename on a
// local disk). Each fragment's DeletionRef names its envelope by offset and
// length, so a reader fetches one vector in one ranged read, checks it alone (its
// own CRC), and a damaged envelope is a problem of the fragments that point at it.
// Objects of other commits' vectors stay referenced by the fragments that point
// at them: an object is garbage only when no retained version names it.
const deletionMagic = "TMDV"

func encodeDeletions(bm *roaring.Bitmap) ([]byte, error) {
	bm.RunOptimize()
	payload, err := bm.ToBytes()
	if err != nil {
		return nil, fmt.Errorf("encode deletion vector: %w", err)
	}
	return seal(deletionMagic, payload), nil
}

// packDeletions encodes bms as one object, each in its envelope, and returns it
// with each vector's ref (Path left for the caller).
func packDeletions(bms []*roaring.Bitmap) ([]byte, []DeletionRef, error) {
	var data []byte
	refs := make([]DeletionRef, len(bms))
	for i, bm := range bms {
		one, err := encodeDeletions(bm)
		if err != nil {
			return nil, nil, err
		}
		refs[i] = DeletionRef{Count: int64(bm.GetCardinality()), Offset: int64(len(data)), Bytes: int64(len(one))}
		data = append(data, one...)
	}
	return data, refs, nil
}

func decodeDeletions(key string, data []byte, rows int64) (*roaring.Bitmap, error) {
	payload, err := unseal(key, deletionMagic, data)
	if err != nil {
		return nil, err
	}
	bm := roaring.New()
	if err := bm.UnmarshalBinary(payload); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", key, ErrCorrupt, err)
	}
	// The library decodes containers without checking them (a run container with no
	// runs decodes, then Maximum panics); Validate is its own consistency check.
	if err := bm.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", key, ErrCorrupt, err)
	}
	if !bm.IsEmpty() && int64(bm.Maximum()) >= rows {
		return nil, fmt.Errorf("%s: %w: deletes row %d of a %d-row fragment", key, ErrCorrupt, bm.Maximum(), rows)
	}
	return bm, nil
}

// decodeDeletionRef decodes the vector ref names, of a fragment of rows rows,
// from data (its bytes: the whole object, or the part the ref names) and checks
// its count against the manifest's. The key in errors names the part.
func decodeDeletionRef(key string, ref DeletionRef, data []byte, rows int64) (*roaring.Bitmap, error) {
	if ref.packed() {
		key = fmt.Sprintf("%s [%d,+%d)", key, ref.Offset, ref.Bytes)
	}
	bm, err := decodeDeletions(key, data, rows)
	if err != nil {
		return nil, err
	}
	if int64(bm.GetCardinality()) != ref.Count {
		return nil, fmt.Errorf("%s: %w: %d deletions, manifest says %d", key, ErrCorrupt, bm.GetCardinality(), ref.Count)
	}
	return bm, nil
}
