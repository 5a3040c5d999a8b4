package wal

import "github.com/apache/arrow-go/v18/arrow"

// StoreSchema returns the schema of the rows a shard stores for the given input
// schema: the input columns followed by a non-null uint64 _seq. A store's base table
// has exactly this schema, so generations append to it as they are.
func StoreSchema(input *arrow.Schema) (*arrow.Schema, error) { return storeSchema(input) }
