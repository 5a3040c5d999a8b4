package grpcserver

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// serve starts New(nil, health, opts...) on a loopback port and returns a health
// client connected to it.
func serve(t *testing.T, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	hs := health.NewServer()
	gs := New(nil, hs, opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// check sends a health check whose request is about n bytes and returns its code.
func check(t *testing.T, c healthpb.HealthClient, n int) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: strings.Repeat("s", n)})
	return status.Code(err)
}

// TestOversizedRequestIsResourceExhausted: a request over the receive limit is
// refused with RESOURCE_EXHAUSTED before the server decodes it; one under the limit
// reaches the service (which answers NOT_FOUND for an unknown service name).
func TestOversizedRequestIsResourceExhausted(t *testing.T) {
	c := serve(t)
	if got := check(t, c, DefaultMaxRecvMsgBytes+1024); got != codes.ResourceExhausted {
		t.Fatalf("request over %d bytes: %s, want ResourceExhausted", DefaultMaxRecvMsgBytes, got)
	}
	if got := check(t, c, DefaultMaxRecvMsgBytes-1024); got != codes.NotFound {
		t.Fatalf("request under the limit: %s, want NotFound from the health service", got)
	}
}

// TestCallerOptionsOverrideTheReceiveLimit: the worker and master pass a lower
// limit; theirs wins over the default.
func TestCallerOptionsOverrideTheReceiveLimit(t *testing.T) {
	c := serve(t, grpc.MaxRecvMsgSize(1<<20))
	if got := check(t, c, 2<<20); got != codes.ResourceExhausted {
		t.Fatalf("2 MiB request with a 1 MiB limit: %s, want ResourceExhausted", got)
	}
}
