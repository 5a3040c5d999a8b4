package auth

import (
	"context"
	"crypto/tls"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// healthService is exempt: probes (kubelet, load balancers, grpc_health_probe)
// carry no credential, and health reveals nothing. Reflection is not exempt: it
// lists the services an attacker could call. Only what describes health is
// (reflection.go), so grpcurl can call health without a credential too.
const healthService = "/grpc.health.v1.Health/"

// ServerOptions are the guard's unary and stream interceptors, to add to a gRPC
// server's options. A nil guard adds none.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	if g == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			if err := g.checkGRPC(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
			if reflectionMethods[info.FullMethod] {
				if reason, remote := g.credential(ss.Context()); reason != "" {
					return next(srv, &healthOnlyReflection{ServerStream: ss, g: g, reason: reason, remote: remote, method: info.FullMethod})
				}
				return next(srv, ss)
			}
			if err := g.checkGRPC(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return next(srv, ss)
		}),
	}
}

func (g *Guard) checkGRPC(ctx context.Context, method string) error {
	if strings.HasPrefix(method, healthService) {
		return nil
	}
	if reason, remote := g.credential(ctx); reason != "" {
		g.refused(SurfaceGRPC, reason, remote, method)
		return status.Error(codes.Unauthenticated, message(reason))
	}
	return nil
}

// credential returns "" if the call's credential passes, else the reason it does
// not, and where the call came from.
func (g *Guard) credential(ctx context.Context) (reason, remote string) {
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
	}
	var state *tls.ConnectionState
	remote = "unknown"
	if p, ok := peer.FromContext(ctx); ok {
		if p.Addr != nil {
			remote = p.Addr.String()
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			state = &ti.State
		}
	}
	return g.check(header, state), remote
}

// tokenCredentials send the bearer token with every call.
type tokenCredentials struct {
	token  string
	secure bool
}

func (c tokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + c.token}, nil
}

// RequireTransportSecurity is false on plaintext connections: a token without
// TLS is supported on loopback and private networks (see the package comment).
func (c tokenCredentials) RequireTransportSecurity() bool { return c.secure }

// DialOptions are the options of a gRPC client connection with this credential:
// TLS with tlsCfg (plaintext when nil) and the token on every call (none when
// empty).
func DialOptions(token string, tlsCfg *tls.Config) []grpc.DialOption {
	var opts []grpc.DialOption
	if tlsCfg != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCredentials{token: token, secure: tlsCfg != nil}))
	}
	return opts
}

// ServerCredentials is the gRPC server option for tlsCfg (none when nil).
func ServerCredentials(tlsCfg *tls.Config) []grpc.ServerOption {
	if tlsCfg == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}
}
