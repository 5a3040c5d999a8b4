package registry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
)

// Through the real S3 SDK and MinIO: the registry object is created, its answer is
// lost with the connection, the SDK sends the write again and MinIO answers 412 as
// to a lost race. The create made the store, so it must succeed (a client told 409
// would believe another created it), while a second create still fails.
func TestACreateWhoseAnswerIsLostSucceeds(t *testing.T) {
	p, err := faultproxy.Start(faultproxy.Config{Flavor: faultproxy.S3, Target: objstoretest.MinIOAddr(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := New(objstoretest.OpenS3(t, p.URL()))
	ctx := context.Background()
	registryWrite := func(req *http.Request) bool {
		return faultproxy.S3.IsConditionalWrite(req) && strings.Contains(req.URL.Path, "/_registry/")
	}
	p.Set(faultproxy.Faults{DropAfter: 1, Only: faultproxy.FirstN(1, registryWrite)})
	e, err := r.Create(ctx, Entry{Name: "s", Kind: KindRollout})
	if c := p.Counts(); c.DroppedAfter != 1 {
		t.Fatalf("%+v: want exactly the registry write's answer dropped", c)
	}
	if err != nil {
		t.Fatalf("create whose answer was lost: %v", err)
	}
	got, err := r.Get(ctx, KindRollout, "s")
	if err != nil || !got.CreatedAt.Equal(e.CreatedAt) {
		t.Fatalf("Get = %+v, %v; want the created entry %+v", got, err, e)
	}
	if _, err := r.Create(ctx, Entry{Name: "s", Kind: KindRollout}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create = %v, want ErrExists", err)
	}
}
