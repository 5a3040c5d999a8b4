package errclass_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// every is each class, in declaration order.
var every = []errclass.Class{errclass.Internal, errclass.Invalid, errclass.Gone, errclass.Exists,
	errclass.Precondition, errclass.Conflict, errclass.Overloaded, errclass.Busy, errclass.Unavailable,
	errclass.Timeout, errclass.Canceled, errclass.Halt}

// errorServer is a gRPC server on a loopback port whose every method answers with
// the error answer gives for the method's name ("/svc/<name>"), and a client
// connection to it: the hop a worker's answer makes to the master, with no proto
// of its own (emptypb both ways).
type errorServer struct {
	conn *grpc.ClientConn
}

func newErrorServer(t *testing.T, answer func(name string) error) *errorServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		return answer(method[strings.LastIndex(method, "/")+1:])
	}))
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &errorServer{conn: conn}
}

// call invokes the method name and returns its error as the master would hold it:
// wrapped with the worker it came from.
func (s *errorServer) call(t *testing.T, name string) error {
	t.Helper()
	err := s.conn.Invoke(context.Background(), "/tidemark.test.Errors/"+name, &emptypb.Empty{}, &emptypb.Empty{})
	if err == nil {
		t.Fatalf("%s: the call succeeded, want an error", name)
	}
	return fmt.Errorf("worker w1 (%s): %w", s.conn.Target(), err)
}

// The master decides a task's fate by the class of a worker's answer: Overloaded
// (retry once merges caught up) and Unavailable (object storage failing) must not
// arrive as Busy, which they did while only the code crossed. Every class crosses a
// real connection exactly, wrapped with context on both sides, with its text.
func TestEveryClassCrossesAGRPCConnectionIntact(t *testing.T) {
	wantCode := map[errclass.Class]codes.Code{
		errclass.Internal:     codes.Internal,
		errclass.Invalid:      codes.InvalidArgument,
		errclass.Gone:         codes.NotFound,
		errclass.Exists:       codes.AlreadyExists,
		errclass.Precondition: codes.FailedPrecondition,
		errclass.Conflict:     codes.Aborted,
		errclass.Overloaded:   codes.ResourceExhausted,
		errclass.Busy:         codes.ResourceExhausted,
		errclass.Unavailable:  codes.ResourceExhausted,
		errclass.Timeout:      codes.DeadlineExceeded,
		errclass.Canceled:     codes.Canceled,
		errclass.Halt:         codes.DataLoss,
	}
	sentinels := map[string]error{}
	for _, c := range every {
		sentinels[c.String()] = errclass.New(c, c.String()+" sentinel")
	}
	serverErr := func(name string) error {
		return fmt.Errorf("store generic:x: merge shard w1: %w", sentinels[name])
	}
	s := newErrorServer(t, func(name string) error { return errclass.ToGRPC(serverErr(name)) })
	for _, c := range every {
		err := s.call(t, c.String())
		if got := errclass.Of(err); got != c {
			t.Errorf("%s: Of(%v) = %s at the client", c, err, got)
		}
		st, _ := status.FromError(err)
		if st.Code() != wantCode[c] {
			t.Errorf("%s: code %s, want %s", c, st.Code(), wantCode[c])
		}
		if text := serverErr(c.String()).Error(); !strings.HasSuffix(st.Message(), text) || !strings.Contains(err.Error(), text) {
			t.Errorf("%s: the client's error %q does not keep the server's text %q", c, err, text)
		}
	}
}

// A worker built before the class detail (or etcd) answers with a code alone: the
// client classifies it by the code, as before; and an ErrorInfo of another domain,
// or naming a class this build does not know, is no class detail.
func TestAStatusWithoutAClassDetailIsClassifiedByItsCode(t *testing.T) {
	foreign := func(code codes.Code, domain, reason string) error {
		st, err := status.New(code, "x").WithDetails(&errdetails.ErrorInfo{Domain: domain, Reason: reason})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	answers := map[string]error{
		"exhausted":   status.Error(codes.ResourceExhausted, "merge slots full"),
		"unavailable": status.Error(codes.Unavailable, "connection refused"),
		"dataloss":    status.Error(codes.DataLoss, "corrupt"),
		"notfound":    status.Error(codes.NotFound, "store deleted"),
		"unknown":     status.Error(codes.Unknown, "?"),
		"otherdomain": foreign(codes.DataLoss, "googleapis.com", "BUSY"),
		"newerclass":  foreign(codes.ResourceExhausted, "tidemark.io", "SOMETHING_NEWER"),
	}
	want := map[string]errclass.Class{
		"exhausted":   errclass.Busy,
		"unavailable": errclass.Unavailable,
		"dataloss":    errclass.Halt,
		"notfound":    errclass.Gone,
		"unknown":     errclass.Internal,
		"otherdomain": errclass.Halt,
		"newerclass":  errclass.Busy,
	}
	s := newErrorServer(t, func(name string) error { return answers[name] })
	for name, c := range want {
		if got := errclass.Of(s.call(t, name)); got != c {
			t.Errorf("%s: Of = %s, want %s", name, got, c)
		}
	}
}

// A status already in the chain passes through ToGRPC as it is: a server relaying
// another call's answer keeps that answer's code, and its class detail if it had
// one, under the relay's own context.
func TestAStatusInTheChainPassesThroughWithItsClass(t *testing.T) {
	overloaded := errclass.New(errclass.Overloaded, "too many pending generations")
	answers := map[string]error{
		"relayed": fmt.Errorf("relay to w2: %w", errclass.ToGRPC(fmt.Errorf("store generic:x: %w", overloaded))),
		"bare":    fmt.Errorf("etcd: %w", status.Error(codes.Unavailable, "no leader")),
	}
	s := newErrorServer(t, func(name string) error { return errclass.ToGRPC(answers[name]) })
	err := s.call(t, "relayed")
	if got := errclass.Of(err); got != errclass.Overloaded || status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "relay to w2: ") || !strings.Contains(err.Error(), "store generic:x: too many pending generations") {
		t.Errorf("relayed: %v (class %s, code %s), want overloaded, RESOURCE_EXHAUSTED, both texts", err, got, status.Code(err))
	}
	err = s.call(t, "bare")
	if got := errclass.Of(err); got != errclass.Unavailable || status.Code(err) != codes.Unavailable {
		t.Errorf("bare: %v (class %s), want the status as it was: unavailable", err, got)
	}
	if errclass.ToGRPC(nil) != nil {
		t.Error("ToGRPC(nil) is not nil")
	}
}

// A class a status names ranks among the sentinels of a chain (the package doc's
// severity order): it stands for the server's chain, so it says more than the
// client's own cancellation, and a corrupt object on one worker still halts a
// fan-out that joined it with another's busy answer.
func TestAStatusNamingItsClassRanksAmongTheSentinels(t *testing.T) {
	answer := func(c errclass.Class) error {
		return errclass.ToGRPC(fmt.Errorf("merge: %w", errclass.New(c, c.String())))
	}
	for _, c := range []struct {
		err  error
		want errclass.Class
	}{
		{errors.Join(context.Canceled, answer(errclass.Busy)), errclass.Busy},
		{errors.Join(answer(errclass.Overloaded), answer(errclass.Halt)), errclass.Halt},
		{errors.Join(answer(errclass.Unavailable), errclass.New(errclass.Gone, "gone")), errclass.Gone},
		{fmt.Errorf("%w; %w", answer(errclass.Overloaded), status.Error(codes.DataLoss, "old worker")), errclass.Overloaded},
		{errclass.Wrap(errclass.Gone, answer(errclass.Halt)), errclass.Gone},
	} {
		if got := errclass.Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
