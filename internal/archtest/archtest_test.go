package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The planes, from the bottom up. Every package of the module is in exactly one
// (TestEveryPackageIsInOnePlane), and links only packages of its own plane and of
// the planes it names in below: the arrows of the package graph point down.
var planes = []plane{
	{name: "runtime", pkgs: []string{"internal/...", "pkg/errclass", "proto/..."}, except: []string{"internal/archtest"},
		why: "runtime support (backoff, IPC checks, HTTP and gRPC serving, auth, flags, metrics registries, the wire types) knows nothing of the system it serves"},
	{name: "data", pkgs: []string{"pkg/data/..."}, below: []string{"runtime"},
		why: "row formats and filters do no I/O: no storage, no coordination, no server"},
	{name: "storage", pkgs: []string{"pkg/storage/...", "pkg/registry"}, below: []string{"runtime"},
		why: "the storage engine (objects, tables, WALs, the registries of stores) knows nothing of row formats, etcd or the servers"},
	{name: "coordination", pkgs: []string{"pkg/coord/...", "pkg/tasks"}, below: []string{"storage", "runtime"},
		why: "etcd coordination (the task queue, membership, the feed's horizons and cursors) names the engine's stores and shards, nothing of the servers that use it"},
	{name: "client", pkgs: []string{"pkg/client/..."}, below: []string{"runtime"},
		why: "the Go client of the worker's HTTP data API speaks its JSON and Arrow IPC: any program imports it, so it links no server, no engine and no etcd"},
	{name: "worker", pkgs: []string{"pkg/worker/...", "pkg/merge", "pkg/store", "pkg/export"}, below: []string{"coordination", "storage", "data", "runtime"},
		why: "the worker process: the master is a separate process it speaks to only over gRPC and HTTP"},
	{name: "master", pkgs: []string{"pkg/master/...", "pkg/scanner"}, below: []string{"client", "coordination", "storage", "data", "runtime"},
		why: "the master process: the worker is a separate process it speaks to only over gRPC and its data API's client"},
	{name: "binaries", pkgs: []string{"cmd/..."}, below: []string{"worker", "master", "client", "coordination", "storage", "data", "runtime"}, also: []string{"tools/devcluster", "tools/loadgen", "tools/chaos"},
		why: "a binary's main wires the planes below; of the tooling it links only what a command runs (master dev's cluster, worker load, the chaos hook of -tags chaos)"},
	{name: "tooling", pkgs: []string{"tools/...", "bench/...", "testutil/...", "e2e", "internal/archtest"}, below: []string{"binaries", "worker", "master", "client", "coordination", "storage", "data", "runtime"},
		why: "the tooling that drives whole clusters, the benchmarks and the test support sit above every plane they use"},
}

// plane is one layer of the module: see planes.
type plane struct {
	name   string
	pkgs   []string // patterns of its packages
	except []string // packages the patterns match that belong elsewhere
	below  []string // the planes it may link
	also   []string // packages of other planes it may link besides
	why    string
}

// planeRules turns the planes into rules: a plane's packages may link their own
// plane's, the packages of the planes below, and what also names.
func planeRules(planes []plane) []rule {
	byName := map[string]plane{}
	for _, p := range planes {
		byName[p.name] = p
	}
	var rules []rule
	for _, p := range planes {
		allow := slices.Clone(p.pkgs)
		for _, b := range p.below {
			allow = append(allow, byName[b].pkgs...)
		}
		allow = append(allow, p.also...)
		// A plane's exceptions are another plane's packages: allowed only as that one is.
		var deny []string
		for _, b := range append([]string{p.name}, p.below...) {
			deny = append(deny, byName[b].except...)
		}
		for _, pattern := range p.pkgs {
			rules = append(rules, rule{from: pattern, except: p.except, allow: allow, deny: deny, why: p.name + " plane: " + p.why})
		}
	}
	return rules
}

// The boundaries inside the planes. A package matching from (and none of except)
// may link only the Tidemark packages allow matches, if allow is set, and none that
// deny matches. Patterns are paths in the module; "pkg/storage/..." is that package
// and every one below it, "..." every package.
var rules = append(planeRules(planes), []rule{
	{from: "pkg/errclass", allow: []string{},
		why: "a leaf: every package declares its sentinels with errclass.New, so it can import none of them"},
	{from: "...", except: []string{"pkg/master", "cmd/master", "bench/..."}, deny: []string{"pkg/master"},
		why: "the Master process is wired by cmd/master (and built by the benchmark); its parts never reach up to the process that assembles them"},
	{from: "pkg/master/fanout", deny: []string{"pkg/master/api", "pkg/master/dashboard", "pkg/scanner"},
		why: "the fan-out calls workers: the APIs that show its work sit above it, and the stats rows it reads come as a function, not from the scanner"},
	{from: "pkg/scanner", deny: []string{"pkg/master/api", "pkg/master/dashboard", "pkg/master/fanout"},
		why: "the scanner and its sweeps read the stores and etcd: the orphan check and the rescan they use come as functions"},
	{from: "...", except: []string{"pkg/worker", "cmd/...", "bench/...", "tools/...", "testutil/...", "e2e", "internal/archtest"}, deny: []string{"pkg/worker"},
		why: "the worker process is wired by pkg/worker's root (New, Run) alone; its parts never reach up to the process that assembles them"},
	{from: "pkg/store", deny: []string{"pkg/worker/...", "pkg/merge", "pkg/export"},
		why: "a store handle (reads over the base table and the pending generations) is what the merge and the worker's parts work on: it knows neither"},
	{from: "pkg/export", deny: []string{"pkg/worker/...", "pkg/merge"},
		why: "an export reads a store handle (store.Scan) and writes a bucket: the worker's parts call it, and it merges nothing"},
	{from: "pkg/merge", deny: []string{"pkg/worker/..."},
		why: "the prepare/commit merge works on store handles; the worker's parts call it, never the other way"},
	{from: "pkg/worker/httpapi", deny: []string{"pkg/worker/rpc", "pkg/worker/sweep"},
		why: "the HTTP data API and the gRPC WorkerService share only pkg/worker/mergesvc (merges under fencing, store gone), so neither reaches into the other; the sweeps are the worker's own"},
	{from: "pkg/worker/rpc", deny: []string{"pkg/worker/httpapi", "pkg/worker/sweep", "pkg/worker/feed"},
		why: "the gRPC WorkerService shares only pkg/worker/mergesvc with the HTTP data API; the change feed is the data API's"},
	{from: "pkg/worker/sweep", deny: []string{"pkg/worker/httpapi", "pkg/worker/rpc", "pkg/worker/feed"},
		why: "the sweeps seal (and, standalone, merge) the worker's own shards: they answer no request, so they import no server"},
	{from: "pkg/worker/feed", deny: []string{"pkg/worker/httpapi", "pkg/worker/rpc", "pkg/worker/sweep", "pkg/worker/mergesvc"},
		why: "the change feed reads stores up to their horizons: the data API serves it, never the other way round, and it merges nothing"},
	{from: "pkg/worker/mergesvc", deny: []string{"pkg/worker/httpapi", "pkg/worker/rpc", "pkg/worker/sweep", "pkg/worker/feed"},
		why: "the merge service is what the worker's parts share about merges: it sits below all of them"},
	{from: "...", except: []string{"testutil/...", "bench/...", "e2e", "internal/archtest"}, deny: []string{"testutil/..."},
		why: "test support never links into a binary; bench, the benchmark harness, is the one command built on it (storetest)"},
}...)

// rule is one boundary: see rules.
type rule struct {
	from   string
	except []string
	allow  []string // nil: no allow-list
	deny   []string
	why    string
}

const module = "github.com/tidemark-io/tidemark"

// pkg is one package of the module as go list describes it, paths relative to the
// module and only the module's own imports kept.
type pkg struct {
	Imports []string // direct
	Deps    []string // direct and indirect
}

func TestPackagesLinkOnlyWhatTheirPlaneAllows(t *testing.T) {
	reported := map[string]bool{}
	for _, tags := range []string{"", "chaos"} {
		pkgs := load(t, tags)
		var failures []string
		for _, p := range unmatched(rules, pkgs) {
			failures = append(failures, "the rules' pattern "+p+" matches no package: a folder moved, update the rules")
		}
		failures = append(failures, violations(rules, pkgs)...)
		for _, f := range failures {
			if reported[f] {
				continue
			}
			reported[f] = true
			if tags != "" {
				f = "with -tags " + tags + ": " + f
			}
			t.Error(f)
		}
	}
}

// A package that no plane claims is checked by no plane rule: a new folder must
// say where it stands.
func TestEveryPackageIsInOnePlane(t *testing.T) {
	for path := range load(t, "chaos") {
		var in []string
		for _, p := range planes {
			if matchesAny(p.pkgs, path) && !matchesAny(p.except, path) {
				in = append(in, p.name)
			}
		}
		if len(in) != 1 {
			t.Errorf("%s is in the planes %q: it must be in exactly one (internal/archtest's planes)", path, in)
		}
	}
}

// The rules are only as good as the checker: an arrow that points up, directly
// or two hops down, must be reported with the chain that links it.
func TestAnImportAgainstTheRulesIsReportedWithItsChain(t *testing.T) {
	pkgs := map[string]pkg{
		"pkg/storage/table": {Imports: []string{"internal/backoff"}, Deps: []string{"internal/backoff", "pkg/master"}},
		"internal/backoff":  {Imports: []string{"pkg/master"}, Deps: []string{"pkg/master"}},
		"pkg/master":        {},
		"pkg/worker":        {Imports: []string{"pkg/storage/table"}, Deps: []string{"internal/backoff", "pkg/master", "pkg/storage/table"}},
		"cmd/worker":        {Imports: []string{"testutil/x"}, Deps: []string{"testutil/x"}},
		// Links test support only through cmd/worker: reported there, not twice.
		"cmd/master": {Imports: []string{"cmd/worker"}, Deps: []string{"cmd/worker", "testutil/x"}},
		"testutil/x": {},
	}
	rules := []rule{
		{from: "pkg/storage/...", allow: []string{"pkg/storage/...", "internal/backoff"}, why: "engine"},
		{from: "pkg/worker/...", deny: []string{"pkg/master/..."}, why: "processes"},
		{from: "...", except: []string{"testutil/..."}, deny: []string{"testutil/..."}, why: "tests"},
		{from: "pkg/data/...", allow: []string{}, why: "no such package"},
	}
	want := []string{
		"cmd/worker links testutil/x (cmd/worker -> testutil/x): tests",
		"pkg/storage/table links pkg/master (pkg/storage/table -> internal/backoff -> pkg/master): engine",
		"pkg/worker links pkg/master (pkg/worker -> pkg/storage/table -> internal/backoff -> pkg/master): processes",
	}
	if got := violations(rules, pkgs); !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := unmatched(rules, pkgs); !slices.Equal(got, []string{"pkg/data/..."}) {
		t.Errorf("unmatched = %q, want the rule of a package that does not exist", got)
	}
}

// load lists the module's packages with their imports (go list, from the module
// root whatever the test's directory).
func load(t *testing.T, tags string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", tags, "-json=ImportPath,Imports,Deps", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath    string
			Imports, Deps []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		path, ok := ours(p.ImportPath)
		if !ok {
			continue
		}
		pkgs[path] = pkg{Imports: keepOurs(p.Imports), Deps: keepOurs(p.Deps)}
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no package of the module")
	}
	return pkgs
}

// ours returns importPath relative to the module, and whether it is in it.
func ours(importPath string) (string, bool) {
	rel, ok := strings.CutPrefix(importPath, module+"/")
	return rel, ok
}

func keepOurs(paths []string) []string {
	var kept []string
	for _, p := range paths {
		if rel, ok := ours(p); ok {
			kept = append(kept, rel)
		}
	}
	return kept
}

// violations lists, sorted, every package that links one its rules forbid, with
// the shortest import chain that links it and the rule's why. A package is not
// listed for what it links only through a package the same rule lists already:
// one wrong import is one line, not one per package above it.
func violations(rules []rule, pkgs map[string]pkg) []string {
	var found []string
	for _, r := range rules {
		links := map[string][]string{} // package -> the forbidden packages it links
		for path, p := range pkgs {
			if matchesAny([]string{r.from}, path) && !matchesAny(r.except, path) {
				links[path] = slices.DeleteFunc(slices.Clone(p.Deps), func(dep string) bool { return !r.forbids(dep) })
			}
		}
		for path, deps := range links {
			for _, dep := range deps {
				if slices.ContainsFunc(pkgs[path].Imports, func(imp string) bool { return slices.Contains(links[imp], dep) }) {
					continue
				}
				found = append(found, path+" links "+dep+" ("+strings.Join(chain(pkgs, path, dep), " -> ")+"): "+r.why)
			}
		}
	}
	slices.Sort(found)
	return found
}

func (r rule) forbids(dep string) bool {
	return r.allow != nil && !matchesAny(r.allow, dep) || matchesAny(r.deny, dep)
}

// unmatched lists the rules' patterns that match no package: a rule that governs
// nothing after a folder moved would pass in silence.
func unmatched(rules []rule, pkgs map[string]pkg) []string {
	var patterns []string
	for _, r := range rules {
		patterns = append(patterns, r.from)
		patterns = append(patterns, r.except...)
		patterns = append(patterns, r.allow...)
		patterns = append(patterns, r.deny...)
	}
	var none []string
	for _, pattern := range patterns {
		if slices.Contains(none, pattern) {
			continue
		}
		matched := false
		for path := range pkgs {
			if matchesAny([]string{pattern}, path) {
				matched = true
				break
			}
		}
		if !matched {
			none = append(none, pattern)
		}
	}
	return none
}

func matchesAny(patterns []string, path string) bool {
	for _, pattern := range patterns {
		if pattern == "..." || pattern == path {
			return true
		}
		if dir, ok := strings.CutSuffix(pattern, "/..."); ok && (path == dir || strings.HasPrefix(path, dir+"/")) {
			return true
		}
	}
	return false
}

// chain is the shortest import path from one package to a package it links
// (breadth first over direct imports).
func chain(pkgs map[string]pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		if at == to {
			var path []string
			for ; at != ""; at = prev[at] {
				path = append(path, at)
			}
			slices.Reverse(path)
			return path
		}
		for _, next := range pkgs[at].Imports {
			if _, seen := prev[next]; !seen {
				prev[next] = at
				queue = append(queue, next)
			}
		}
	}
	return []string{from, "?", to}
}
