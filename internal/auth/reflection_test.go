package auth

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// reflectionStream opens a v1 reflection stream on cc.
func reflectionStream(t *testing.T, cc *grpc.ClientConn) reflectionpb.ServerReflection_ServerReflectionInfoClient {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.CloseSend() })
	return stream
}

// ask sends one reflection request and returns the answer, or the status the
// stream ended with.
func ask(stream reflectionpb.ServerReflection_ServerReflectionInfoClient, req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
	// A Send the server already refused ends in io.EOF; Recv has the status.
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return stream.Recv()
}

// healthCheckLikeGrpcurl does what `grpcurl -plaintext <addr>
// grpc.health.v1.Health/Check` does: resolve the service through reflection
// (file_containing_symbol, then the extensions of the request type), build the
// request from the descriptor it got, and call the method with it. It returns the
// answer's status field.
func healthCheckLikeGrpcurl(t *testing.T, cc *grpc.ClientConn) (string, error) {
	t.Helper()
	stream := reflectionStream(t, cc)
	resp, err := ask(stream, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.health.v1.Health"}})
	if err != nil {
		return "", err
	}
	files := new(protoregistry.Files) // only what reflection answered
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fdp := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(raw, fdp); err != nil {
			t.Fatal(err)
		}
		fd, err := protodesc.NewFile(fdp, files)
		if err != nil {
			t.Fatalf("descriptor %s from reflection: %v", fdp.GetName(), err)
		}
		if err := files.RegisterFile(fd); err != nil {
			t.Fatal(err)
		}
	}
	d, err := files.FindDescriptorByName("grpc.health.v1.Health")
	if err != nil {
		t.Fatalf("reflection answered no grpc.health.v1.Health: %v", err)
	}
	check := d.(protoreflect.ServiceDescriptor).Methods().ByName("Check")
	if _, err := ask(stream, &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_AllExtensionNumbersOfType{
		AllExtensionNumbersOfType: string(check.Input().FullName())}}); err != nil {
		return "", err
	}
	req, out := dynamicpb.NewMessage(check.Input()), dynamicpb.NewMessage(check.Output())
	if err := cc.Invoke(context.Background(), "/grpc.health.v1.Health/Check", req, out); err != nil {
		return "", err
	}
	st := check.Output().Fields().ByName("status")
	return string(st.Enum().Values().ByNumber(out.Get(st).Enum()).Name()), nil
}

// `grpcurl -plaintext host:7070 grpc.health.v1.Health/Check` failed Unauthenticated:
// grpcurl asks the (protected) reflection service for the descriptor first. Health
// is open, so what describes it is too, with or without the credential.
func TestGrpcurlHealthCheckNeedsNoCredential(t *testing.T) {
	addr := grpcServer(t, tokenGuard(t, prometheus.NewRegistry()), nil)
	for _, token := range []string{"", tokA} {
		got, err := healthCheckLikeGrpcurl(t, dial(t, addr, token, nil))
		if err != nil || got != healthpb.HealthCheckResponse_SERVING.String() {
			t.Fatalf("token %q: health through reflection = %q, %v; want SERVING", token, got, err)
		}
	}
}

// Without a credential, reflection answers about the health service and nothing
// else: listing or describing another service ends the stream Unauthenticated,
// counted and logged like any refused call. With the token everything is described.
func TestReflectionWithoutACredentialDescribesOnlyHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := tokenGuard(t, reg)
	addr := grpcServer(t, g, nil)
	for _, tc := range []struct {
		name string
		req  *reflectionpb.ServerReflectionRequest
	}{
		{"list services", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}},
		{"another service", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: "tidemark.v1.WorkerService"}}},
		{"another file", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{
			FileByFilename: "tidemark/v1/worker.proto"}}},
		{"another type's extensions", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_AllExtensionNumbersOfType{
			AllExtensionNumbersOfType: "tidemark.v1.MergeWalRequest"}}},
		{"a package that only starts like health's", &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: "grpc.health.v1alpha.Health"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := reflectionStream(t, dial(t, addr, "", nil))
			// A health question first: the stream is open to it, then refuses the next.
			health := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: healthFile}}
			if resp, err := ask(stream, health); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) != 1 {
				t.Fatalf("health.proto without a credential = %v, %v; want its descriptor", resp, err)
			}
			if resp, err := ask(stream, tc.req); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("answer %v, %v; want Unauthenticated", resp, err)
			}
		})
	}
	if n := testutil.ToFloat64(g.cfg.Metrics.Failures.WithLabelValues(SurfaceGRPC, ReasonMissingToken)); n != 5 {
		t.Errorf("grpc missing-token failures %v, want 5", n)
	}

	stream := reflectionStream(t, dial(t, addr, tokA, nil))
	resp, err := ask(stream, &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if err != nil || len(resp.GetListServicesResponse().GetService()) < 3 {
		t.Fatalf("list services with the token = %v, %v; want every service", resp, err)
	}
}
