package table

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/bits-and-blooms/bloom/v3"
)

// Every fragment has an id bloom filter in a sidecar object, so a point lookup or a
// commit's conflict check opens only fragments that may hold the id. The filters stay
// out of the manifest to keep the manifest small: the scanner reads thousands of them.
const (
	bloomMagic = "TMBF"
	// bloomFPRate trades ~19 bits per id for a false positive in 1 of 10,000 probes.
	// A merge checks every incoming id against every fragment, and one false positive
	// costs the key index (two round trips after the filter's one). At 1% a 200-row
	// merge opened most fragments' key indexes; at 0.1% an 800-row merge still
	// opened more than half of them (BENCHMARKS.md, commit storm); at 0.01% a
	// merge of 800 ids opens 8% of them, one of 7,000 ids half.
	bloomFPRate = 0.0001
)

// bloomUseless reports whether probing a filter for n ids is likely (more than
// even odds) to find a false positive, so that a caller who reads the key index
// on any hit should read it straight away: 1-(1-p)^n > 1/2 once n*p > ln 2.
func bloomUseless(n int) bool { return float64(n)*bloomFPRate > math.Ln2 }

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

// maxBloomHashes bounds k: the filters written here use 14 (bloomFPRate; 10 before it was lowered), and every
// lookup computes k hashes, so a corrupt k of 2^60 would hang the reader.
const maxBloomHashes = 64

func decodeBloom(key string, data []byte) (*bloom.BloomFilter, error) {
	payload, err := unseal(key, bloomMagic, data)
	if err != nil {
		return nil, err
	}
	if err := checkBloomHeader(payload); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", key, ErrCorrupt, err)
	}
	f := &bloom.BloomFilter{}
	if err := f.UnmarshalBinary(payload); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", key, ErrCorrupt, err)
	}
	return f, nil
}

// checkBloomHeader checks the payload's header against its length before the
// library decodes it: the library allocates the bit set from the header's length
// (a flipped bit asks for terabytes), divides by m (0 panics) and loops k times.
// The payload is m uint64 | k uint64 | bit-set length uint64 (= m) | the bit set's
// ceil(m/64) words, all big-endian.
func checkBloomHeader(p []byte) error {
	const header = 3 * 8
	if len(p) < header {
		return fmt.Errorf("bloom filter of %d bytes, shorter than its header", len(p))
	}
	m, k, bits := binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:]), binary.BigEndian.Uint64(p[16:])
	words := uint64(len(p)-header) / 8
	switch {
	case m == 0 || k == 0 || k > maxBloomHashes:
		return fmt.Errorf("bloom filter with m=%d bits and k=%d hashes", m, k)
	case bits != m:
		return fmt.Errorf("bloom filter of m=%d bits holds a bit set of %d", m, bits)
	case uint64(len(p)-header)%8 != 0 || words != m/64+min(m%64, 1):
		return fmt.Errorf("bloom filter of m=%d bits has %d bytes of bit set", m, len(p)-header)
	}
	return nil
}
