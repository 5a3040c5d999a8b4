package objstore

import (
	"context"
	"fmt"
	"net/url"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	// Drivers for the production URL schemes.
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
)

// Open opens the bucket named by rawURL:
//
//	file:///abs/dir[?prefix=p/]   a directory (created if missing), atomic put-if-absent
//	mem://                        a fresh in-memory bucket (tests)
//	s3://bucket?region=…          gocloud s3blob
//	azblob://container?…          gocloud azureblob (credentials from AZURE_STORAGE_*)
//	gs://bucket                   gocloud gcsblob
//
// Every scheme accepts ?prefix= to root the bucket at a key prefix. Containers and
// buckets of cloud schemes are never created here; they must exist.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open bucket: parse %q: %w", rawURL, err)
	}
	name := redact(u)
	switch u.Scheme {
	case "file":
		be, err := openFile(u)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", name, err)
		}
		return newBucket(be, name, opts...), nil
	case "mem":
		var b *blob.Bucket = memblob.OpenBucket(nil)
		if p := u.Query().Get("prefix"); p != "" {
			b = blob.PrefixedBucket(b, p)
		}
		return newBucket(&gocloudBackend{b: b}, name, opts...), nil
	case "":
		return nil, fmt.Errorf("open bucket %q: missing scheme (want file://, mem://, s3://, azblob:// or gs://)", rawURL)
	}
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", name, err)
	}
	resendEveryRequest(b)
	return newBucket(&gocloudBackend{b: b}, name, opts...), nil
}

// redact drops user info so credentials never reach logs or error messages.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}
