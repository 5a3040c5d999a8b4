package grpcserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// DefaultMaxRecvMsgBytes bounds a request message unless the caller's options say
// otherwise. grpc-go's default happens to be the same 4 MiB; it is explicit here so a
// library upgrade cannot raise it. A larger request fails with RESOURCE_EXHAUSTED
// before it is decoded; Tidemark's requests are small (rows go over HTTP).
const DefaultMaxRecvMsgBytes = 4 << 20

// New returns a gRPC server built with Interceptors(log), a receive limit of
// DefaultMaxRecvMsgBytes, then opts (which may set a lower or higher limit), with
// the standard health service (hs) and server reflection (so grpcurl works without
// the .proto files) registered. The caller registers its own service on it. A nil
// log discards.
func New(log *slog.Logger, hs healthpb.HealthServer, opts ...grpc.ServerOption) *grpc.Server {
	base := append(Interceptors(log), grpc.MaxRecvMsgSize(DefaultMaxRecvMsgBytes))
	gs := grpc.NewServer(append(base, opts...)...)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs
}

// Interceptors returns the server options that run every call under a recover (a
// panic answers INTERNAL and is logged with its stack instead of killing the
// process) and log every unary call. A nil log discards.
func Interceptors(log *slog.Logger) []grpc.ServerOption {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unaryRecover(log), unaryLog(log)),
		grpc.ChainStreamInterceptor(streamRecover(log)),
	}
}

// Serve serves gs on ln until ctx is done, then stops gracefully: hs (if not nil)
// answers NOT_SERVING, so health checkers stop routing calls here, new calls are
// refused, calls in flight get up to timeout to finish, then they are cancelled and
// the connections closed. It returns nil after a clean stop, and an error if serving
// failed or calls had to be cut off. ln is closed in every case.
func Serve(ctx context.Context, gs *grpc.Server, ln net.Listener, timeout time.Duration, hs *health.Server, log *slog.Logger) error {
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
	if hs != nil {
		hs.Shutdown()
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

// unaryLog logs calls: failures on the server's side at warn, the caller's mistakes
// and successes at debug. Refused credentials are the caller's mistake too, and the
// auth guard already logged them at warn with the reason.
func unaryLog(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		code := status.Code(err)
		level := slog.LevelDebug
		switch code {
		case codes.OK, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.Canceled,
			codes.Unauthenticated:
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
