package devcluster

import (
	"os"
	"syscall"
)

// childAttr puts a child in a process group of its own, so a terminal's Ctrl-C
// reaches only the dev process (which orders the shutdown), and has the kernel
// kill the child if the dev process dies without shutting it down.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// terminate asks a child to shut down gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
