package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// statusOf maps err to a gRPC status error. ctx is the call's own context: when it
// is done, the client gave up (CANCELLED or DEADLINE_EXCEEDED); when only the
// server's own bound ran out, etcd or the object store did not answer
// (UNAVAILABLE).
func statusOf(ctx context.Context, err error) error {
	code, msg := classify(ctx, err)
	return status.Error(code, msg)
}

// classify maps err to a code and a message for the client, by its class
// (package errclass). It is the one place the admin service's errors become codes,
// for gRPC and HTTP alike.
func classify(ctx context.Context, err error) (codes.Code, string) {
	class := errclass.Of(err)
	switch class {
	case errclass.Invalid:
		return codes.InvalidArgument, err.Error()
	case errclass.Gone:
		return codes.NotFound, err.Error()
	case errclass.Exists:
		// A task id an export was enqueued under names another task.
		return codes.AlreadyExists, err.Error()
	case errclass.Precondition:
		return codes.FailedPrecondition, err.Error()
	case errclass.Halt:
		// A corrupt registry object or stats row: the message names it.
		return codes.DataLoss, err.Error()
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Code(), err.Error()
	}
	switch class {
	case errclass.Timeout:
		return codes.Unavailable, fmt.Sprintf("timed out: etcd or the object store did not answer in time: %v", err)
	case errclass.Conflict, errclass.Overloaded, errclass.Busy, errclass.Unavailable:
		if _, isStatus := status.FromError(err); isStatus || errors.As(err, new(interface{ Code() codes.Code })) {
			// etcd's client returns its transport failures as gRPC statuses (wrapped
			// by our error context) or as rpctypes errors carrying a code.
			return codes.Unavailable, fmt.Sprintf("etcd unavailable: %v", err)
		}
		return codes.Unavailable, err.Error()
	}
	return codes.Internal, err.Error()
}
