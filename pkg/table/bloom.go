package table

import (
	"fmt"

	"github.com/bits-and-blooms/bloom/v3"
)

// Every fragment has an id bloom filter in a sidecar object, so a point lookup or a
// commit's conflict check opens only fragments that may hold the id. The filters stay
// out of the manifest to keep the manifest small: the scanner reads thousands of them.
const (
	bloomMagic = "TMBF"
	// bloomFPRate trades ~14.4 bits per id for opening 1 in 1000 non-matching fragments.
	// A merge checks every incoming id against every fragment, so at 1% a 200-row merge
	// still opened most fragments' key indexes (BENCHMARKS.md, commit storm).
	bloomFPRate = 0.001
)

func newBloom(n int) *bloom.BloomFilter {
	if n < 1 {
		n = 1
	}
	return bloom.NewWithEstimates(uint(n), bloomFPRate)
}

func encodeBloom(f *bloom.BloomFilter) ([]byte, error) {
	payload, err := f.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("encode bloom filter: %w", err)
	}
	return seal(bloomMagic, payload), nil
}

func decodeBloom(key string, data []byte) (*bloom.BloomFilter, error) {
	payload, err := unseal(key, bloomMagic, data)
	if err != nil {
		return nil, err
	}
	f := &bloom.BloomFilter{}
	if err := f.UnmarshalBinary(payload); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", key, ErrCorrupt, err)
	}
	return f, nil
}
