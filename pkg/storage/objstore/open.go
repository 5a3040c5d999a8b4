package objstore

import (
	"context"
	"fmt"
	"net/url"
	"slices"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/tidemark-io/tidemark/pkg/errclass"

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

// ErrBadURL means a bucket URL that Open could not open whatever the storage
// answered: it does not parse, its scheme is missing or unknown, or its file://
// form is malformed. It is the caller's mistake (Invalid).
var ErrBadURL = errclass.New(errclass.Invalid, "bad bucket URL")

// Schemes are the URL schemes Open opens.
func Schemes() []string { return []string{"file", "mem", "s3", "azblob", "gs"} }

// CheckURL checks rawURL as Open reads it, without I/O or credentials: it parses,
// its scheme is one of Schemes, and a file:// URL names a directory and at most a
// prefix. Whether the bucket exists and takes writes only Open and a write tell.
// The error wraps ErrBadURL and never holds the URL's user info.
func CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error quotes the URL, credentials included: say less.
		return fmt.Errorf("%w: it does not parse as a URL", ErrBadURL)
	}
	name := redact(u)
	if !slices.Contains(Schemes(), u.Scheme) {
		return fmt.Errorf("%w %q: scheme %q is not one of file://, s3://, azblob://, gs:// (or mem:// for tests)", ErrBadURL, name, u.Scheme)
	}
	if u.Scheme == "file" {
		if _, err := fileRoot(u); err != nil {
			return fmt.Errorf("%w %q: %w", ErrBadURL, name, err)
		}
	}
	return nil
}
