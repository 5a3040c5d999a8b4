// Command master is the Tidemark master: it schedules merges of each store's WAL
// generations into its base table, coordinated through etcd.
//
//	master serve     run the master until SIGINT or SIGTERM
//	master admin …   operate a running master through its AdminService
//	master version   print the version
//
// Every flag is also an environment variable; `master serve --help` and
// `master admin --help` list them. This package only parses flags and wires
// packages together; the master itself is pkg/master.
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
		Use:               "master",
		Short:             "Tidemark master: schedules serial WAL merges through etcd",
		Version:           cli.Version(),
		SilenceUsage:      true,
		PersistentPreRunE: cli.LoadEnv,
	}
	root.AddCommand(newServeCmd(), newAdminCmd(), cli.NewVersionCmd())
	root.AddCommand(newDevCmd())
	return root
}
