package api

import (
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/tidemark-io/tidemark/internal/grpcserver"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// gRPC server limits: admin requests and answers are small (a page of at most
// 1000 tasks or rows is the largest).
const (
	grpcMaxRecvBytes         = 1 << 20
	grpcMaxSendBytes         = 16 << 20
	grpcMaxConcurrentStreams = 256
	grpcConnectionTimeout    = 10 * time.Second
)

// AdminServiceName is the health service name of the AdminService.
const AdminServiceName = "tidemark.v1.AdminService"

// NewGRPCServer returns a gRPC server with the AdminService, the standard health
// service (hs, whose statuses the caller sets) and server reflection (so grpcurl
// works without the .proto files). Every call runs under a recover: a panic
// answers INTERNAL and is logged with its stack instead of killing the master.
func NewGRPCServer(svc *AdminService, hs *health.Server, log *slog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(grpcMaxRecvBytes),
		grpc.MaxSendMsgSize(grpcMaxSendBytes),
		grpc.MaxConcurrentStreams(grpcMaxConcurrentStreams),
		grpc.ConnectionTimeout(grpcConnectionTimeout),
	}
	gs := grpcserver.New(log, hs, append(base, opts...)...)
	tidemarkv1.RegisterAdminServiceServer(gs, svc)
	return gs
}
