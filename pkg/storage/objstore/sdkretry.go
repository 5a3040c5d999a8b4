package objstore

import (
	"cloud.google.com/go/storage"
	"gocloud.dev/blob"
)

// resendEveryRequest makes a gs:// bucket's client resend every request that
// fails transiently (429, 5xx, a broken connection), writes included, as the AWS
// SDK does. The GCS client resends only the requests it deems idempotent, and an
// upload without a precondition is not: on a shared key, a late resend could
// replace a newer object. Tidemark's plain Puts are of keys unique to their writer
// (the same bytes on every attempt) or of hints that readers only start a search
// from, and a delete of an object already gone succeeds: every request is safe to
// resend, so a connection dropped under a Put is the SDK's to absorb, not a
// failed merge.
func resendEveryRequest(b *blob.Bucket) {
	var c *storage.Client
	if b.As(&c) {
		c.SetRetry(storage.WithPolicy(storage.RetryAlways))
	}
}
