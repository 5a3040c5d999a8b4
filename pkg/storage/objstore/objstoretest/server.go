package objstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// TestBucket is the bucket scripts/minio.sh and scripts/gcs.sh create; each test
// works under a random prefix of its own inside it.
const TestBucket = "tidemark-test"

// server is one local object-store server the tests reach through an address
// variable that its script prints.
type server struct {
	name   string // as in messages: "azurite"
	env    string // the address variable: TIDEMARK_AZURITE_ADDR
	script string // what starts it: scripts/azurite.sh
	driver string // the driver it serves, for the skip message: "the azblob driver"
}

// addr returns the server's host:port from its variable. Without it, t fails when
// CI is set and skips otherwise.
func (s server) addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(s.env)
	if addr != "" {
		return addr
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not set, but CI is: %s must be started before the tests "+
			"(eval \"$(%s)\"); CI must not skip a store Tidemark runs on", s.env, s.name, s.script)
	}
	t.Skipf("%s not configured: run eval \"$(%s)\" to set %s and test %s", s.name, s.script, s.env, s.driver)
	return ""
}

// reachable fails t with a message naming the script when nothing listens at addr:
// the SDKs retry a refused connection for many seconds before saying anything useful.
func (s server) reachable(t testing.TB, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("%s at %s (%s) is not reachable: %v; start it with %s", s.name, addr, s.env, err, s.script)
	}
	_ = conn.Close()
}

// bucketServer is a server whose tests share TestBucket, each under a prefix of its
// own, opened in this process through a test-only scheme whose opener knows the
// server's credentials and endpoint.
type bucketServer struct {
	server
	scheme string // s3-test
	opener blob.BucketURLOpener
}

var registerOnce sync.Once

// registerSchemes registers every test-only scheme on gocloud's default URL mux,
// all at once: the mux's registry is a plain map, so a registration beside another
// (parallel subtests on two drivers) or beside an open is a data race. Every open
// of this package passes through here first.
func registerSchemes() {
	registerOnce.Do(func() {
		mux := blob.DefaultURLMux()
		mux.RegisterBucket(azuriteScheme, azuriteOpener())
		mux.RegisterBucket(minio.scheme, minio.opener)
		mux.RegisterBucket(gcs.scheme, gcs.opener)
	})
}

// schemeURL returns the URL of prefix in TestBucket reached through endpoint under
// the test-only scheme.
func (s *bucketServer) schemeURL(endpoint, prefix string) string {
	registerSchemes()
	return s.scheme + "://" + TestBucket + "?" + url.Values{"endpoint": {endpoint}, "prefix": {prefix}}.Encode()
}

// newPrefix returns the server's address and a new random prefix of TestBucket,
// emptied through the server directly when t ends.
func (s *bucketServer) newPrefix(t testing.TB) (addr, prefix string) {
	t.Helper()
	addr = s.addr(t)
	s.reachable(t, addr)
	prefix = randomName("test-") + "/"
	emptyOnCleanup(t, s.schemeURL("http://"+addr, prefix))
	return addr, prefix
}

// testURL returns the test-only scheme's URL of a new prefix reached through
// endpoint (host:port, or a URL such as http://host:port).
func (s *bucketServer) testURL(t testing.TB, endpoint string) string {
	t.Helper()
	_, prefix := s.newPrefix(t)
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	return s.schemeURL(endpoint, prefix)
}

// randomName returns prefix followed by 24 random hex digits: a valid Azure
// container name, S3 key prefix or GCS object name prefix.
func randomName(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// emptyOnCleanup deletes every object of the bucket rawURL names (a prefix of the
// shared test bucket) when t ends, after the test's own handles are closed, so the
// server's bucket does not grow with every test run.
func emptyOnCleanup(t testing.TB, rawURL string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		b, err := objstore.Open(ctx, rawURL)
		if err != nil {
			t.Logf("empty %s: %v", rawURL, err)
			return
		}
		defer b.Close()
		objs, err := b.List(ctx, "")
		if err != nil {
			t.Logf("empty %s: %v", b, err)
			return
		}
		keys := make(chan string)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for k := range keys {
					if err := b.Delete(ctx, k); err != nil {
						t.Logf("empty %s: %v", b, err)
					}
				}
			})
		}
		for _, o := range objs {
			keys <- o.Key
		}
		close(keys)
		wg.Wait()
	})
}
