// Package objstoretest opens fresh buckets for tests, on every driver Tidemark runs on:
// "mem" (memblob), "file" (a temp directory, Tidemark's own atomic writes) and
// "azurite" (the azureblob driver production uses, against a local Azurite).
//
// Invariants:
//
//   - Every bucket a helper opens is new and empty (a new temp directory, a new memblob,
//     a new Azurite container), and is closed (the container deleted) when the test ends.
//   - The azurite driver runs when TIDEMARK_AZURITE_ADDR is set. When it is not, the
//     azurite subtest skips locally but FAILS when CI is set: CI must never silently
//     stop testing the store production uses. scripts/azurite.sh starts Azurite.
//   - Nothing here mutates the process environment: Azurite credentials reach gocloud's
//     azureblob driver through a URL opener registered under a test-only scheme.
package objstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

const (
	// AzuriteAddrEnv names the environment variable holding Azurite's blob endpoint,
	// host:port (scripts/azurite.sh prints it).
	AzuriteAddrEnv = "TIDEMARK_AZURITE_ADDR"
	// AzuriteAccount and AzuriteKey are Azurite's well-known development credentials
	// (public; they only open a local emulator).
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

	// azuriteScheme is served by an azureblob.URLOpener holding Azurite's shared key.
	// gocloud's own azblob:// opener reads credentials from the environment once per
	// process, so tests would otherwise have to set AZURE_STORAGE_* globally and
	// before anything else opened an azblob URL.
	azuriteScheme = "azurite-test"
)

// Driver is one storage driver a test can run against.
type Driver struct {
	Name string
	// Open returns a new, empty bucket closed at the end of t. It skips or fails t
	// when the driver is unavailable (see the package comment).
	Open func(t testing.TB) *objstore.Bucket

	// require, if set, skips or fails t when the driver is unavailable.
	require func(t testing.TB)
}

// Drivers returns every driver, in a fixed order: mem, file, azurite. Benchmarks loop
// over it with b.Run; tests usually use ForEachDriver.
func Drivers() []Driver {
	return []Driver{
		{Name: "mem", Open: Mem},
		{Name: "file", Open: File},
		{Name: "azurite", Open: Azurite, require: requireAzurite},
	}
}

// ForEachDriver runs fn as a subtest per driver, named after the driver. open returns
// a new, empty bucket on that driver each time it is called.
func ForEachDriver(t *testing.T, fn func(t *testing.T, open func(t testing.TB) *objstore.Bucket)) {
	t.Helper()
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Helper()
			if d.require != nil {
				// Decide skip/fail up front, so fn never half-runs.
				d.require(t)
			}
			fn(t, d.Open)
		})
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

// Azurite opens a bucket over a new container in Azurite.
func Azurite(t testing.TB) *objstore.Bucket {
	t.Helper()
	addr := AzuriteAddr(t)
	name := newContainer(t, addr)
	registerAzuriteScheme()
	return open(t, azuriteScheme+"://"+name+"?"+azuriteQuery(addr))
}

// AzuriteURL creates a new container and returns the production-form URL for it,
// azblob://<container>?protocol=http&domain=<addr>&localemu=true, with the
// environment (AZURE_STORAGE_ACCOUNT=…, AZURE_STORAGE_KEY=…) a child process needs to
// open it, e.g. cmd.Env = append(os.Environ(), env...).
func AzuriteURL(t testing.TB) (dataURL string, env []string) {
	t.Helper()
	addr := AzuriteAddr(t)
	name := newContainer(t, addr)
	return "azblob://" + name + "?" + azuriteQuery(addr),
		[]string{"AZURE_STORAGE_ACCOUNT=" + AzuriteAccount, "AZURE_STORAGE_KEY=" + AzuriteKey}
}

// AzuriteAddr returns Azurite's host:port from TIDEMARK_AZURITE_ADDR. Without it, t
// fails when CI is set and skips otherwise.
func AzuriteAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(AzuriteAddrEnv)
	if addr != "" {
		return addr
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not set, but CI is: azurite must be started before the tests "+
			"(eval \"$(scripts/azurite.sh)\"); CI must not skip the production store", AzuriteAddrEnv)
	}
	t.Skipf("azurite not configured: run eval \"$(scripts/azurite.sh)\" to set %s and test the azblob driver", AzuriteAddrEnv)
	return ""
}

func requireAzurite(t testing.TB) {
	t.Helper()
	AzuriteAddr(t)
}

func azuriteQuery(addr string) string {
	return url.Values{"protocol": {"http"}, "domain": {addr}, "localemu": {"true"}}.Encode()
}

func open(t testing.TB, rawURL string) *objstore.Bucket {
	t.Helper()
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

var registerOnce sync.Once

func registerAzuriteScheme() {
	registerOnce.Do(func() {
		cred, err := azblob.NewSharedKeyCredential(AzuriteAccount, AzuriteKey)
		if err != nil {
			panic(fmt.Sprintf("objstoretest: Azurite credential: %v", err))
		}
		blob.DefaultURLMux().RegisterBucket(azuriteScheme, &azureblob.URLOpener{
			MakeClient: func(svc azureblob.ServiceURL, c azureblob.ContainerName) (*container.Client, error) {
				u, err := url.JoinPath(string(svc), string(c))
				if err != nil {
					return nil, err
				}
				return container.NewClientWithSharedKeyCredential(u, cred, nil)
			},
			ServiceURLOptions: azureblob.ServiceURLOptions{AccountName: AzuriteAccount},
		})
	})
}

// newContainer creates a container with a random name and deletes it when t ends.
func newContainer(t testing.TB, addr string) string {
	t.Helper()
	// A quick dial first: the SDK retries a refused connection for many seconds
	// before saying anything useful.
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("azurite at %s (%s) is not reachable: %v; start it with scripts/azurite.sh", addr, AzuriteAddrEnv, err)
	}
	_ = conn.Close()

	cred, err := azblob.NewSharedKeyCredential(AzuriteAccount, AzuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	svc := "http://" + addr + "/" + AzuriteAccount
	client, err := azblob.NewClientWithSharedKeyCredential(svc, cred, nil)
	if err != nil {
		t.Fatalf("azurite client for %s: %v", svc, err)
	}
	name := containerName()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateContainer(ctx, name, nil); err != nil {
		t.Fatalf("create azurite container %s at %s: %v", name, addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteContainer(ctx, name, nil); err != nil {
			t.Logf("delete azurite container %s: %v", name, err)
		}
	})
	return name
}

// containerName returns a random valid container name: 3-63 characters of lowercase
// letters and digits (hyphens are allowed too, but not needed), starting with a letter.
func containerName() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "tmtest" + hex.EncodeToString(b[:])
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
