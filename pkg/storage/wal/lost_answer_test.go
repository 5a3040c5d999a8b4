package wal_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
)

// The production hazard, through the real S3 SDK and a real MinIO: the store
// performs a put-if-absent, the answer is lost with the connection, and the SDK's
// resend is answered 412 as if another writer held the key. For an entry (rule 3
// of fence.go) and for a seal's manifest version (the edit's txn_id) the writer
// must find its own write there, and go on: every acknowledged row sealed once,
// the shard still writable.
func TestAnAppendAndASealWhoseAnswersAreLostKeepEveryRowOnce(t *testing.T) {
	p, err := faultproxy.Start(faultproxy.Config{Flavor: faultproxy.S3, Target: objstoretest.MinIOAddr(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b := objstoretest.OpenS3(t, p.URL())
	w := openWriter(t, b, testShard)
	loseFirst := func(part string) func(*http.Request) bool {
		return faultproxy.FirstN(1, func(r *http.Request) bool {
			return faultproxy.S3.IsConditionalWrite(r) && strings.Contains(r.URL.Path, part)
		})
	}

	p.Set(faultproxy.Faults{DropAfter: 1, Only: loseFirst("/entries/")})
	mustAppend(t, w, "a", "b")
	p.Set(faultproxy.Faults{DropAfter: 1, Only: loseFirst("/_manifests/")})
	mustSeal(t, w)
	if c := p.Counts(); c.DroppedAfter != 2 {
		t.Fatalf("%+v: want the answers of one entry write and one manifest write dropped", c)
	}
	p.Set(faultproxy.Faults{})
	mustAppend(t, w, "c")
	mustSeal(t, w)
	checkExactlyOnce(t, sealedRows(t, b, testShard), []string{"a", "b", "c"})
}
