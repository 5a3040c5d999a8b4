package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// devBinary is the command that runs the local cluster (cmd/master-dev). It lives
// apart from this binary so that a production master does not link the embedded
// etcd server: `make build` puts it next to master in bin/.
const devBinary = "master-dev"

// newDevCmd is `master dev`: it runs master-dev with the same arguments, in this
// process (exec), telling it to run this binary as the cluster's master. Its flags
// are master-dev's (`master dev --help` prints them).
func newDevCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "dev",
		Short:              "Run a whole cluster on this machine: embedded etcd, this master and N workers, until Ctrl-C (runs master-dev)",
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("master dev: find this binary: %w", err)
			}
			dev, err := findDevBinary(self)
			if err != nil {
				return err
			}
			// A flag given on the command line wins over the environment, so the
			// master is only named here when the caller did not name one.
			if _, set := os.LookupEnv("DEV_MASTER_BINARY"); !set {
				args = append([]string{"--master-binary=" + self}, args...)
			}
			return execDev(dev, args)
		},
	}
}

// findDevBinary finds master-dev next to this binary, where `make build` puts it
// (only there: whatever master-dev a PATH holds may be another build's).
func findDevBinary(self string) (string, error) {
	next := filepath.Join(filepath.Dir(self), devBinary)
	if _, err := os.Stat(next); err != nil {
		return "", fmt.Errorf("master dev: %w: production builds leave %s out; `make build` "+
			"builds it next to master in bin/ (or go build -o <dir of master>/ ./cmd/master-dev)", err, devBinary)
	}
	return next, nil
}
