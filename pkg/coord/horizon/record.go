package horizon

import (
	"encoding/json"
	"fmt"
	"time"
)

// Record is one shard's key.
type Record struct {
	// Epoch is the writer epoch of the shard's writer that wrote the record.
	Epoch uint64 `json:"epoch"`
	// Promise: every row of the shard with _seq <= Promise is sealed, every later
	// row is numbered above it.
	Promise uint64 `json:"promise"`
	// Open is set while a writer may number rows: the shard holds the store's
	// horizon at Promise. A closed shard has nothing unsealed and no writer.
	Open bool `json:"open"`
	// Instance is the worker that wrote the record, and At when (its clock): for
	// operators reading the key with etcdctl.
	Instance string    `json:"instance"`
	At       time.Time `json:"at"`
}

func (r Record) encode() string {
	data, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("horizon: encode record: %v", err)) // fixed types: cannot fail
	}
	return string(data)
}

func decode(data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("decode horizon record: %w", err)
	}
	return r, nil
}

// Of is a store's horizon from its shards' records: the smallest promise of the
// open shards, or, when none is open, the largest promise of all (every row is
// sealed, and the next writer numbers above it). ok is false without records.
func Of(records []Record) (h uint64, ok bool) {
	var open, closed bool
	var lo, hi uint64
	for _, r := range records {
		hi = max(hi, r.Promise)
		if r.Open {
			if !open || r.Promise < lo {
				lo = r.Promise
			}
			open = true
		} else {
			closed = true
		}
	}
	switch {
	case open:
		return lo, true
	case closed:
		return hi, true
	}
	return 0, false
}
