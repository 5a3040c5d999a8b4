// Command worker is a Tidemark worker: it serves the data API and owns one shard (its
// instance id) in every store it writes.
//
//	worker serve     serve HTTP until SIGINT or SIGTERM
//	worker version   print the version
//
// Every flag is also an environment variable; `worker serve --help` lists them.
// This package only parses flags and wires packages together; the server is
// pkg/worker.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a graceful shutdown, a second one kills at once.
	context.AfterFunc(ctx, stop)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:               "worker",
		Short:             "Tidemark worker: ingests writes into per-worker WAL shards",
		Version:           cli.Version(),
		SilenceUsage:      true,
		PersistentPreRunE: cli.LoadEnv,
	}
	root.AddCommand(newServeCmd(), cli.NewVersionCmd())
	root.AddCommand(newLoadCmd())
	return root
}
