//go:build tools

// Package deps pins modules that later packages import, so go mod tidy keeps them.
package deps

import (
	_ "github.com/RoaringBitmap/roaring/v2"
	_ "github.com/apache/arrow-go/v18/parquet/pqarrow"
	_ "github.com/bits-and-blooms/bloom/v3"
	_ "github.com/google/uuid"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "google.golang.org/grpc"
)
