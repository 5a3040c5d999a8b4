package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// The maintenance scenario at a tiny size: both runs keep every row (the scenario
// checks them itself), the maintained one runs compact tasks that compact and
// clean up and keeps fewer fragments, and the section renders.
func TestMaintenanceSmall(t *testing.T) {
	env := testEnv(t)
	cfg := DefaultMaintenanceConfig()
	cfg.Merges, cfg.Checkpoints, cfg.SweepEvery, cfg.MinFragments = 60, []int{10, 60}, 5, 8
	cfg.Retention = table.Retention{KeepVersions: 3, KeepAge: 5 * time.Millisecond, SafetyWindow: 5 * time.Millisecond}
	cfg.WAL = wal.Retention{KeepManifests: 3, SafetyWindow: 5 * time.Millisecond}
	cfg.Scans, cfg.Lookups = 2, 3
	res, err := RunMaintenance(context.Background(), env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	on, off := res.On, res.Off
	if len(on.Points) != 2 || len(off.Points) != 2 || off.Points[1].Fragments != 60 || off.MaxFragments != 60 {
		t.Fatalf("off: %+v", off)
	}
	compacted, deleted := 0, 0
	for _, task := range on.Tasks {
		if task.Report.Compaction.Sources > 0 {
			compacted++
		}
		deleted += task.Report.Table.FilesDeleted
	}
	if compacted == 0 || deleted == 0 || on.MaxFragments >= 2*cfg.MinFragments ||
		on.Points[1].Bytes.Stored >= off.Points[1].Bytes.Stored {
		t.Fatalf("on: %d compactions, %d files deleted, %+v", compacted, deleted, on)
	}
	md := res.Markdown()
	for _, want := range []string{MaintenanceHeading, "| 60 | off | 60 |", "| 60 | on |", "- Fragments stay under 2 x MIN_FRAGMENTS (16)"} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	t.Log(md)
}

// WriteMaintenanceSection inserts its section before the incident reproductions
// and replaces it afterwards, keeping everything else.
func TestWriteMaintenanceSection(t *testing.T) {
	path := t.TempDir() + "/BENCHMARKS.md"
	head, tail := "# Benchmarks\n\n## Base table\n\ntext\n\n", SectionHeading+" (`bench/`)\n\n### 1. x\n\nkept\n"
	if err := os.WriteFile(path, []byte(head+tail), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"first", "second"} {
		if err := WriteMaintenanceSection(path, MaintenanceHeading+", 2026-12-01\n\n"+run+"\n"); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if want := head + MaintenanceHeading + ", 2026-12-01\n\n" + run + "\n\n" + tail; string(got) != want {
			t.Fatalf("got:\n%s\nwant:\n%s", got, want)
		}
	}
}
