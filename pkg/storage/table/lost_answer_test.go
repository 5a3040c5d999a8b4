package table

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
)

// The production hazard, through the real S3 SDK and a real MinIO: the store
// creates the commit's manifest version, the answer is lost with the connection,
// the SDK sends the write again and S3 answers 412, as to a lost race. The commit
// then found its own watermark in the newest version, took it for someone else's
// ("already committed"), and aborted: it deleted the fragment its own version
// references. The table must instead recognise its version and keep its files.
func TestACommitWhoseAnswerIsLostKeepsItsVersionAndFiles(t *testing.T) {
	p, err := faultproxy.Start(faultproxy.Config{Flavor: faultproxy.S3, Target: objstoretest.MinIOAddr(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb := createTable(t, objstoretest.OpenS3(t, p.URL()))
	mustAppend(t, tb, row{"a", 1, 1})
	ctx := context.Background()
	base, err := tb.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := batch(row{"b", 2, 2}, row{"c", 2, 3})
	defer rec.Release()
	x, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{rec}, Shard: "s1", Generation: 7})
	if err != nil {
		t.Fatal(err)
	}
	// The first write of a manifest version is performed, and its answer lost.
	manifestWrite := func(r *http.Request) bool {
		return faultproxy.S3.IsConditionalWrite(r) && strings.Contains(r.URL.Path, "/_versions/")
	}
	p.Set(faultproxy.Faults{DropAfter: 1, Only: faultproxy.FirstN(1, manifestWrite)})
	m, err := x.Commit(ctx)
	if c := p.Counts(); c.DroppedAfter != 1 {
		t.Fatalf("%+v: want exactly the manifest write's answer dropped", c)
	}
	if err != nil {
		t.Fatalf("commit whose first answer was lost: %v", err)
	}
	if m.Version != base.Version+1 || m.TxnID != x.ID() || m.Watermark("s1") != 7 {
		t.Fatalf("committed version %d by %s (watermark %d), want version %d by %s with watermark 7",
			m.Version, m.TxnID, m.Watermark("s1"), base.Version+1, x.ID())
	}
	rep, err := tb.Verify(ctx, true)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("verify after the commit: %+v, %v", rep.Problems, err)
	}
	if got := liveRows(t, tb, m); len(got) != 3 || got["b"].value != 2 || got["c"].value != 3 {
		t.Fatalf("rows: %v", got)
	}
}
