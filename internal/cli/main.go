package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// NewRootCmd is the root command every Tidemark binary starts from, with its
// subcommands: it reports the build version, prints no usage on a command's error,
// loads environment variables into unset flags before any subcommand runs, and
// fails on an unknown subcommand or a stray argument at any level (ErrUnknownCommand).
func NewRootCmd(use, short string, subcommands ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:               use,
		Short:             short,
		Version:           Version(),
		SilenceUsage:      true,
		PersistentPreRunE: LoadEnv,
	}
	root.AddCommand(subcommands...)
	refuseStrayArgs(root)
	return root
}

// Main runs the root command newRoot builds with a context that SIGINT or SIGTERM
// cancels, and exits with status 1 if the command fails. After the first signal starts
// a graceful shutdown, a second one kills the process at once.
func Main(newRoot func() *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a graceful shutdown, a second one kills at once.
	context.AfterFunc(ctx, stop)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}
