package auth

import (
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Reflection of the health service without a credential.
//
// grpcurl asks the reflection service for a method's descriptor before it calls the
// method, so `grpcurl -plaintext host:7070 grpc.health.v1.Health/Check` needs
// reflection as much as it needs health. Reflection lists and describes every
// service, so it stays protected except for what describes health:
//
//  1. A reflection stream without a valid credential is let through the interceptor;
//     each request on it is checked when the reflection service receives it.
//  2. A request passes only if it names the health service's file
//     (grpc/health/v1/health.proto), or a symbol or message type of its package
//     (grpc.health.v1.*): file_by_filename, file_containing_symbol,
//     all_extension_numbers_of_type, file_containing_extension. list_services
//     never passes: it names every service.
//  3. Any other request ends the stream UNAUTHENTICATED before the reflection service
//     has read it, and is logged and counted as a refused call.
//  4. So the answers describe health.proto, which imports no other file, or say
//     NOT_FOUND for a name of that package that does not exist: nothing else.
//
// Both versions of the reflection service are covered (grpcurl asks v1 and falls
// back to v1alpha); requests are read through protoreflect, since both versions'
// messages have the same fields.

// reflectionMethods are the reflection services' one method, in both versions.
var reflectionMethods = map[string]bool{
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      true,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": true,
}

// What an anonymous reflection request may name.
const (
	healthPackage = "grpc.health.v1."
	healthFile    = "grpc/health/v1/health.proto"
)

// healthOnlyReflection is a reflection stream of a caller without a valid
// credential: it passes on requests about the health service only (rules 2, 3).
type healthOnlyReflection struct {
	grpc.ServerStream
	g                      *Guard
	reason, remote, method string
}

func (s *healthOnlyReflection) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if asksAboutHealthOnly(m) {
		return nil
	}
	s.g.refused(SurfaceGRPC, s.reason, s.remote, s.method)
	return status.Error(codes.Unauthenticated, message(s.reason)+"; without one, reflection describes grpc.health.v1 only")
}

// asksAboutHealthOnly reports whether m, a ServerReflectionRequest of either
// version, asks about the health service's file or package and nothing else.
func asksAboutHealthOnly(m any) bool {
	pm, ok := m.(proto.Message)
	if !ok {
		return false
	}
	r := pm.ProtoReflect()
	oneof := r.Descriptor().Oneofs().ByName("message_request")
	if oneof == nil {
		return false
	}
	f := r.WhichOneof(oneof)
	if f == nil {
		return false
	}
	v := r.Get(f)
	switch f.Name() {
	case "file_by_filename":
		return v.String() == healthFile
	case "file_containing_symbol", "all_extension_numbers_of_type":
		return strings.HasPrefix(v.String(), healthPackage)
	case "file_containing_extension":
		ext := v.Message()
		typ := ext.Descriptor().Fields().ByName("containing_type")
		return typ != nil && strings.HasPrefix(ext.Get(typ).String(), healthPackage)
	}
	return false
}
