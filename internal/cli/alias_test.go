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
	for name, use := range map[string]string{"MERGE_MAX_GENERATION": "MERGE_MAX_GENERATIONS", "WORKER_LEASE_TTL_SECS": "WORKER_LEASE_TTL",
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

// Every alias stands for a Tidemark variable that exists: a renamed setting
// cannot leave an alias pointing nowhere.
func TestEveryAliasNamesATidemarkSetting(t *testing.T) {
	for _, a := range Aliases() {
		if !slices.Contains(tidemarkSettings, a.Env) {
			t.Errorf("alias %s stands for %s, which is no Tidemark setting", a.Name, a.Env)
		}
		if a.Binary != "worker" && a.Binary != "master" {
			t.Errorf("alias %s: binary %q", a.Name, a.Binary)
		}
	}
}
