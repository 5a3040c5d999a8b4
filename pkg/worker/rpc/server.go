package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/grpcserver"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// gRPC server limits. Requests are a target and a token, answers at most one line
// per resident store, so the message caps are small; a merge can take minutes, so
// connections are kept up by keepalive pings instead of being aged out.
const (
	grpcMaxRecvBytes         = 1 << 20
	grpcMaxSendBytes         = 16 << 20
	grpcMaxConcurrentStreams = 256
	grpcConnectionTimeout    = 10 * time.Second
	// grpcKeepaliveTime and grpcKeepaliveTimeout: ping an idle client every 30 s and
	// drop the connection if the ping is not answered in 10 s (a dead master).
	grpcKeepaliveTime    = 30 * time.Second
	grpcKeepaliveTimeout = 10 * time.Second
)

// MinClientKeepaliveTime is the shortest keepalive interval a gRPC client of the
// worker may use: a client pinging more often is sent GOAWAY ("too_many_pings").
// Clients may ping without active calls.
const MinClientKeepaliveTime = 10 * time.Second

// GRPCConfig is what NewGRPCServer needs.
type GRPCConfig struct {
	// Service is the WorkerService to serve. Required.
	Service *WorkerService
	// Logger receives a line per failed call and per recovered panic; nil discards.
	Logger *slog.Logger
	// Options are added after the server's own (transport credentials for TLS,
	// interceptors).
	Options []grpc.ServerOption
	// Auth guards every call but health's (the WorkerService, reflection); nil:
	// no authentication (--auth-disabled).
	Auth *auth.Guard
	// TLS, if set, serves TLS with it.
	TLS *tls.Config
}

// NewGRPCServer returns a gRPC server with the WorkerService, the standard health
// service (grpc.health.v1.Health, from Service.Health) and server reflection (so
// grpcurl works without the .proto files) registered. Every call runs under a
// recover: a panic answers INTERNAL and is logged with its stack instead of killing
// the worker. With cfg.Auth, every call but health's needs the credential.
func NewGRPCServer(cfg GRPCConfig) (*grpc.Server, error) {
	if cfg.Service == nil {
		return nil, errors.New("grpc server: Service is required")
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(grpcMaxRecvBytes),
		grpc.MaxSendMsgSize(grpcMaxSendBytes),
		grpc.MaxConcurrentStreams(grpcMaxConcurrentStreams),
		grpc.ConnectionTimeout(grpcConnectionTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    grpcKeepaliveTime,
			Timeout: grpcKeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             MinClientKeepaliveTime,
			PermitWithoutStream: true,
		}),
	}
	opts = append(opts, auth.ServerCredentials(cfg.TLS)...)
	opts = append(opts, cfg.Auth.ServerOptions()...)
	gs := grpcserver.New(cfg.Logger, cfg.Service.Health(), append(opts, cfg.Options...)...)
	tidemarkv1.RegisterWorkerServiceServer(gs, cfg.Service)
	return gs, nil
}

// DefaultShutdownTimeout bounds the graceful stop when GRPCServeOptions leave it
// zero (the HTTP API's default too).
const DefaultShutdownTimeout = 20 * time.Second

// GRPCServeOptions configure ServeGRPC.
type GRPCServeOptions struct {
	// ShutdownTimeout bounds the graceful stop; zero means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Health, if set, is switched to NOT_SERVING when shutdown starts, so health
	// checkers stop routing calls here before the listener closes.
	Health *health.Server
	Logger *slog.Logger
}

// ServeGRPC serves gs on ln until ctx is done, then stops gracefully: new calls are
// refused, calls in flight (a merge may be one) get up to the shutdown timeout to
// finish, then they are cancelled and the connections closed. It returns nil after a
// clean stop, and an error if serving failed or calls had to be cut off. ln is
// closed in every case.
func ServeGRPC(ctx context.Context, gs *grpc.Server, ln net.Listener, opts GRPCServeOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	return grpcserver.Serve(ctx, gs, ln, timeout, opts.Health, log)
}
