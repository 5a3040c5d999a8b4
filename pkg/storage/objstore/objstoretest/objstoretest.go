// Package objstoretest opens fresh buckets for tests, on every driver Tidemark runs on:
// "mem" (memblob), "file" (a temp directory, Tidemark's own atomic writes), "azurite"
// (the azureblob driver production uses, against a local Azurite), "minio" (s3blob
// against a local MinIO) and "gcs" (gcsblob against fake-gcs-server).
//
// Invariants:
//
//   - Every bucket a helper opens is new and empty (a new temp directory, a new memblob,
//     a new Azurite container, a new random prefix of the MinIO or GCS test bucket),
//     and is closed (the container deleted, the prefix emptied) when the test ends.
//   - A server's driver runs when its address variable is set (TIDEMARK_AZURITE_ADDR,
//     TIDEMARK_MINIO_ADDR, TIDEMARK_GCS_ADDR). When it is not, the subtest skips
//     locally but FAILS when CI is set: CI must never silently stop testing a store
//     Tidemark runs on. scripts/azurite.sh, minio.sh and gcs.sh start the servers.
//   - Nothing here mutates the process environment: the servers' credentials and
//     endpoints reach gocloud's drivers through URL openers registered under
//     test-only schemes; child processes get the production-form URL and the
//     environment it needs (AzuriteURL, MinIOURL, GCSURL).
package objstoretest

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// Driver is one storage driver a test can run against.
type Driver struct {
	Name string
	// Open returns a new, empty bucket closed at the end of t. It skips or fails t
	// when the driver is unavailable (see the package comment).
	Open func(t testing.TB) *objstore.Bucket
	// URL returns the URL of a new, empty bucket that objstore.Open opens any number
	// of times in this process, each open a client of its own (its own connections,
	// where the SDK has any) of the same objects: what independent writers racing on
	// one key need. It is nil for mem, whose every open is a store of its own. The
	// server drivers' URLs use schemes registered by this package, so they open only
	// in this process; a child process needs AzuriteURL, MinIOURL or GCSURL.
	URL func(t testing.TB) string

	// require, if set, skips or fails t when the driver is unavailable.
	require func(t testing.TB)
}

// Drivers returns every driver, in a fixed order: mem, file, azurite, minio, gcs.
// Benchmarks loop over it with b.Run; tests usually use ForEachDriver.
func Drivers() []Driver {
	return []Driver{
		{Name: "mem", Open: Mem},
		{Name: "file", Open: File, URL: FileURL},
		{Name: "azurite", Open: Azurite, URL: azuriteTestURL, require: requireAzurite},
		{Name: "minio", Open: MinIO, URL: minioTestURL, require: requireMinIO},
		{Name: "gcs", Open: GCS, URL: gcsTestURL, require: requireGCS},
	}
}

// ForEachDriver runs fn as a subtest per driver, named after the driver. open returns
// a new, empty bucket on that driver each time it is called.
func ForEachDriver(t *testing.T, fn func(t *testing.T, open func(t testing.TB) *objstore.Bucket)) {
	t.Helper()
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Helper()
			d.Require(t)
			fn(t, d.Open)
		})
	}
}

// Require skips or fails t, before anything runs, when the driver's server is not
// configured (see the package comment), so a test never half-runs.
func (d Driver) Require(t testing.TB) {
	t.Helper()
	if d.require != nil {
		d.require(t)
	}
}

// Mem opens a new in-memory bucket.
func Mem(t testing.TB) *objstore.Bucket {
	t.Helper()
	return open(t, "mem://")
}

// File opens a bucket over a new temp directory.
func File(t testing.TB) *objstore.Bucket {
	t.Helper()
	return open(t, FileURL(t))
}

// FileURL returns a file:// URL of a new temp directory, for tests that hand a
// DATA_URL to another process or open the same directory twice.
func FileURL(t testing.TB) string {
	t.Helper()
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(t.TempDir())}).String()
}

func open(t testing.TB, rawURL string) *objstore.Bucket {
	t.Helper()
	registerSchemes() // before any open reads the mux (see registerSchemes)
	b, err := objstore.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("open %s: %v", rawURL, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close %s: %v", b, err)
		}
	})
	return b
}

// Keys is the set of every object key in b, for tests that check what a change
// left behind.
func Keys(t testing.TB, b *objstore.Bucket) map[string]bool {
	t.Helper()
	objs, err := b.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	keys := make(map[string]bool, len(objs))
	for _, o := range objs {
		keys[o.Key] = true
	}
	return keys
}

// OpenURL opens, in this process, a bucket URL made for a child process by FileURL,
// AzuriteURL, MinIOURL or GCSURL, without the environment the child needs: the
// production scheme is swapped for this package's test-only one, which carries the
// server's credentials. So a test reads back what its processes wrote. The bucket is
// closed when t ends.
func OpenURL(t testing.TB, dataURL string) *objstore.Bucket {
	t.Helper()
	u, err := url.Parse(dataURL)
	if err != nil {
		t.Fatalf("parse %s: %v", dataURL, err)
	}
	q := u.Query()
	switch u.Scheme {
	case "azblob":
		registerSchemes()
		u.Scheme = azuriteScheme
		return open(t, u.String())
	case "s3":
		return open(t, minio.schemeURL(q.Get("endpoint"), q.Get("prefix")))
	case "gs":
		return open(t, gcs.schemeURL("http://"+GCSAddr(t), q.Get("prefix")))
	}
	return open(t, dataURL)
}
