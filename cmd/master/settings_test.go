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

// maxServeSettings is the most distinct settings worker serve and master serve
// may have together (issue 43: operators of the reference system complained
// about its ~70; Tidemark had 78 before it folded them).
const maxServeSettings = 60

// The settings must not grow back past what operators asked for: worker serve's
// (from docs/CONFIGURATION.md, which the worker's TestConfigurationDoc holds to
// its flags) and master serve's together, a flag and its variable one setting,
// a name both binaries have counted once, are at most maxServeSettings.
func TestServeSettingsDoNotGrowBackPastWhatOperatorsAskedFor(t *testing.T) {
	distinct := map[string]bool{}
	for _, s := range cli.ServeSettings(newServeCmd()) {
		distinct[s] = true
	}
	master := len(distinct)
	worker := configdoc.Settings(t, "worker serve")
	for _, s := range worker {
		distinct[s] = true
	}
	t.Logf("master serve %d, worker serve %d, distinct %d", master, len(worker), len(distinct))
	if len(distinct) > maxServeSettings {
		t.Errorf("worker serve and master serve have %d distinct settings, more than %d: the settings must not grow back "+
			"past what operators asked for (issue 43); fold a new one into an existing setting, or derive it", len(distinct), maxServeSettings)
	}
}

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
		"--min-fragments=16", "--compaction-deleted-ratio=0.17", "--task-concurrency=20"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MERGE_FANOUT": "serial",
		"ORPHAN_GRACE": "24s", "TASK_TIMEOUT": "25s", "LEASE_TTL": "26s",
		"SHUTDOWN_TIMEOUT": "27s", "TASK_RETENTION_COUNT": "29", "TASK_RETENTION_AGE": "30s"}
	if err := cli.ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	want := master.Config{
		ID:              "m1",
		Scan:            scanner.Config{Interval: 11 * time.Second},
		MergeSweep:      scanner.MergeSweepConfig{Interval: 12 * time.Second, MinGenerations: 13},
		MergeDemand:     scanner.DemandConfig{MaxDelay: 31 * time.Second},
		CompactionSweep: scanner.CompactionSweepConfig{Interval: 15 * time.Second, MinFragments: 16, DeletedRatio: 0.17},
		Scheduler:       master.SchedulerConfig{TaskConcurrency: 20, TaskTimeout: 25 * time.Second},
		FanOut:          fanout.Config{Shape: fanout.Serial},
		OrphanGrace:     24 * time.Second,
		LeaseTTL:        26 * time.Second,
		ShutdownTimeout: 27 * time.Second,
		TaskRetention:   master.TaskRetention{Count: 29, Age: 30 * time.Second},
	}
	if !reflect.DeepEqual(f.cfg, want) {
		t.Errorf("config\n%+v\nwant\n%+v", f.cfg, want)
	}
	if err := fs.Set("merge-fanout", "parallel"); err == nil {
		t.Error("--merge-fanout parallel was taken, want it refused")
	}
}
