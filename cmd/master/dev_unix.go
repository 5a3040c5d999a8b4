//go:build unix

package main

import (
	"fmt"
	"os"
	"syscall"
)

// execDev replaces this process with master-dev, so signals (Ctrl-C, SIGTERM) and the
// exit status are its own, exactly as if it had been run directly.
func execDev(path string, args []string) error {
	if err := syscall.Exec(path, append([]string{path}, args...), os.Environ()); err != nil {
		return fmt.Errorf("master dev: exec %s: %w", path, err)
	}
	return nil // not reached
}
