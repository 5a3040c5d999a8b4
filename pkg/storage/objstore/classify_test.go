package objstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/aws/smithy-go"
	"google.golang.org/api/googleapi"
)

// A store failing a request must read as "retry later" (ErrUnavailable), while an
// answer about the object must not: the worker turns the first into 503 and the
// second into 404/409, and a chaos run showed adds failed by the store answered as
// a bare 500.
func TestStoreFailuresAreUnavailableAndAnswersAreNot(t *testing.T) {
	ctx := context.Background()
	mem, err := Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	faults := NewFaults(rand.NewPCG(1, 2))
	b := WithFaults(mem, faults)

	if _, err := b.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("get of a missing object: %v, want ErrNotFound and not ErrUnavailable", err)
	}
	if err := b.PutIfAbsent(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfAbsent(ctx, "k", []byte("b")); !errors.Is(err, ErrExists) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("second put-if-absent: %v, want ErrExists and not ErrUnavailable", err)
	}

	faults.SetErrorRate(1)
	for name, call := range map[string]func() error{
		"get":      func() error { _, err := b.Get(ctx, "k"); return err },
		"range":    func() error { _, err := b.GetRange(ctx, "k", 0, 1); return err },
		"stat":     func() error { _, err := b.Stat(ctx, "k"); return err },
		"put":      func() error { return b.Put(ctx, "k2", []byte("x")) },
		"delete":   func() error { return b.Delete(ctx, "k") },
		"list":     func() error { _, err := b.List(ctx, ""); return err },
		"ifabsent": func() error { return b.PutIfAbsent(ctx, "k3", []byte("x")) },
	} {
		err := call()
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrInjected) {
			t.Errorf("%s with the store failing: %v, want ErrUnavailable wrapping the cause", name, err)
		}
	}

	// The caller's own deadline or cancellation is not the store's failure.
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded, fmt.Errorf("x: %w", ErrTooLarge)} {
		if err := requestError("get k", cause); errors.Is(err, ErrUnavailable) || !errors.Is(err, cause) {
			t.Errorf("requestError(%v) = %v, want the cause and not ErrUnavailable", cause, err)
		}
	}
}

// Real stores' throttling answers must reach callers as ErrThrottled, or the
// table's and merge's throttle retries and the worker's 503 only ever fire in tests.
func TestStoreThrottlingAnswersMapToErrThrottled(t *testing.T) {
	for name, err := range map[string]error{
		"s3 SlowDown":      &smithy.GenericAPIError{Code: "SlowDown", Message: "Please reduce your request rate."},
		"s3 RequestLimit":  &smithy.GenericAPIError{Code: "RequestLimitExceeded"},
		"azure ServerBusy": &azcore.ResponseError{ErrorCode: "ServerBusy", StatusCode: 503},
		"azure 429":        &azcore.ResponseError{ErrorCode: "TooManyRequests", StatusCode: 429},
		// The GCS client's answer once its resends of a 429 ran into the context's
		// end, which gocloud passes on unmapped.
		"gcs 429 until the deadline": fmt.Errorf("retry failed with %v; last error: %w", context.DeadlineExceeded,
			&googleapi.Error{Code: 429, Message: "rate limit exceeded"}),
	} {
		mapped := mapErr(fmt.Errorf("driver: %w", err))
		if !errors.Is(mapped, ErrThrottled) {
			t.Errorf("%s: mapErr = %v, want ErrThrottled", name, mapped)
		}
	}
	for name, err := range map[string]error{
		"s3 AccessDenied":  &smithy.GenericAPIError{Code: "AccessDenied"},
		"azure 500":        &azcore.ResponseError{ErrorCode: "InternalError", StatusCode: 500},
		"connection reset": errors.New("read: connection reset by peer"),
	} {
		if mapped := mapErr(err); errors.Is(mapped, ErrThrottled) {
			t.Errorf("%s: mapErr = %v, must not be ErrThrottled", name, mapped)
		}
	}
}

// The stores' 416 answers to a range starting at or past the end (GCS and Azurite
// send them: TestRangedReadsAtEveryPosition) read as an empty range, and nothing else
// does; S3's 409 ConditionalRequestConflict is told apart from its 412, which is a
// lost race.
func TestRangeAndConflictAnswersAreRecognised(t *testing.T) {
	for name, c := range map[string]struct {
		err                error
		emptyRange, resend bool
	}{
		"s3 InvalidRange":               {err: &smithy.GenericAPIError{Code: "InvalidRange"}, emptyRange: true},
		"gcs 416":                       {err: &googleapi.Error{Code: 416}, emptyRange: true},
		"azure 416":                     {err: &azcore.ResponseError{ErrorCode: "InvalidRange", StatusCode: 416}, emptyRange: true},
		"s3 ConditionalRequestConflict": {err: &smithy.GenericAPIError{Code: "ConditionalRequestConflict"}, resend: true},
		"s3 PreconditionFailed":         {err: &smithy.GenericAPIError{Code: "PreconditionFailed"}},
		"gcs 412":                       {err: &googleapi.Error{Code: 412}},
		"azure 409 BlobAlreadyExists":   {err: &azcore.ResponseError{ErrorCode: "BlobAlreadyExists", StatusCode: 409}},
		"s3 NoSuchKey":                  {err: &smithy.GenericAPIError{Code: "NoSuchKey"}},
		"connection reset, no answer":   {err: errors.New("read: connection reset by peer")},
	} {
		err := fmt.Errorf("driver: %w", c.err)
		if got := rangeNotSatisfiable(err); got != c.emptyRange {
			t.Errorf("%s: rangeNotSatisfiable = %v, want %v", name, got, c.emptyRange)
		}
		if got := conditionalConflict(err); got != c.resend {
			t.Errorf("%s: conditionalConflict = %v, want %v", name, got, c.resend)
		}
	}
}
