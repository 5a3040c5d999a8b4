package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/master"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/testutil/configdoc"
)

// docs/CONFIGURATION.md's section of this binary is its flags' (make docs writes it).
func TestConfigurationDoc(t *testing.T) { configdoc.CheckFlags(t, newRootCmd(), "master") }

// The list of every binary's variables, which keeps a setting of the other
// binary in a shared environment from being warned about as unknown, has each of
// this binary's.
func TestSettingsListHasEveryEnvironmentVariable(t *testing.T) {
	for _, m := range cli.UnlistedEnv(newRootCmd()) {
		t.Errorf("internal/cli's tidemarkSettings lacks %s", m)
	}
}

// Every setting of the master's parts reaches the field of master.Config named
// like it (MERGE_WAL_MIN_GENERATIONS, --merge-wal-min-generations:
// MergeSweep.MinGenerations), from its flag and from its variable alike.
func TestServeSettingsReachTheConfigFieldsNamedLikeThem(t *testing.T) {
	var f serveFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f.bind(fs)
	err := fs.Parse([]string{"--master-id=m1", "--stats-scan-interval=11s", "--merge-wal-interval=12s",
		"--merge-wal-min-generations=13", "--merge-max-delay=31s", "--compaction-interval=15s",
		"--min-fragments=16", "--compaction-deleted-ratio=0.17", "--cleanup-every-versions=18",
		"--compaction-max-enqueues=19", "--task-concurrency=20", "--merge-wal-concurrency=21"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MERGE_WAL_WORKER_TIMEOUT": "22s", "MERGE_FANOUT": "serial",
		"ORPHAN_GRACE": "24s", "TASK_TIMEOUT": "25s", "MASTER_LEASE_TTL": "26s",
		"SHUTDOWN_TIMEOUT": "27s", "TASK_PRUNE_INTERVAL": "28s", "TASK_RETENTION_COUNT": "29", "TASK_RETENTION_AGE": "30s"}
	if err := cli.ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	want := master.Config{
		ID:              "m1",
		Scan:            scanner.Config{Interval: 11 * time.Second},
		MergeSweep:      scanner.MergeSweepConfig{Interval: 12 * time.Second, MinGenerations: 13},
		MergeDemand:     scanner.DemandConfig{MaxDelay: 31 * time.Second},
		CompactionSweep: scanner.CompactionSweepConfig{Interval: 15 * time.Second, MinFragments: 16, DeletedRatio: 0.17, CleanupEveryVersions: 18, MaxEnqueues: 19},
		Scheduler:       master.SchedulerConfig{TaskConcurrency: 20, MergeConcurrency: 21, TaskTimeout: 25 * time.Second},
		FanOut:          fanout.Config{WorkerTimeout: 22 * time.Second, Shape: fanout.Serial},
		OrphanGrace:     24 * time.Second,
		LeaseTTL:        26 * time.Second,
		ShutdownTimeout: 27 * time.Second,
		TaskRetention:   master.TaskRetention{PruneInterval: 28 * time.Second, Count: 29, Age: 30 * time.Second},
	}
	if !reflect.DeepEqual(f.cfg, want) {
		t.Errorf("config\n%+v\nwant\n%+v", f.cfg, want)
	}
	if err := fs.Set("merge-fanout", "parallel"); err == nil {
		t.Error("--merge-fanout parallel was taken, want it refused")
	}
}
