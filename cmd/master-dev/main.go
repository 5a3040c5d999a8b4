// Command master-dev runs a whole Tidemark cluster on one machine, for development and
// trying it out: an embedded single-node etcd, a master and N workers, each its own
// process. It is what `master dev` (and `make run`) runs: the master binary execs it,
// so the production master does not link the embedded etcd server.
//
//	master-dev [flags]   run the cluster until SIGINT or SIGTERM (same as `master dev`)
//
// Every flag is also an environment variable; `master-dev --help` lists them. This
// package only parses flags; the cluster itself is tools/devcluster.
package main

import (
	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

func main() {
	cli.Main(newRootCmd)
}

// newRootCmd is the dev command itself, as the root: `master dev <flags>` execs
// `master-dev <flags>`, so both take the same command line.
func newRootCmd() *cobra.Command {
	cmd := newDevCmd()
	cmd.Version = cli.Version()
	cmd.SilenceUsage = true
	cmd.PersistentPreRunE = cli.LoadEnv
	return cmd
}
