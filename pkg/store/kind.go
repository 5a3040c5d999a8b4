package store

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// inputSchema is what clients append to a store of entry's kind: the store's
// columns, without _seq (the WAL adds it; wal.StoreSchema is the table's schema).
// blobs are its blob columns (see Store.BlobColumns).
func inputSchema(e registry.Entry) (input *arrow.Schema, blobs []string, err error) {
	switch e.Kind {
	case registry.KindRollout:
		return schema.Rollout(), []string{schema.BinaryPayloadColumn}, nil
	case registry.KindGeneric:
		spec, err := schema.ParseSpec(e.Schema)
		if err != nil {
			return nil, nil, fmt.Errorf("generic store %q: registered schema: %w", e.Name, err)
		}
		return spec.Schema(), spec.BlobColumns(), nil
	}
	return nil, nil, fmt.Errorf("store %q: unknown kind %q", e.Name, e.Kind)
}
