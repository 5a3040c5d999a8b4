package errclass

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcDomain is the ErrorInfo domain of the class detail ToGRPC attaches: other
// domains' ErrorInfo (a cloud API's answer relayed in a chain) say nothing of our
// classes.
const grpcDomain = "tidemark.io"

// ToGRPC returns err as a gRPC status error for a server to answer with: the code
// of its class (Of) and, beside it, the class by name in a google.rpc.ErrorInfo
// detail (Reason the class's name in capitals, Domain "tidemark.io"), so that Of
// on the client gives the class exactly where codes alone merge several. The
// status's message is err's text, which names the target or object concerned.
//
// An err whose chain already holds a gRPC status (one the server got from another
// call) is returned as it is: the status says what that call answered, and a
// status ToGRPC made keeps its detail through the hop. ToGRPC(nil) is nil.
//
// UNAVAILABLE is never the code: gRPC and its callers read it as "the call never
// reached a server, send it again", while a class is what a call that ran met;
// Unavailable travels as RESOURCE_EXHAUSTED (retry later) with its class named.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	c := Of(err)
	st := status.New(grpcCode(c), err.Error())
	if detailed, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: strings.ToUpper(c.String()), Domain: grpcDomain}); derr == nil {
		st = detailed
	}
	return st.Err()
}

// grpcCode is the code a server answers a failure of class c with, read back by
// ofCode for a status that carries no class detail.
func grpcCode(c Class) codes.Code {
	switch c {
	case Invalid:
		return codes.InvalidArgument
	case Gone:
		return codes.NotFound
	case Exists:
		return codes.AlreadyExists
	case Precondition:
		return codes.FailedPrecondition
	case Conflict:
		// The call lost a race with a concurrent change of the store: retry the
		// whole call.
		return codes.Aborted
	case Overloaded, Busy, Unavailable:
		// Retry later; never UNAVAILABLE (see ToGRPC).
		return codes.ResourceExhausted
	case Timeout:
		return codes.DeadlineExceeded
	case Canceled:
		return codes.Canceled
	case Halt:
		// The master fails the task naming the object, and cools the target down.
		return codes.DataLoss
	}
	return codes.Internal
}

// ofDetail returns the class a gRPC status names in a class detail (ToGRPC), and
// false if it names none: no detail of our domain, or a class this build does not
// know (a newer peer's), which the code then classifies.
func ofDetail(st *status.Status) (Class, bool) {
	if st == nil {
		return Internal, false
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != grpcDomain {
			continue
		}
		for c := range names {
			if strings.EqualFold(info.GetReason(), names[c]) {
				return Class(c), true
			}
		}
	}
	return Internal, false
}
