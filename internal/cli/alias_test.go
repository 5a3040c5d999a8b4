package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// aliasFlags are a few of the binaries' settings, bound as they bind them.
func aliasFlags() (*pflag.FlagSet, *time.Duration, *string, *int) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flush := fs.Duration("flush-interval", 30*time.Second, "")
	BindEnv(fs, "flush-interval", "FLUSH_INTERVAL")
	addr := fs.String("http-addr", "127.0.0.1:7080", "")
	BindEnv(fs, "http-addr", "HTTP_ADDR")
	gens := fs.Int("merge-max-generations", 8, "")
	BindEnv(fs, "merge-max-generations", "MERGE_MAX_GENERATIONS")
	return fs, flush, addr, gens
}

// env is an environment: its lookup and its KEY=value lines.
func environment(vars map[string]string) (func(string) (string, bool), []string) {
	var lines []string
	for k, v := range vars {
		lines = append(lines, k+"="+v)
	}
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, lines
}

func apply(t *testing.T, fs *pflag.FlagSet, binary string, vars map[string]string) []EnvWarning {
	t.Helper()
	lookup, lines := environment(vars)
	warnings, err := ApplyEnvAliases(fs, binary, lines, lookup)
	if err != nil {
		t.Fatal(err)
	}
	return warnings
}

func TestReferenceAliasIsConvertedFromItsUnitAndWarnedAbout(t *testing.T) {
	fs, flush, _, gens := aliasFlags()
	w := apply(t, fs, "worker", map[string]string{"ROLLOUT_FLUSH_INTERVAL_SECS": "5", "ROLLOUT_MERGE_MAX_GENERATIONS": "3"})
	if *flush != 5*time.Second || *gens != 3 {
		t.Fatalf("flush interval %s, max generations %d; want 5s and 3 from the reference's variables", *flush, *gens)
	}
	if len(w) != 2 || w[0].Use == "" || w[1].Use == "" {
		t.Fatalf("warnings %+v, want one per alias used, each naming the Tidemark variable", w)
	}
	for _, x := range w {
		if !strings.Contains(x.Message, x.Use) || !strings.Contains(x.Message, x.Variable) {
			t.Errorf("warning %q does not name %s and %s", x.Message, x.Variable, x.Use)
		}
	}
}

func TestTidemarkVariableWinsOverItsAlias(t *testing.T) {
	fs, flush, _, _ := aliasFlags()
	w := apply(t, fs, "worker", map[string]string{"FLUSH_INTERVAL": "2s", "ROLLOUT_FLUSH_INTERVAL_SECS": "5"})
	if *flush != 2*time.Second {
		t.Fatalf("flush interval %s, want FLUSH_INTERVAL's 2s", *flush)
	}
	if len(w) != 1 || w[0].Variable != "ROLLOUT_FLUSH_INTERVAL_SECS" || !strings.Contains(w[0].Message, "ignored") {
		t.Fatalf("warnings %+v, want the alias reported ignored", w)
	}
}

func TestAliasAppliesOnlyToItsBinary(t *testing.T) {
	fs, _, addr, _ := aliasFlags()
	apply(t, fs, "worker", map[string]string{"MASTER_PORT": "8090"})
	if *addr != "127.0.0.1:7080" {
		t.Fatalf("a worker's HTTP_ADDR became %s from the reference master's MASTER_PORT", *addr)
	}
	fs, _, addr, _ = aliasFlags()
	w := apply(t, fs, "master", map[string]string{"MASTER_PORT": "8090", "MASTER_HOST": "10.0.0.7"})
	if *addr != "10.0.0.7:8090" {
		t.Fatalf("master HTTP_ADDR %s, want 10.0.0.7:8090 from MASTER_HOST and MASTER_PORT", *addr)
	}
	if len(w) != 2 {
		t.Fatalf("warnings %+v, want one for each alias used", w)
	}
}

func TestAliasValueThatCannotBeConvertedIsAnErrorNamingBoth(t *testing.T) {
	for vars, want := range map[string]string{"ROLLOUT_FLUSH_INTERVAL_SECS": "1.5", "TASK_HISTORY_TTL_SECS": "0"} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.Duration("flush-interval", time.Second, "")
		BindEnv(fs, "flush-interval", "FLUSH_INTERVAL")
		fs.Duration("task-retention-age", time.Hour, "")
		BindEnv(fs, "task-retention-age", "TASK_RETENTION_AGE")
		lookup, lines := environment(map[string]string{vars: want})
		_, err := ApplyEnvAliases(fs, map[string]string{"ROLLOUT_FLUSH_INTERVAL_SECS": "worker", "TASK_HISTORY_TTL_SECS": "master"}[vars], lines, lookup)
		if !errors.Is(err, ErrAliasValue) || !strings.Contains(err.Error(), vars) {
			t.Errorf("%s=%s: err %v, want ErrAliasValue naming the variable", vars, want, err)
		}
	}
}

func TestUnknownSettingIsWarnedAboutWithTheNearestName(t *testing.T) {
	fs, _, _, _ := aliasFlags()
	w := apply(t, fs, "worker", map[string]string{
		"MERGE_MAX_GENERATION":           "4",  // misspelt
		"MERGE_WAL_INTERVAL_SECS_TYPO":   "1",  // close to the reference name
		"FLUSH_INTERVAL_SECS":            "30", // a reference-style unit on a Tidemark name (no known prefix: not warned)
		"WORKER_LEASE_TTL_SECS":          "30", // reference-style unit on a Tidemark name
		"ROLLOUT_KEY_INDEX_TYPE":         "btree",
		"MERGE_WAL_INTERVAL":             "1m", // the master's: known, not warned
		"HTTP_PROXY":                     "x",  // not a setting's prefix
		"TIDEMARK_CHAOS_FAULTS_FILE":     "f",
		"TIDEMARK_AZURITE_ADDRESS_TYPO_": "x",
		"MERGE_WAL_MAX_ENQUEUES":         "64", // retired
	})
	got := map[string]EnvWarning{}
	for _, x := range w {
		got[x.Variable] = x
	}
	for name, use := range map[string]string{"MERGE_MAX_GENERATION": "MERGE_MAX_GENERATIONS", "WORKER_LEASE_TTL_SECS": "LEASE_TTL",
		"MERGE_WAL_INTERVAL_SECS_TYPO": "MERGE_WAL_INTERVAL_SECS", "ROLLOUT_KEY_INDEX_TYPE": "", "TIDEMARK_AZURITE_ADDRESS_TYPO_": ""} {
		x, ok := got[name]
		if !ok || x.Use != use {
			t.Errorf("%s: warning %+v, want one suggesting %q", name, x, use)
		}
	}
	for _, quiet := range []string{"FLUSH_INTERVAL_SECS", "MERGE_WAL_INTERVAL", "HTTP_PROXY", "TIDEMARK_CHAOS_FAULTS_FILE"} {
		if _, ok := got[quiet]; ok {
			t.Errorf("%s was warned about: %+v", quiet, got[quiet])
		}
	}
	if !strings.Contains(got["MERGE_WAL_MAX_ENQUEUES"].Message, "no longer a setting") {
		t.Errorf("retired setting: %q", got["MERGE_WAL_MAX_ENQUEUES"].Message)
	}
	if !strings.Contains(got["ROLLOUT_KEY_INDEX_TYPE"].Message, "no equivalent") {
		t.Errorf("reference setting without equivalent: %q", got["ROLLOUT_KEY_INDEX_TYPE"].Message)
	}
}

// A setting that folded (issue 43) is never silently ignored: the reference's
// name of a worker merge trigger that is gone is warned about saying what
// decides merges now, and a Tidemark variable that folded says what replaced it.
func TestAFoldedSettingIsWarnedAboutSayingWhatReplacedIt(t *testing.T) {
	fs, _, _, _ := aliasFlags()
	w := apply(t, fs, "worker", map[string]string{
		"ROLLOUT_CLEANUP_INTERVAL_SECS":   "300",
		"ROLLOUT_MERGE_AFTER_GENERATIONS": "10",
		"MERGE_AFTER_GENERATIONS":         "0",
		"TABLE_CACHE_BYTES":               "4096",
	})
	got := map[string]string{}
	for _, x := range w {
		got[x.Variable] = x.Message
	}
	for name, want := range map[string]string{"ROLLOUT_CLEANUP_INTERVAL_SECS": "FLUSH_INTERVAL", "ROLLOUT_MERGE_AFTER_GENERATIONS": "MERGE_WAL_MIN_GENERATIONS",
		"MERGE_AFTER_GENERATIONS": "FLUSH_INTERVAL", "TABLE_CACHE_BYTES": "CACHE_BYTES"} {
		if !strings.Contains(got[name], "ignored") || !strings.Contains(got[name], want) {
			t.Errorf("%s: warning %q, want it said ignored and naming %s", name, got[name], want)
		}
	}
}

// A renamed variable (WORKER_LEASE_TTL, now LEASE_TTL) still sets its setting
// in its binary, with a warning naming the new name; the new name wins.
func TestARenamedVariableStillSetsItsSettingWithAWarning(t *testing.T) {
	for _, c := range []struct {
		binary, old string
		vars        map[string]string
		want        time.Duration
	}{
		{"worker", "WORKER_LEASE_TTL", map[string]string{"WORKER_LEASE_TTL": "4s"}, 4 * time.Second},
		{"master", "MASTER_LEASE_TTL", map[string]string{"MASTER_LEASE_TTL": "3s"}, 3 * time.Second},
		{"master", "MASTER_LEASE_TTL", map[string]string{"MASTER_LEASE_TTL": "3s", "LEASE_TTL": "7s"}, 7 * time.Second},
		{"master", "WORKER_LEASE_TTL", map[string]string{"WORKER_LEASE_TTL": "4s"}, 10 * time.Second}, // the other binary's
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		ttl := fs.Duration("lease-ttl", 10*time.Second, "")
		BindEnv(fs, "lease-ttl", "LEASE_TTL")
		w := apply(t, fs, c.binary, c.vars)
		if *ttl != c.want {
			t.Errorf("%s %v: LEASE_TTL %s, want %s", c.binary, c.vars, *ttl, c.want)
		}
		warned := slices.ContainsFunc(w, func(x EnvWarning) bool { return x.Variable == c.old && x.Use == "LEASE_TTL" })
		if theirs := c.want == 10*time.Second; warned == theirs {
			t.Errorf("%s %v: warnings %+v", c.binary, c.vars, w)
		}
	}
}

// Every alias stands for a Tidemark variable that exists: a renamed setting
// cannot leave an alias pointing nowhere.
func TestEveryAliasNamesATidemarkSetting(t *testing.T) {
	for _, a := range append(Aliases(), Renamed()...) {
		if !slices.Contains(tidemarkSettings, a.Env) {
			t.Errorf("alias %s stands for %s, which is no Tidemark setting", a.Name, a.Env)
		}
		if a.Binary != "worker" && a.Binary != "master" {
			t.Errorf("alias %s: binary %q", a.Name, a.Binary)
		}
	}
}
