// Command master is the Tidemark master: it schedules merges of each store's WAL
// generations into its base table, coordinated through etcd.
//
//	master version   print the version
//
// For now it has only `version`. The serve, admin and dev subcommands (the etcd task
// store, the stats scanner, the serial MergeWal fan-out, the AdminService client and an
// embedded single-node etcd) arrive with the master issue. Like the worker, every flag
// will also be an environment variable, and this package will only parse flags and wire
// packages together; behaviour lives in pkg/.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
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
	root.AddCommand(cli.NewVersionCmd())
	return root
}
