//go:build unix && !linux

package devcluster

import (
	"os"
	"syscall"
)

// childAttr puts a child in a process group of its own, so a terminal's Ctrl-C
// reaches only the dev process (which orders the shutdown). Outside Linux there
// is no parent-death signal: a dev process killed with SIGKILL leaves its
// children running.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// terminate asks a child to shut down gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
