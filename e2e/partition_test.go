package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// partitionProxy forwards TCP connections to a target until cut: then it closes
// every connection and refuses new ones until healed. A worker that reaches etcd
// through it loses etcd (its lease expires, it leaves P/workers/) while it keeps
// serving clients and writing to the object store: the partition that adoption of
// its shard must survive without losing an acknowledged row.
type partitionProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

func newPartitionProxy(t *testing.T, target string) *partitionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { _ = ln.Close(); p.setCut(true) })
	go p.serve()
	return p
}

func (p *partitionProxy) addr() string { return p.ln.Addr().String() }

func (p *partitionProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		go p.forward(c)
	}
}

func (p *partitionProxy) forward(c net.Conn) {
	if !p.track(c) {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// track registers a connection unless the proxy is cut.
func (p *partitionProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = true
	return true
}

// setCut cuts (closing every connection) or heals the partition.
func (p *partitionProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}
