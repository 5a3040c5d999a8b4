package faultproxy

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Flavor is the store's API: it decides what a throttle answer looks like and
// where a conditional write carries its precondition.
type Flavor int

const (
	// S3 is the S3 API (AWS, MinIO): throttled requests get 503 SlowDown with S3's
	// XML error body; put-if-absent is a PUT with If-None-Match: *.
	S3 Flavor = iota + 1
	// GCS is the Cloud Storage JSON API (GCS, fake-gcs-server): throttled requests
	// get 429 with GCS's JSON error body; put-if-absent is an upload with
	// ifGenerationMatch=0.
	GCS
)

func (f Flavor) String() string {
	switch f {
	case S3:
		return "s3"
	case GCS:
		return "gcs"
	}
	return fmt.Sprintf("Flavor(%d)", int(f))
}

// IsConditionalWrite reports whether r is a write carrying the precondition
// Tidemark's put-if-absent sends on this flavor. Faults.Only takes it, to aim
// faults at the writes a commit, seal, claim or fence rests on.
func (f Flavor) IsConditionalWrite(r *http.Request) bool {
	switch f {
	case S3:
		return r.Method == http.MethodPut && r.Header.Get("If-None-Match") != ""
	case GCS:
		return (r.Method == http.MethodPost || r.Method == http.MethodPut) && r.URL.Query().Has("ifGenerationMatch")
	}
	return false
}

// IsWrite reports whether r stores an object (the requests whose dropped answer
// leaves the client not knowing whether it happened).
func IsWrite(r *http.Request) bool {
	return r.Method == http.MethodPut || r.Method == http.MethodPost
}

// writeThrottle answers r as the store does when it refuses a request for its
// rate: status, headers and body as the real service sends them.
func (f Flavor) writeThrottle(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	switch f {
	case S3:
		id := randomHex(8)
		host := base64.StdEncoding.EncodeToString([]byte(randomHex(24)))
		h.Set("Content-Type", "application/xml")
		h.Set("x-amz-request-id", strings.ToUpper(id))
		h.Set("x-amz-id-2", host)
		h.Set("Server", "AmazonS3")
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
		if r.Method != http.MethodHead { // HEAD answers carry no body
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
				`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>%s</RequestId><HostId>%s</HostId></Error>`,
				strings.ToUpper(id), host)
		}
	case GCS:
		msg := "The rate of change requests to the object exceeds the rate limit. Please reduce the rate of create, update, and delete requests."
		h.Set("Content-Type", "application/json; charset=UTF-8")
		h.Set("X-GUploader-UploadID", randomHex(32))
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `{"error":{"code":429,"message":%q,"errors":[{"message":%q,"domain":"usageLimits","reason":"rateLimitExceeded"}]}}`,
				msg, msg)
		}
	}
}

// strip removes the precondition from out, a conditional write about to be
// forwarded. On S3 the precondition header is covered by the request's SigV4
// signature, so the request is signed again, with the key id and region of its
// own Authorization header and secret; its payload hash header is reused, so the
// body is neither read nor changed.
func (f Flavor) strip(out *http.Request, secret string) error {
	switch f {
	case S3:
		out.Header.Del("If-None-Match")
		return resign(out, secret)
	case GCS:
		q := out.URL.Query()
		q.Del("ifGenerationMatch")
		out.URL.RawQuery = q.Encode()
	}
	return nil
}

// resign signs r again with SigV4, after a change to a signed header.
func resign(r *http.Request, secret string) error {
	if secret == "" {
		return fmt.Errorf("faultproxy: stripping an S3 precondition needs Config.S3SecretKey to sign the request again")
	}
	// AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/<service>/aws4_request, SignedHeaders=..., Signature=...
	auth := r.Header.Get("Authorization")
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return fmt.Errorf("faultproxy: an S3 request without a SigV4 credential: %q", auth)
	}
	cred, _, _ = strings.Cut(cred, ",")
	scope := strings.Split(cred, "/")
	if len(scope) != 5 {
		return fmt.Errorf("faultproxy: unexpected SigV4 credential scope %q", cred)
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = "UNSIGNED-PAYLOAD"
	}
	r.Header.Del("Authorization")
	r.Header.Del("X-Amz-Date")
	creds := aws.Credentials{AccessKeyID: scope[0], SecretAccessKey: secret}
	return v4.NewSigner().SignHTTP(context.Background(), creds, r, payload, scope[3], scope[2], time.Now(),
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }) // S3 signs the path as sent
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
