//go:build !unix

package devcluster

import (
	"os"
	"syscall"
)

// childAttr has nothing to set where there are no process groups.
func childAttr() *syscall.SysProcAttr { return nil }

// terminate kills a child: there is no SIGTERM to send.
func terminate(p *os.Process) error { return p.Kill() }
