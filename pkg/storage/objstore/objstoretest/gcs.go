package objstoretest

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"google.golang.org/api/option"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// GCSAddrEnv names the environment variable holding fake-gcs-server's address,
// host:port (scripts/gcs.sh prints it).
const GCSAddrEnv = "TIDEMARK_GCS_ADDR"

// gcs's test-only scheme points a storage client at an endpoint of the test's
// choosing: gocloud's gs:// opener reaches an emulator only through
// STORAGE_EMULATOR_HOST, which tests must not set for the whole process.
var gcs = &bucketServer{
	server: server{name: "gcs", env: GCSAddrEnv, script: "scripts/gcs.sh", driver: "the gcsblob driver"},
	scheme: "gcs-test",
	opener: gcsOpener{},
}

// GCS opens a bucket over a new, empty prefix of the test bucket in fake-gcs-server.
func GCS(t testing.TB) *objstore.Bucket {
	t.Helper()
	return open(t, gcsTestURL(t))
}

// OpenGCS opens a bucket over a new, empty prefix of the test bucket through
// endpoint (host:port, or a URL such as http://host:port), which fronts the
// fake-gcs-server that TIDEMARK_GCS_ADDR names: a fault proxy, say. The prefix is
// emptied when t ends through the server directly, not through endpoint.
func OpenGCS(t testing.TB, endpoint string) *objstore.Bucket {
	t.Helper()
	return open(t, gcs.testURL(t, endpoint))
}

func gcsTestURL(t testing.TB) string {
	t.Helper()
	return gcs.testURL(t, GCSAddr(t))
}

// GCSURL returns the production-form URL of a new, empty prefix of the test bucket,
// gs://tidemark-test?prefix=<random>/, with the environment (STORAGE_EMULATOR_HOST=…)
// a child process needs to open it on the emulator, e.g.
// cmd.Env = append(os.Environ(), env...). The prefix is emptied when t ends.
func GCSURL(t testing.TB) (dataURL string, env []string) {
	t.Helper()
	addr, prefix := gcs.newPrefix(t)
	return "gs://" + TestBucket + "?" + url.Values{"prefix": {prefix}}.Encode(),
		[]string{"STORAGE_EMULATOR_HOST=" + addr}
}

// GCSAddr returns fake-gcs-server's host:port from TIDEMARK_GCS_ADDR. Without it, t
// fails when CI is set and skips otherwise.
func GCSAddr(t testing.TB) string {
	t.Helper()
	return gcs.addr(t)
}

func requireGCS(t testing.TB) {
	t.Helper()
	GCSAddr(t)
}

// gcsOpener opens gcs-test://<bucket>?endpoint=<url>, each open on a storage client
// (and HTTP client) of its own, unauthenticated as an emulator wants: the options
// gcsblob itself uses when STORAGE_EMULATOR_HOST is set.
type gcsOpener struct{}

func (gcsOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	endpoint := u.Query().Get("endpoint")
	if endpoint == "" {
		return nil, errors.New("objstoretest: " + u.Scheme + " URL without endpoint=")
	}
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	client, err := storage.NewClient(ctx,
		option.WithEndpoint(strings.TrimSuffix(endpoint, "/")+"/storage/v1/"),
		option.WithHTTPClient(hc))
	if err != nil {
		return nil, err
	}
	return gcsblob.OpenBucket(ctx, nil, u.Host, &gcsblob.Options{Client: client})
}
