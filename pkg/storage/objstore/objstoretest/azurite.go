package objstoretest

import (
	"context"
	"fmt"
	"net/url"
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

var azurite = server{
	name: "azurite", env: AzuriteAddrEnv, script: "scripts/azurite.sh", driver: "the azblob driver",
}

// Azurite opens a bucket over a new container in Azurite.
func Azurite(t testing.TB) *objstore.Bucket {
	t.Helper()
	return open(t, azuriteTestURL(t))
}

// azuriteTestURL creates a new container and returns its URL under azuriteScheme.
func azuriteTestURL(t testing.TB) string {
	t.Helper()
	addr := AzuriteAddr(t)
	name := newContainer(t, addr)
	registerSchemes()
	return azuriteScheme + "://" + name + "?" + azuriteQuery(addr)
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
	return azurite.addr(t)
}

func requireAzurite(t testing.TB) {
	t.Helper()
	AzuriteAddr(t)
}

func azuriteQuery(addr string) string {
	return url.Values{"protocol": {"http"}, "domain": {addr}, "localemu": {"true"}}.Encode()
}

// azuriteOpener opens azuriteScheme's URLs with Azurite's shared key.
func azuriteOpener() blob.BucketURLOpener {
	cred, err := azblob.NewSharedKeyCredential(AzuriteAccount, AzuriteKey)
	if err != nil {
		panic(fmt.Sprintf("objstoretest: Azurite credential: %v", err))
	}
	return &azureblob.URLOpener{
		MakeClient: func(svc azureblob.ServiceURL, c azureblob.ContainerName) (*container.Client, error) {
			u, err := url.JoinPath(string(svc), string(c))
			if err != nil {
				return nil, err
			}
			return container.NewClientWithSharedKeyCredential(u, cred, nil)
		},
		ServiceURLOptions: azureblob.ServiceURLOptions{AccountName: AzuriteAccount},
	}
}

// newContainer creates a container with a random name and deletes it when t ends.
func newContainer(t testing.TB, addr string) string {
	t.Helper()
	azurite.reachable(t, addr)
	cred, err := azblob.NewSharedKeyCredential(AzuriteAccount, AzuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	svc := "http://" + addr + "/" + AzuriteAccount
	client, err := azblob.NewClientWithSharedKeyCredential(svc, cred, nil)
	if err != nil {
		t.Fatalf("azurite client for %s: %v", svc, err)
	}
	// A valid container name: 3-63 lowercase letters and digits, starting with a letter.
	name := randomName("tmtest")
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
