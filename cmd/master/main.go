// Command master is the Tidemark master: it schedules merges of each store's WAL
// generations into its base table, coordinated through etcd.
//
//	master serve     run the master until SIGINT or SIGTERM
//	master admin …   operate a running master through its AdminService
//	master version   print the version
//	master dev …     run a local cluster: execs master-dev (cmd/master-dev), which
//	                 this binary does not link (nor the embedded etcd server)
//
// Every flag is also an environment variable; `master serve --help` and
// `master admin --help` list them. This package only parses flags and wires
// packages together; the master itself is pkg/master.
package main

import (
	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

func main() {
	cli.Main(newRootCmd)
}

func newRootCmd() *cobra.Command {
	return cli.NewRootCmd("master", "Tidemark master: schedules serial WAL merges through etcd",
		newServeCmd(), newAdminCmd(), cli.NewVersionCmd(), newDevCmd())
}
