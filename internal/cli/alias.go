package cli

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Alias is an environment variable of the reference system (lance-context) that
// Tidemark accepts for one of its own settings, so that a deployment written for
// the reference keeps its configuration. The Tidemark variable wins when both are
// set; every alias used is a startup warning naming the variable to use instead.
type Alias struct {
	// Name is the reference's variable, e.g. ROLLOUT_FLUSH_INTERVAL_SECS.
	Name string
	// Env is the Tidemark variable it stands for, e.g. FLUSH_INTERVAL.
	Env string
	// Binary is the binary whose setting it is in the reference ("worker" for its
	// server, "master"): MASTER_PORT must not set a worker's HTTP_ADDR.
	Binary string
	// convert turns the reference's value (in its unit) into the flag's. The zero
	// conversion takes it as it is.
	convert conversion
	// renamed marks a former name of Tidemark's own (Renamed), not the reference's.
	renamed bool
}

// conversion turns a value of a reference variable into the Tidemark flag's; lookup
// reads other variables (MASTER_PORT needs MASTER_HOST). doc says what it does, in
// docs/CONFIGURATION.md's table of aliases.
type conversion struct {
	doc string
	fn  func(v string, lookup func(string) (string, bool)) (string, error)
}

// Convert returns the Tidemark value of the alias's value v.
func (a Alias) Convert(v string, lookup func(string) (string, bool)) (string, error) {
	if a.convert.fn == nil {
		return v, nil
	}
	return a.convert.fn(v, lookup)
}

// Conversion says how the alias's value becomes the Tidemark variable's ("none":
// it is taken as it is).
func (a Alias) Conversion() string {
	if a.convert.doc == "" {
		return "none"
	}
	return a.convert.doc
}

// Aliases is the table of the reference's variables Tidemark accepts, read from
// lance-context's crates/lance-context-server/src/config.rs and
// crates/lance-context-master/src/config.rs (commit 02969b33).
func Aliases() []Alias {
	return []Alias{
		// The reference's server (Tidemark's worker).
		{Name: "ROLLOUT_FLUSH_INTERVAL_SECS", Env: "FLUSH_INTERVAL", Binary: "worker", convert: seconds},
		{Name: "ROLLOUT_MERGE_MAX_GENERATIONS", Env: "MERGE_MAX_GENERATIONS", Binary: "worker"},
		{Name: "ROLLOUT_MERGE_MAX_BYTES", Env: "MERGE_MAX_BYTES", Binary: "worker"},
		{Name: "ROLLOUT_MERGE_MEMORY_BYTES", Env: "MERGE_MEMORY_BUDGET", Binary: "worker"},
		{Name: "ROLLOUT_MERGE_CONCURRENCY", Env: "MERGE_CONCURRENCY", Binary: "worker"},
		{Name: "ROLLOUT_WAL_PENDING_WARN_GENERATIONS", Env: "WAL_PENDING_WARN_GENERATIONS", Binary: "worker"},
		{Name: "ROLLOUT_WAL_PENDING_MAX_GENERATIONS", Env: "WAL_PENDING_MAX_GENERATIONS", Binary: "worker"},
		{Name: "ROLLOUT_CACHE_CAPACITY", Env: "MAX_OPEN_STORES", Binary: "worker"},
		{Name: "DATA_DIR", Env: "DATA_URL", Binary: "worker", convert: dataURL},
		// The reference's master.
		{Name: "DATA_DIR", Env: "DATA_URL", Binary: "master", convert: dataURL},
		{Name: "MASTER_PORT", Env: "HTTP_ADDR", Binary: "master", convert: masterPort},
		{Name: "MASTER_HOST", Env: "HTTP_ADDR", Binary: "master", convert: masterHost},
		{Name: "STATS_SCAN_INTERVAL_SECS", Env: "STATS_SCAN_INTERVAL", Binary: "master", convert: seconds},
		{Name: "MERGE_WAL_INTERVAL_SECS", Env: "MERGE_WAL_INTERVAL", Binary: "master", convert: seconds},
		{Name: "COMPACTION_INTERVAL_SECS", Env: "COMPACTION_INTERVAL", Binary: "master", convert: seconds},
		{Name: "ETCD_LEASE_TTL_SECS", Env: "LEASE_TTL", Binary: "master", convert: seconds},
		{Name: "TASK_HISTORY_LIMIT", Env: "TASK_RETENTION_COUNT", Binary: "master"},
		{Name: "TASK_HISTORY_TTL_SECS", Env: "TASK_RETENTION_AGE", Binary: "master", convert: positiveSeconds},
	}
}

// Renamed are Tidemark's own former variables that folded into a setting of the
// same meaning under another name (issue 43): still applied when the new one is
// not set, each with a startup warning naming the variable to use instead.
func Renamed() []Alias {
	return []Alias{
		{Name: "WORKER_LEASE_TTL", Env: "LEASE_TTL", Binary: "worker", renamed: true},
		{Name: "MASTER_LEASE_TTL", Env: "LEASE_TTL", Binary: "master", renamed: true},
	}
}

// referenceFolded are the reference's settings whose Tidemark setting folded
// into another one with a different meaning (issue 43), with what replaced it:
// set, each is a startup warning saying it is ignored and why, never silence.
var referenceFolded = map[string]string{
	"ROLLOUT_CLEANUP_INTERVAL_SECS": "the worker's own merge timer (CLEANUP_INTERVAL) is gone: with etcd the master decides " +
		"merges (MERGE_WAL_INTERVAL, MERGE_MAX_DELAY); a worker without etcd merges its shard every FLUSH_INTERVAL",
	"ROLLOUT_MERGE_AFTER_GENERATIONS": "the worker's own count trigger (MERGE_AFTER_GENERATIONS) is gone: with etcd the master " +
		"merges a store at MERGE_WAL_MIN_GENERATIONS pending generations; a worker without etcd merges its shard every FLUSH_INTERVAL",
}

// referenceIgnored are the reference's settings that have no Tidemark
// equivalent: set, each is a startup warning saying it is ignored, never silence.
var referenceIgnored = []string{
	"MERGE_EXECUTION_TIMEOUT_SECS", "MERGE_QUEUE_TIMEOUT_SECS", "MERGE_IDLE_TIMEOUT_SECS",
	"ROLLOUT_KEY_INDEX_TYPE", "ROLLOUT_CACHE_BYTES",
	"REQUEST_BODY_IDLE_TIMEOUT_SECS", "SCAN_CONCURRENCY", "STATS_MAINTENANCE_EVERY_N_SCANS",
	"STATS_HISTORY_TTL_SECS", "STATS_COLD_RETIRE_SECS", "COMPACTION_CONCURRENCY",
	"COMPACTION_THREADS", "COMPACTION_BATCH_SIZE", "COMPACTION_MAX_BYTES_PER_FILE",
	"INDEX_AFTER_COMPACTION", "INDEX_BEFORE_MERGE", "TASK_COOLDOWN_AFTER_FAILURES",
	"TASK_COOLDOWN_BASE_SECS", "TASK_COOLDOWN_MAX_SECS", "UI_DIR",
	"MAINTENANCE_TIMEOUT_SECS", "MAINTENANCE_IDLE_TIMEOUT_SECS", "MAINTENANCE_DRAIN_TIMEOUT_SECS",
}

// retiredSettings are Tidemark's own settings that were removed or folded into
// others, with what took their place: set, each is a startup warning saying it
// is ignored and why, never silence and never a refusal to start.
var retiredSettings = map[string]string{
	"MERGE_WAL_MAX_ENQUEUES": "merges are enqueued on demand as stores become due, at most 256 new ones a sweep or round",
	// Issue 43: fewer settings (docs/CONFIGURATION.md, "What folded into what").
	"MERGE_AFTER_GENERATIONS": "with etcd the master alone decides merges; a worker without etcd merges its shard every FLUSH_INTERVAL",
	"CLEANUP_INTERVAL":        "with etcd the master alone decides merges; a worker without etcd merges its shard every FLUSH_INTERVAL",
	"MERGE_PREPARED_TTL":      "the two-phase fan-out that prepared merges is gone, and with it prepared merges",
	"ROLLOUT_LARGE_BLOB_LOG_BYTES": "an added blob of 16 MiB or more (the reference's default) is always logged; " +
		"rollout_blob_bytes has every size",
	"FEED_MAX_WAIT":                   "a change-feed long poll waits at most 30 s",
	"ADD_BACKPRESSURE_MAX_DELAY":      "an add waits at most 2 s, just under WAL_PENDING_MAX_GENERATIONS",
	"SWEEP_STEP_TIMEOUT":              "one store's step of a sweep is bounded at 60 s",
	"OBJECT_STORE_THROTTLE_RETRY":     "a throttled request is sent again for half of OBJECT_STORE_TIMEOUT",
	"COMPACTION_MAX_SOURCE_FRAGMENTS": "a compaction rewrites at most 64 fragments",
	"WAL_MANIFEST_RETENTION_COUNT":    "VERSION_RETENTION_COUNT (at least 2) applies to WAL shard manifests too",
	"GENERATION_CACHE_BYTES":          "CACHE_BYTES is the decoded-generation cache; each store's table cache is a quarter of it",
	"TABLE_CACHE_BYTES":               "each store's table cache is a quarter of CACHE_BYTES",
	"TASK_PRUNE_INTERVAL":             "old finished tasks are deleted every hour, or every quarter of TASK_RETENTION_AGE when shorter",
	"MERGE_WAL_WORKER_TIMEOUT":        "one worker's merge is bounded at a sixth of TASK_TIMEOUT",
	"MERGE_WAL_CONCURRENCY":           "merge_wal tasks run 4x TASK_CONCURRENCY at once",
	"COMPACTION_MAX_ENQUEUES":         "a compaction sweep enqueues at most 16 new compact tasks",
	"CLEANUP_EVERY_VERSIONS":          "a store is compacted (and cleaned up) at least every 100 versions",
	"WORKER_DIAL_TIMEOUT":             "ETCD_DIAL_TIMEOUT bounds connecting to a worker too",
}

// settingPrefixes are the prefixes of the two systems' settings: a variable with
// one of them that neither knows is probably a misspelt setting, and is warned
// about. Generic prefixes other software uses too (HTTP_, TLS_, LOG_) are left
// out, so a proxy or runtime variable never raises a warning.
var settingPrefixes = []string{
	"TIDEMARK_", "ROLLOUT_", "MASTER_", "WORKER_", "MERGE_", "ETCD_", "TASK_", "STATS_",
	"COMPACTION_", "WAL_", "MAINTENANCE_", "SWEEP_", "ORPHAN_", "AUTH_", "GC_", "VERSION_",
}

// ErrAliasValue is the error of a reference variable whose value cannot be
// turned into its Tidemark setting.
var ErrAliasValue = errors.New("invalid value")

// The conversions of the reference's values.
var (
	seconds         = conversion{"seconds to a duration", secondsToDuration}
	positiveSeconds = conversion{"seconds to a duration (0, no age limit, is refused)", positiveSecondsToDuration}
	dataURL         = conversion{"a path becomes a `file://` URL; a URI stays", dataDirToURL}
	masterPort      = conversion{"`MASTER_HOST:MASTER_PORT` (host `0.0.0.0` when unset)", masterPortToAddr}
	masterHost      = conversion{"`MASTER_HOST:7080` when `MASTER_PORT` is unset", masterHostToAddr}
)

// secondsToDuration turns a count of seconds into a duration ("30" is "30s").
func secondsToDuration(v string, _ func(string) (string, bool)) (string, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 63)
	if err != nil {
		return "", fmt.Errorf("%w: %q is not a whole number of seconds", ErrAliasValue, v)
	}
	return (time.Duration(n) * time.Second).String(), nil
}

// positiveSecondsToDuration is secondsToDuration refusing 0, which means "no
// limit" in the reference and has no Tidemark equivalent.
func positiveSecondsToDuration(v string, lookup func(string) (string, bool)) (string, error) {
	d, err := secondsToDuration(v, lookup)
	if err == nil && d == "0s" {
		return "", fmt.Errorf("%w: 0 (no age limit) has no equivalent; give a duration", ErrAliasValue)
	}
	return d, err
}

// dataDirToURL turns the reference's data directory (a path or an object store
// URI) into a blob URL: a path becomes file://.
func dataDirToURL(v string, _ func(string) (string, bool)) (string, error) {
	if strings.Contains(v, "://") {
		return v, nil
	}
	abs, err := filepath.Abs(v)
	if err != nil {
		return "", fmt.Errorf("%w: data directory %q: %v", ErrAliasValue, v, err)
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// masterPortToAddr makes HTTP_ADDR of MASTER_PORT and MASTER_HOST (the
// reference's default host, 0.0.0.0, when unset).
func masterPortToAddr(v string, lookup func(string) (string, bool)) (string, error) {
	port, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
	if err != nil {
		return "", fmt.Errorf("%w: %q is not a port", ErrAliasValue, v)
	}
	host, ok := lookup("MASTER_HOST")
	if !ok || host == "" {
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, strconv.FormatUint(port, 10)), nil
}

// masterHostToAddr makes HTTP_ADDR of MASTER_HOST alone, on Tidemark's port
// 7080 (MASTER_PORT, if set, is applied instead: see ApplyEnv).
func masterHostToAddr(v string, _ func(string) (string, bool)) (string, error) {
	return net.JoinHostPort(v, "7080"), nil
}

// looksLikeSetting reports whether name has the prefix of either system's
// settings.
func looksLikeSetting(name string) bool {
	return slices.ContainsFunc(settingPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}
