package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// TestDevOnTheUsersBucketKeepsTheStoresThere runs `master dev --data-url` as the
// README tells a user with a bucket of their own: an S3 URL (MinIO's), the
// credentials in the AWS_* variables. The cluster comes up on it, takes an add
// through w1 and reads it back through w2, and the rows are objects in the bucket
// (the store's registry object, w1's WAL), while the data directory keeps only
// etcd and the logs.
func TestDevOnTheUsersBucketKeepsTheStoresThere(t *testing.T) {
	t.Parallel()
	skipShort(t)
	store := minioStore(t) // first: without MinIO the test skips before building
	b := build(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	args := []string{
		"--dir", data, "--data-url", store.url, "--workers", "2", "--worker-binary", b.worker,
		"--etcd-addr", freeAddr(t), "--master-grpc-addr", freeAddr(t), "--master-http-addr", freeAddr(t),
		"--worker-http-port", "0", "--worker-grpc-port", "0", "--etcd-unsafe-no-fsync", "--echo-level", "error",
	}
	dev := startDev(t, dir, "dev-s3", args, store.env)
	if !strings.Contains(dev.banner, "data    "+store.url) {
		t.Errorf("banner:\n%s\nwant the data URL %s", dev.banner, store.url)
	}
	code, body, err := postWith(http.DefaultClient, dev.workers["w1"]+"/api/v1/rollouts/demo/records?flush=true", "",
		`{"records":[{"id":"r1-0","rollout_id":"r1"},{"id":"r1-1","rollout_id":"r1"}]}`)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("add through w1: %d %s %v", code, body, err)
	}
	var got struct {
		Record *struct {
			RolloutID string `json:"rollout_id"`
		} `json:"record"`
	}
	code, out, err := httpGet(dev.workers["w2"] + "/api/v1/rollouts/demo/records/r1-0")
	if err != nil || code != http.StatusOK || json.Unmarshal(out, &got) != nil || got.Record == nil || got.Record.RolloutID != "r1" {
		t.Fatalf("GET r1-0 through w2: %d %s %v, want the record added through w1", code, out, err)
	}

	keys := objstoretest.Keys(t, objstoretest.OpenURL(t, store.url))
	wal := 0
	for k := range keys {
		if strings.Contains(k, "/_wal/w1/") {
			wal++
		}
	}
	if !keys["_registry/rollout/demo.json"] || wal == 0 {
		t.Errorf("objects in the bucket: %d, of them %d of w1's WAL; want the store's registry object and w1's WAL", len(keys), wal)
	}
	if _, err := os.Stat(filepath.Join(data, "store")); !os.IsNotExist(err) {
		t.Errorf("%s/store: %v; want no local store beside a data URL", data, err)
	}
	if err := dev.stop(syscall.SIGINT, time.Minute); err != nil {
		t.Fatalf("master dev on SIGINT: %v\n%s", err, dev.tail(20))
	}
	if !strings.Contains(dev.tail(3), "stopped; data kept in") {
		t.Errorf("master dev's last lines:\n%s\nwant a clean stop", dev.tail(5))
	}
}
