//go:build !unix

package main

import (
	"errors"
	"os"
	"os/exec"
)

// execDev runs master-dev as a child with this process's standard streams and exits
// with its status (no exec(2) here).
func execDev(path string, args []string) error {
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	return err
}
