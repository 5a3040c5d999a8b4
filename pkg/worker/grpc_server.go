package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

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
}

// NewGRPCServer returns a gRPC server with the WorkerService, the standard health
// service (grpc.health.v1.Health, from Service.Health) and server reflection (so
// grpcurl works without the .proto files) registered. Every call runs under a
// recover: a panic answers INTERNAL and is logged with its stack instead of killing
// the worker.
func NewGRPCServer(cfg GRPCConfig) (*grpc.Server, error) {
	if cfg.Service == nil {
		return nil, errors.New("grpc server: Service is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
		grpc.ChainUnaryInterceptor(unaryRecover(log), unaryLog(log)),
		grpc.ChainStreamInterceptor(streamRecover(log)),
	}
	gs := grpc.NewServer(append(opts, cfg.Options...)...)
	tidemarkv1.RegisterWorkerServiceServer(gs, cfg.Service)
	healthpb.RegisterHealthServer(gs, cfg.Service.Health())
	reflection.Register(gs)
	return gs, nil
}

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
	addr := ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	log.Info("grpc server listening", "addr", addr)

	select {
	case err := <-served:
		gs.Stop()
		if err == nil {
			return fmt.Errorf("grpc server on %s: stopped by someone else", addr)
		}
		return fmt.Errorf("grpc server on %s: %w", addr, err)
	case <-ctx.Done():
	}

	log.Info("grpc server shutting down", "addr", addr, "timeout", timeout.String())
	if opts.Health != nil {
		opts.Health.Shutdown()
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var cutOff bool
	select {
	case <-stopped:
	case <-timer.C:
		cutOff = true
		gs.Stop() // cancels the calls still running and closes every connection
		<-stopped
	}
	if err := <-served; err != nil {
		return fmt.Errorf("grpc server on %s: %w", addr, err)
	}
	if cutOff {
		return fmt.Errorf("grpc server on %s: calls still running after %s were cancelled", addr, timeout)
	}
	log.Info("grpc server stopped", "addr", addr)
	return nil
}

func unaryRecover(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("grpc call panicked", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = nil, status.Errorf(codes.Internal, "%s: internal error (panic): %v", info.FullMethod, p)
			}
		}()
		return next(ctx, req)
	}
}

func streamRecover(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("grpc stream panicked", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				err = status.Errorf(codes.Internal, "%s: internal error (panic): %v", info.FullMethod, p)
			}
		}()
		return next(srv, ss)
	}
}

// unaryLog logs failed calls (at warn for server-side failures, debug for the
// caller's mistakes) and successful ones at debug.
func unaryLog(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		code := status.Code(err)
		level := slog.LevelDebug
		switch code {
		case codes.OK, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.Canceled:
		default:
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "grpc call", "method", info.FullMethod, "code", code.String(),
			"duration", time.Since(start).String(), "err", errString(err))
		return resp, err
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return status.Convert(err).Message()
}
