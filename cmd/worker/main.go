// Command worker is a Tidemark worker: it serves the data API and owns one shard (its
// instance id) in every store it writes.
//
//	worker serve     serve HTTP until SIGINT or SIGTERM
//	worker tail      print a store's change feed as JSON lines
//	worker export    export a store's live rows to a bucket (an export task)
//	worker version   print the version
//
// Every flag is also an environment variable; `worker serve --help` lists them.
// This package only parses flags and wires packages together; the server is
// pkg/worker.
package main

import (
	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

func main() {
	cli.Main(newRootCmd)
}

func newRootCmd() *cobra.Command {
	return cli.NewRootCmd("worker", "Tidemark worker: ingests writes into per-worker WAL shards",
		newServeCmd(), cli.NewVersionCmd(), newLoadCmd(), newTailCmd(), newExportCmd())
}
