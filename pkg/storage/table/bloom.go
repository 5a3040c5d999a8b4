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
	// bloomFPRate trades ~14 bits per id for a false positive in 1 of 1,000 probes.
	// A false positive costs a sorted fragment's lookup one key-index block (a
	// ranged read of a few KiB); what the filters cost is their bytes, read for
	// every fragment a merge's ids fall in and kept in the table cache: at 19 bits
	// per id (0.01%, when a false positive cost a whole in-memory key index) a
	// store of 10M rows needed 24 MB of filters and a merge of 1,000 new ids read
	// most of them again (BENCHMARKS.md, stores of millions of rows).
	bloomFPRate = 0.001
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

// maxBloomHashes bounds k: the filters written here use 10 (bloomFPRate; 14 at 0.01%), and every
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
