package objstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
)

// Every driver Tidemark runs on has conditional writes, and the probe leaves
// nothing behind.
func TestEveryDriverPassesTheConditionalWriteProbe(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(t testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		b := open(t)
		if err := objstore.CheckConditionalWrites(ctx, b); err != nil {
			t.Fatal(err)
		}
		if left, err := b.List(ctx, objstore.ProbePrefix); err != nil || len(left) != 0 {
			t.Fatalf("left behind: %v (%v)", left, err)
		}
	})
}

// The production failure it guards against: a bucket that ignores put-if-absent
// (an S3-compatible store without If-None-Match, a gateway dropping the header)
// lets two commits of one table version both "win", and a table is corrupt long
// after the start. Here a real MinIO, whose precondition the proxy strips, must
// be refused by the probe with an error that names the missing capability.
func TestABucketWithoutConditionalWritesFailsTheProbe(t *testing.T) {
	p, err := faultproxy.Start(faultproxy.Config{Flavor: faultproxy.S3, Target: objstoretest.MinIOAddr(t), Seed: 1,
		S3SecretKey: objstoretest.MinIOPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b := objstoretest.OpenS3(t, p.URL())
	p.Set(faultproxy.Faults{StripConditional: true})
	ctx := context.Background()
	err = objstore.CheckConditionalWrites(ctx, b)
	if !errors.Is(err, objstore.ErrNoConditionalWrites) || !strings.Contains(err.Error(), "does not support conditional writes (put-if-absent)") ||
		!strings.Contains(err.Error(), "MinIO") {
		t.Fatalf("probe through a proxy stripping If-None-Match: %v, want ErrNoConditionalWrites saying what to do", err)
	}
	if c := p.Counts(); c.Stripped == 0 {
		t.Fatalf("%+v: nothing was stripped", c)
	}
	if left, err := b.List(ctx, objstore.ProbePrefix); err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v (%v)", left, err)
	}
	// The same MinIO without the proxy's interference passes.
	p.Set(faultproxy.Faults{})
	if err := objstore.CheckConditionalWrites(ctx, b); err != nil {
		t.Fatalf("probe through the plain proxy: %v", err)
	}
}
