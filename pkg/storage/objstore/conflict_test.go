package objstore_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// conflictingS3 is a reverse proxy to MinIO that answers the first conflicts
// conditional writes (If-None-Match: *) itself with S3's 409
// ConditionalRequestConflict, which S3 sends while another conditional write of the
// key is in flight, and passes everything else to MinIO.
func conflictingS3(t *testing.T, conflicts int64) (endpoint string, answered *atomic.Int64) {
	t.Helper()
	target, err := url.Parse("http://" + objstoretest.MinIOAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	answered = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*" && answered.Load() < conflicts {
			answered.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional `+
				`operation is currently in progress against this resource. Please try again.</Message>`+
				`<RequestId>tidemark-test</RequestId></Error>`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, answered
}

// TestPutIfAbsentResendsAfterS3ConditionalConflict: a 409 ConditionalRequestConflict
// is not a lost race. Taken for ErrExists, the key would belong to nobody when the
// write it conflicted with fails too; taken for a store failure, a commit would fail
// for no reason. The write is resent until it wins or gets 412 (ErrExists).
func TestPutIfAbsentResendsAfterS3ConditionalConflict(t *testing.T) {
	endpoint, answered := conflictingS3(t, 3)
	b := objstoretest.OpenS3(t, endpoint)
	ctx := context.Background()
	const key = "conflict/_versions/00000001.json"
	if err := b.PutIfAbsent(ctx, key, []byte("first")); err != nil {
		t.Fatalf("PutIfAbsent after %d conflicts = %v, want nil (resent until it wins)", answered.Load(), err)
	}
	if answered.Load() != 3 {
		t.Fatalf("the proxy answered %d conflicts, want 3", answered.Load())
	}
	if got, err := b.Get(ctx, key); err != nil || string(got) != "first" {
		t.Fatalf("after the resent PutIfAbsent: %q, %v", got, err)
	}
	if err := b.PutIfAbsent(ctx, key, []byte("second")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("PutIfAbsent of a taken key = %v, want ErrExists from MinIO's 412", err)
	}
}

// TestPutIfAbsentConflictingUntilTheDeadline: resends stop with the caller's
// deadline, and the answer is neither a win nor ErrExists: the outcome was not
// decided. It is the store's failure (ErrUnavailable) when the deadline falls
// between two sends, the deadline itself when it cuts a send short (on a loaded
// machine it may).
func TestPutIfAbsentConflictingUntilTheDeadline(t *testing.T) {
	endpoint, answered := conflictingS3(t, 1<<30)
	b := objstoretest.OpenS3(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.PutIfAbsent(ctx, "conflict/forever", []byte("x"))
	if err == nil || errors.Is(err, objstore.ErrExists) ||
		!(errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("PutIfAbsent conflicting until the deadline = %v, want ErrUnavailable or the deadline, and not ErrExists", err)
	}
	// The resends end with the context, not long after it: a caller's deadline bounds them.
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("PutIfAbsent returned %v after a 300ms deadline", elapsed)
	}
	if answered.Load() < 2 {
		t.Fatalf("the write was sent %d times in 300ms, want resends", answered.Load())
	}
}
