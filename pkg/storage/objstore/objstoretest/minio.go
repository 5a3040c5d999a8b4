package objstoretest

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

const (
	// MinIOAddrEnv names the environment variable holding MinIO's S3 endpoint,
	// host:port (scripts/minio.sh prints it).
	MinIOAddrEnv = "TIDEMARK_MINIO_ADDR"
	// MinIOUser and MinIOPassword are the root credentials scripts/minio.sh starts
	// MinIO with (public test credentials, like Azurite's: MinIO listens on loopback
	// only). S3 clients use them as access key id and secret key.
	MinIOUser     = "tidemark"
	MinIOPassword = "tidemark-secret-key"
	// MinIORegion is the region MinIO signs for by default.
	MinIORegion = "us-east-1"
)

// minio's test-only scheme carries MinIO's credentials in its opener: gocloud's s3://
// opener reads them from the environment (AWS_ACCESS_KEY_ID, ...), which tests must
// not set for the whole process.
var minio = &bucketServer{
	server: server{name: "minio", env: MinIOAddrEnv, script: "scripts/minio.sh", driver: "the s3blob driver"},
	scheme: "s3-test",
	opener: s3Opener{},
}

// MinIO opens a bucket over a new, empty prefix of the test bucket in MinIO.
func MinIO(t testing.TB) *objstore.Bucket {
	t.Helper()
	return open(t, minioTestURL(t))
}

// OpenS3 opens a bucket over a new, empty prefix of the test bucket through endpoint
// (host:port, or a URL such as http://host:port), which fronts the MinIO that
// TIDEMARK_MINIO_ADDR names: a fault proxy, say. The prefix is emptied when t ends
// through MinIO directly, not through endpoint.
func OpenS3(t testing.TB, endpoint string) *objstore.Bucket {
	t.Helper()
	return open(t, minio.testURL(t, endpoint))
}

func minioTestURL(t testing.TB) string {
	t.Helper()
	return minio.testURL(t, MinIOAddr(t))
}

// MinIOURL returns the production-form URL of a new, empty prefix of the test
// bucket, s3://tidemark-test?endpoint=http://<addr>&region=us-east-1&use_path_style=true&prefix=<random>/,
// with the environment (AWS_ACCESS_KEY_ID=…, AWS_SECRET_ACCESS_KEY=…, AWS_REGION=…)
// a child process needs to open it, e.g. cmd.Env = append(os.Environ(), env...).
// The prefix is emptied when t ends.
func MinIOURL(t testing.TB) (dataURL string, env []string) {
	t.Helper()
	addr, prefix := minio.newPrefix(t)
	q := url.Values{
		"endpoint":       {"http://" + addr},
		"region":         {MinIORegion},
		"use_path_style": {"true"},
		"prefix":         {prefix},
	}
	return "s3://" + TestBucket + "?" + q.Encode(), []string{
		"AWS_ACCESS_KEY_ID=" + MinIOUser,
		"AWS_SECRET_ACCESS_KEY=" + MinIOPassword,
		"AWS_REGION=" + MinIORegion,
	}
}

// MinIOAddr returns MinIO's host:port from TIDEMARK_MINIO_ADDR. Without it, t fails
// when CI is set and skips otherwise.
func MinIOAddr(t testing.TB) string {
	t.Helper()
	return minio.addr(t)
}

func requireMinIO(t testing.TB) {
	t.Helper()
	MinIOAddr(t)
}

// s3Opener opens s3-test://<bucket>?endpoint=<url> with MinIO's credentials, each
// open on an S3 client (and HTTP client) of its own.
type s3Opener struct{}

func (s3Opener) OpenBucketURL(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	endpoint := u.Query().Get("endpoint")
	if endpoint == "" {
		return nil, errors.New("objstoretest: " + u.Scheme + " URL without endpoint=")
	}
	cfg := aws.Config{
		Region:      MinIORegion,
		Credentials: credentials.NewStaticCredentialsProvider(MinIOUser, MinIOPassword, ""),
		// The retryer gocloud's s3:// opener configures: the SDK's standard retries
		// without its client-side retry quota.
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.RateLimiter = ratelimit.None })
		},
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	})
	return s3blob.OpenBucket(ctx, client, u.Host, nil)
}
