package table

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
)

// Deletion vectors are roaring bitmaps of row offsets within one fragment, the same
// representation Iceberg and Delta use. A fragment's vector is replaced, never edited:
// a commit that deletes more rows writes the union to a new file.
const deletionMagic = "TMDV"

func encodeDeletions(bm *roaring.Bitmap) ([]byte, error) {
	bm.RunOptimize()
	payload, err := bm.ToBytes()
	if err != nil {
		return nil, fmt.Errorf("encode deletion vector: %w", err)
	}
	return seal(deletionMagic, payload), nil
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
