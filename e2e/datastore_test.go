package e2e

import (
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// dataStore is the object storage a test cluster's processes share: DATA_URL and
// the environment each process needs to open it (credentials, an endpoint).
type dataStore struct {
	url string
	env map[string]string
}

// minioStore is a fresh prefix of the test MinIO's bucket, in the form production
// uses (s3://...?endpoint=...), with the AWS_* variables of its credentials. It
// skips the test without TIDEMARK_MINIO_ADDR and fails it under CI=true
// (objstoretest.MinIOURL).
func minioStore(t *testing.T) dataStore {
	t.Helper()
	u, env := objstoretest.MinIOURL(t)
	return dataStore{url: u, env: envMap(env)}
}

// envMap turns KEY=VALUE lines (objstoretest's child environments) into a map.
func envMap(lines []string) map[string]string {
	m := make(map[string]string, len(lines))
	for _, kv := range lines {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
