package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/table"
)

// The scale scenario at a tiny size: both stores are built into levels (the
// scenario checks every row count and every read itself), both buckets are
// measured with their requests counted, the latency bucket's reads pay their
// round trips, and the section renders with its goals.
func TestScaleSmall(t *testing.T) {
	env := testEnv(t)
	cfg := DefaultScaleConfig([]int64{4000, 12000})
	cfg.BuildRows, cfg.AppendRows = 2000, 700
	cfg.Compact.TargetRows = 500
	cfg.Retention = table.Retention{KeepVersions: 3, KeepAge: 5 * time.Millisecond, SafetyWindow: 5 * time.Millisecond}
	cfg.Latency = 2 * time.Millisecond
	cfg.Gets, cfg.MissingGets, cfg.Batches, cfg.Pages = [2]int{20, 5}, [2]int{3, 2}, [2]int{3, 2}, [2]int{3, 2}
	cfg.BatchIDs, cfg.PageRows, cfg.WarmIDs = 20, 10, 100
	cfg.MergeRows, cfg.Merges = 50, 1
	cfg.ProfileDir = t.TempDir()
	res, err := RunScale(context.Background(), env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sizes) != 2 {
		t.Fatalf("%d sizes", len(res.Sizes))
	}
	for _, s := range res.Sizes {
		b := s.Build
		if b.Merges != int(s.Rows)/cfg.BuildRows || b.Compactions == 0 || b.Levels.Fragments[0] != 0 ||
			len(b.Levels.Fragments) < 3 {
			t.Errorf("%d rows: build %+v", s.Rows, b)
		}
		if len(s.Buckets) != 2 || s.ReadRSS < s.BaseRSS || s.BaseRSS <= 0 {
			t.Fatalf("%d rows: %+v", s.Rows, s)
		}
		for _, bk := range s.Buckets {
			for _, o := range scaleOps(cfg) {
				// A missing id's get may cost no request: the bloom filters exclude it.
				if op := o.op(bk); op.Q.N == 0 || op.Requests <= 0 && o.name != "get of a missing id" {
					t.Errorf("%d rows, %s: %s: %+v", s.Rows, bk.Name, o.name, op)
				}
			}
			if n := bk.Batch.ByObject["data"]; n < 1 {
				t.Errorf("%d rows, %s: a batch get read %v data objects", s.Rows, bk.Name, n)
			}
			if bk.Compaction.Report.Compactions == 0 {
				t.Errorf("%d rows, %s: the compact task after the merges compacted nothing", s.Rows, bk.Name)
			}
		}
		if l := s.Buckets[1]; l.Latency != cfg.Latency || l.Get.Q.P50 < cfg.Latency {
			t.Errorf("%d rows: a get on the latency bucket took %s", s.Rows, l.Get.Q.P50)
		}
	}
	profiles, err := os.ReadDir(cfg.ProfileDir)
	if err != nil || len(profiles) != 8 {
		t.Errorf("profiles: %v, %v", profiles, err)
	}
	md := res.Markdown()
	for _, want := range []string{ScaleHeading, "| 4,000 |", "| 12,000 |", "p50 12k / 4k, file:// |",
		"- Get: p50 grows at most 1.5x from 4k to 12k rows:",
		"The same operations' requests by the object they went to", "- At 12k rows on file://, get p50 at most 5.0 ms:"} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	t.Log(md)
}
