package objstore

import (
	"errors"
	"io/fs"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/aws/smithy-go"
	"gocloud.dev/gcerrors"
	"google.golang.org/api/googleapi"
)

// throttled reports whether err is a store's way of saying "too many requests": S3's
// 503 SlowDown, GCS's 429 (gocloud's ResourceExhausted), Azure's 503 ServerBusy. The
// SDKs retry these a few times themselves, so what reaches here has outlasted them;
// WithRetry backs off further, or callers answer 503.
//
// The GCS client resends a 429 until its context ends and then returns "retry
// failed with context deadline exceeded; last error: <the 429>", which gocloud
// passes on unmapped (a context error): the 429 is found in the chain.
func throttled(err error) bool {
	if gcerrors.Code(err) == gcerrors.ResourceExhausted {
		return true
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == http.StatusTooManyRequests {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
			"TooManyRequestsException", "RequestThrottled":
			return true
		}
	}
	var az *azcore.ResponseError
	if errors.As(err, &az) {
		return az.ErrorCode == "ServerBusy" || throttleStatus(az.StatusCode)
	}
	var hs interface{ HTTPStatusCode() int }
	if errors.As(err, &hs) {
		return throttleStatus(hs.HTTPStatusCode())
	}
	return false
}

// conditionalConflict reports whether err is S3's 409 ConditionalRequestConflict: a
// conditional write refused, not performed, because another conditional write of
// the same key was in flight. Which of the two wins is not decided yet.
func conditionalConflict(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ConditionalRequestConflict"
}

// rangeNotSatisfiable reports whether err is a store's 416 answer to a ranged read
// that starts at or past the object's end: S3's, GCS's and Azure's InvalidRange.
// The object exists; the range holds no bytes of it.
func rangeNotSatisfiable(err error) bool {
	if err == nil {
		return false
	}
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "InvalidRange" {
		return true
	}
	var az *azcore.ResponseError
	if errors.As(err, &az) {
		return az.StatusCode == http.StatusRequestedRangeNotSatisfiable
	}
	var g *googleapi.Error
	if errors.As(err, &g) {
		return g.Code == http.StatusRequestedRangeNotSatisfiable
	}
	var hs interface{ HTTPStatusCode() int }
	return errors.As(err, &hs) && hs.HTTPStatusCode() == http.StatusRequestedRangeNotSatisfiable
}

func throttleStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// retryableCode is false for failures that no retry mends: the store refusing our
// credentials, or a request it does not understand. Those stay plain errors (a 500
// and an operator's attention), not ErrUnavailable.
func retryableCode(err error) bool {
	if errors.Is(err, fs.ErrPermission) {
		return false
	}
	switch gcerrors.Code(err) {
	case gcerrors.PermissionDenied, gcerrors.InvalidArgument, gcerrors.Unimplemented:
		return false
	}
	return true
}
