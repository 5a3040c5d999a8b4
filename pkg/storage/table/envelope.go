package table

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Small binary objects (deletion vectors, bloom filters) are wrapped in an envelope:
//
//	magic [4]byte | length uint64 LE | crc32c(payload) uint32 LE | payload
//
// so a truncated or corrupted object is detected before its payload is parsed; the
// payload decoders size allocations from headers, and a flipped bit there must not
// turn into a multi-gigabyte allocation.
const envelopeHeader = 4 + 8 + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func seal(magic string, payload []byte) []byte {
	out := make([]byte, envelopeHeader, envelopeHeader+len(payload))
	copy(out, magic)
	binary.LittleEndian.PutUint64(out[4:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(out[12:], crc32.Checksum(payload, castagnoli))
	return append(out, payload...)
}

func unseal(key, magic string, data []byte) ([]byte, error) {
	if len(data) < envelopeHeader || string(data[:4]) != magic {
		return nil, fmt.Errorf("%s: %w: not a %q object", key, ErrCorrupt, magic)
	}
	n := binary.LittleEndian.Uint64(data[4:])
	payload := data[envelopeHeader:]
	if uint64(len(payload)) != n {
		return nil, fmt.Errorf("%s: %w: payload is %d bytes, header says %d", key, ErrCorrupt, len(payload), n)
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(data[12:]) {
		return nil, fmt.Errorf("%s: %w: checksum mismatch", key, ErrCorrupt)
	}
	return payload, nil
}
