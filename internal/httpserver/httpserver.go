// Package httpserver runs an HTTP server for as long as its process does and stops
// it gracefully: the one shutdown both the worker's data API and the master's HTTP
// API go through.
//
// Invariants: a server that stops on its context lets the requests it accepted
// finish within the shutdown timeout and cuts off what is still running after it,
// then reports them; its listener is closed in every case; a server that fails on
// its own returns that failure.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve answers requests of hs on ln until ctx is done, then shuts down: it calls
// draining (when not nil) so the server can refuse new requests before the wait
// begins (a health route answering 503 tells load balancers), stops accepting,
// waits up to timeout for the requests in flight and cuts off the rest. It returns
// nil after a clean shutdown, and an error if serving failed or requests were still
// running when the timeout passed.
func Serve(ctx context.Context, hs *http.Server, ln net.Listener, timeout time.Duration, log *slog.Logger, draining func()) error {
	addr := ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("http server listening", "addr", addr)
	select {
	case err := <-served:
		return fmt.Errorf("http server on %s: %w", addr, err)
	case <-ctx.Done():
	}
	if draining != nil {
		draining()
	}
	log.Info("http server shutting down", "addr", addr, "timeout", timeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	shutdownErr := hs.Shutdown(sctx)
	if shutdownErr != nil {
		_ = hs.Close() // cut off what is still running
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server on %s: %w", addr, err)
	}
	if shutdownErr != nil {
		return fmt.Errorf("http server on %s: requests still running after %s: %w", addr, timeout, shutdownErr)
	}
	log.Info("http server stopped", "addr", addr)
	return nil
}
