package kubernetes

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// workload is a Deployment or StatefulSet of a built variant.
type workload struct {
	kind, name, namespace string
	replicas              int32
	template              corev1.PodTemplateSpec
	serviceName           string // StatefulSet only
}

// podName is the name of the workload's first pod (what metadata.name is in it).
func (w workload) podName() string {
	if w.kind == "StatefulSet" {
		return w.name + "-0"
	}
	return w.name + "-5d8f7c9b6-x2x4z"
}

// cluster is the objects of one built variant, by kind.
type cluster struct {
	variant    variant
	workloads  []workload
	services   []*corev1.Service
	configMaps map[string]*corev1.ConfigMap
	pdbs       []*policyv1.PodDisruptionBudget
}

func newCluster(b built) cluster {
	c := cluster{variant: b.variant, configMaps: map[string]*corev1.ConfigMap{}}
	for _, o := range b.objects {
		switch x := o.(type) {
		case *appsv1.Deployment:
			c.workloads = append(c.workloads, workload{kind: "Deployment", name: x.Name, namespace: x.Namespace,
				replicas: deref(x.Spec.Replicas, 1), template: x.Spec.Template})
		case *appsv1.StatefulSet:
			c.workloads = append(c.workloads, workload{kind: "StatefulSet", name: x.Name, namespace: x.Namespace,
				replicas: deref(x.Spec.Replicas, 1), template: x.Spec.Template, serviceName: x.Spec.ServiceName})
		case *corev1.Service:
			c.services = append(c.services, x)
		case *corev1.ConfigMap:
			c.configMaps[x.Name] = x
		case *policyv1.PodDisruptionBudget:
			c.pdbs = append(c.pdbs, x)
		}
	}
	return c
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// selects reports whether a selector (all of its pairs) matches labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// envVar is one environment variable of a container as the process sees it.
type envVar struct {
	value   string // after $(VAR) expansion; "" when it comes from a reference
	literal bool   // given as a value (env value, ConfigMap, Dockerfile ENV)
	source  string // "Dockerfile", "configmap <name>", "env", "fieldRef <path>", "secret <name>"
}

// varRef matches a Kubernetes $(VAR) reference in an env value, command or args.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv resolves a container's environment the way the kubelet does: the
// image's ENV, then envFrom, then env (later wins); $(VAR) in an env value expands
// to a variable defined before it in envFrom or env (never the image's).
func containerEnv(t *testing.T, c cluster, w workload, ctr corev1.Container, image map[string]string) map[string]envVar {
	t.Helper()
	env := map[string]envVar{}
	for k, v := range image {
		env[k] = envVar{value: v, literal: true, source: "Dockerfile"}
	}
	defined := map[string]string{}
	for _, from := range ctr.EnvFrom {
		if from.ConfigMapRef == nil {
			t.Errorf("%s/%s: envFrom other than a ConfigMap", w.name, ctr.Name)
			continue
		}
		cm, ok := c.configMaps[from.ConfigMapRef.Name]
		if !ok {
			t.Errorf("%s/%s: envFrom ConfigMap %q is not in the build", w.name, ctr.Name, from.ConfigMapRef.Name)
			continue
		}
		for k, v := range cm.Data {
			env[k] = envVar{value: v, literal: true, source: "configmap " + cm.Name}
			defined[k] = v
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			v := varRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
				name := varRef.FindStringSubmatch(ref)[1]
				val, ok := defined[name]
				if !ok {
					t.Errorf("%s/%s: %s=%q refers to $(%s), which no env or envFrom before it defines (the kubelet leaves it as is)",
						w.name, ctr.Name, e.Name, e.Value, name)
				}
				return val
			})
			env[e.Name] = envVar{value: v, literal: true, source: "env"}
			defined[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			var v string
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = w.podName()
			case "metadata.namespace":
				v = w.namespace
			default:
				t.Errorf("%s/%s: %s from field %s: not one these tests can resolve", w.name, ctr.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = envVar{value: v, source: "fieldRef " + e.ValueFrom.FieldRef.FieldPath}
			defined[e.Name] = v
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = envVar{source: "secret " + e.ValueFrom.SecretKeyRef.Name}
			defined[e.Name] = "<secret>"
		default:
			t.Errorf("%s/%s: %s: only values, fieldRef and secretKeyRef are checked", w.name, ctr.Name, e.Name)
		}
	}
	return env
}

// referenced returns the variables a container's env values, command and args
// refer to with $(VAR).
func referenced(ctr corev1.Container) map[string]bool {
	refs := map[string]bool{}
	var texts []string
	texts = append(texts, ctr.Command...)
	texts = append(texts, ctr.Args...)
	for _, e := range ctr.Env {
		texts = append(texts, e.Value)
	}
	for _, s := range texts {
		for _, m := range varRef.FindAllStringSubmatch(s, -1) {
			refs[m[1]] = true
		}
	}
	return refs
}

// runtimeEnv are variables the Go runtime reads, not a flag.
var runtimeEnv = map[string]bool{"GOMEMLIMIT": true}

// knownSecrets are the Secrets the manifests use and the operator creates (never
// in the manifests: no token is committed), with the keys they must hold.
var knownSecrets = map[string][]string{
	"tidemark-auth": {"tokens"},
	"tidemark-tls":  {"tls.crt", "tls.key", "ca.crt"},
}

// listenPort returns the port of a listen address that must accept connections from
// other pods (host 0.0.0.0 or empty).
func listenPort(addr string) (int32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return 0, fmt.Errorf("listens on %s only: other pods cannot reach it", host)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	return int32(p), err
}

// portNumber resolves a probe's or Service's target port against a container's
// ports (by name, or the number itself).
func portNumber(ctr corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		for _, cp := range ctr.Ports {
			if cp.ContainerPort == p.IntVal {
				return p.IntVal, true
			}
		}
		return p.IntVal, false
	}
	for _, cp := range ctr.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// goMemLimit parses a GOMEMLIMIT value (bytes, or a number with B, KiB, MiB, GiB,
// TiB), as the runtime does.
func goMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q: %w", s, err)
	}
	return n * mult, nil
}

// dockerfileEnv reads the ENV lines of the Dockerfile's final stage.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "FROM ") {
			clear(env) // only the final stage's ENV reaches the container
		}
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("Dockerfile: ENV %q: want KEY=VALUE pairs", rest)
				}
				env[k] = v
			}
		}
	}
	return env
}

// etcdVersion is the etcd server version the binaries are built against.
func etcdVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(path.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`go\.etcd\.io/etcd/server/v3 (v[0-9.]+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod requires no go.etcd.io/etcd/server/v3")
	}
	return string(m[1])
}

// TestManifestsMatchTheBinaries checks each built variant against the binaries
// without a cluster: every master and worker container runs a real subcommand,
// sets only variables and flags it reads (values of the flag's type), listens on
// every interface on exactly the ports it declares, is probed on its health route
// (HTTPS under TLS) with a liveness that cannot cut a drain short, gets its token
// and certificates from the Secrets the guide tells the operator to create, has a
// memory limit that fits docs/OPERATIONS.md's sizing and GOMEMLIMIT at about 90% of it,
// and reaches etcd where the etcd members advertise themselves. Workers are a
// StatefulSet whose pod name is their INSTANCE_ID, registered under their headless
// Service; masters run two replicas; each workload has a PodDisruptionBudget and
// every Service selects pods that have the ports it targets. The guarded failure:
// a renamed flag or variable that leaves a deployment silently running on defaults
// (listening on 127.0.0.1, or under a shard name that changes on every restart).
func TestManifestsMatchTheBinaries(t *testing.T) {
	all := buildAll(t)
	if len(all) != len(variants()) {
		t.Fatalf("%d builds, want %d", len(all), len(variants()))
	}
	imageEnv := dockerfileEnv(t)
	wantEtcd := etcdVersion(t)
	for _, b := range all {
		t.Run(b.variant.name, func(t *testing.T) {
			if b.err != nil {
				t.Fatal(b.err)
			}
			c := newCluster(b)
			checkCluster(t, c, imageEnv, wantEtcd)
		})
	}
}

func checkCluster(t *testing.T, c cluster, imageEnv map[string]string, wantEtcd string) {
	var etcdURLs []string
	byBinary := map[string][]workload{}
	images := map[string]bool{}
	dataURLs := map[string]bool{}
	etcdEndpoints := map[string]bool{}
	envOf := map[string]map[string]envVar{}
	for _, w := range c.workloads {
		if len(w.template.Spec.Containers) != 1 {
			t.Errorf("%s: %d containers, want 1", w.name, len(w.template.Spec.Containers))
			continue
		}
		ctr := w.template.Spec.Containers[0]
		checkSecurity(t, w, ctr)
		checkPDB(t, c, w)
		if strings.HasPrefix(ctr.Image, "quay.io/coreos/etcd:") {
			etcdURLs = checkEtcd(t, w, ctr, wantEtcd)
			continue
		}
		if len(ctr.Command) < 2 {
			t.Errorf("%s: command %v: want [worker serve] or [master serve]", w.name, ctr.Command)
			continue
		}
		binary := ctr.Command[0]
		byBinary[binary] = append(byBinary[binary], w)
		images[ctr.Image] = true
		env := checkContainer(t, c, w, ctr, imageEnv)
		if env == nil {
			continue
		}
		envOf[w.name] = env
		dataURLs[env["DATA_URL"].value] = true
		etcdEndpoints[env["ETCD_ENDPOINTS"].value] = true
	}

	// One image, the overlay's: `image: tidemark` is the base's placeholder.
	if len(images) != 1 || images["tidemark"] {
		t.Errorf("images %v: want one, named by the overlay's images", slices.Sorted(maps.Keys(images)))
	}
	// One store, on the overlay's cloud.
	if len(dataURLs) != 1 {
		t.Errorf("DATA_URLs %v: every master and worker must share one store", slices.Sorted(maps.Keys(dataURLs)))
	}
	for raw := range dataURLs {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			t.Errorf("DATA_URL %q: %v", raw, err)
		case u.Scheme != c.variant.overlay:
			t.Errorf("DATA_URL %q: overlay %s wants %s://", raw, c.variant.overlay, c.variant.overlay)
		case u.User != nil:
			t.Errorf("DATA_URL %q carries credentials: use workload identity (the ServiceAccount)", raw)
		}
	}
	// etcd: exactly the client URLs its members advertise.
	for eps := range etcdEndpoints {
		got := strings.Split(eps, ",")
		slices.Sort(got)
		slices.Sort(etcdURLs)
		if !slices.Equal(got, etcdURLs) {
			t.Errorf("ETCD_ENDPOINTS=%q, the etcd members advertise %v", eps, etcdURLs)
		}
	}

	if ms := byBinary["master"]; len(ms) != 1 {
		t.Errorf("%d master workloads, want 1", len(ms))
	} else if ms[0].kind != "Deployment" || ms[0].replicas < 2 {
		t.Errorf("master: %s of %d replicas, want a Deployment of at least 2 (one takes over the other's claims)", ms[0].kind, ms[0].replicas)
	}
	if ws := byBinary["worker"]; len(ws) != 1 {
		t.Errorf("%d worker workloads, want 1", len(ws))
	} else {
		checkWorkerIdentity(t, c, ws[0], envOf[ws[0].name])
	}
	for binary := range byBinary {
		if binary != "master" && binary != "worker" {
			t.Errorf("binary %q: the image has worker and master", binary)
		}
	}
	checkServices(t, c)
}

// checkContainer checks a master or worker container against `<binary> <sub>
// --help` and returns its environment.
func checkContainer(t *testing.T, c cluster, w workload, ctr corev1.Container, imageEnv map[string]string) map[string]envVar {
	binary, sub := ctr.Command[0], ctr.Command[1]
	what := w.name + " (" + binary + " " + sub + ")"
	known, err := help(t, binary, sub)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return nil
	}
	if sub != "serve" {
		t.Errorf("%s: want %s serve", what, binary)
	}
	// Flags on the command line.
	for _, arg := range append(slices.Clone(ctr.Command[2:]), ctr.Args...) {
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		f, ok := known.byName[name]
		if !strings.HasPrefix(arg, "--") || !ok {
			t.Errorf("%s: argument %q: `%s %s --help` lists no such flag", what, arg, binary, sub)
			continue
		}
		if hasValue {
			if err := checkValue(f.typ, value); err != nil {
				t.Errorf("%s: %s: not a valid %s: %v", what, arg, f.typ, err)
			}
		}
	}

	env := containerEnv(t, c, w, ctr, imageEnv)
	refs := referenced(ctr)
	for name, v := range env {
		f, isFlag := known.byEnv[name]
		switch {
		case isFlag:
			if v.literal {
				if err := checkValue(f.typ, v.value); err != nil {
					t.Errorf("%s: %s=%q (%s): not a valid %s for --%s: %v", what, name, v.value, v.source, f.typ, f.name, err)
				}
			}
		case runtimeEnv[name] || refs[name]: // the runtime's, or only there to be expanded
		default:
			t.Errorf("%s: environment %s (%s): `%s %s --help` lists no such variable", what, name, v.source, binary, sub)
		}
	}
	setting := func(name string) string { // the value in force: env, else the flag's default
		if v, ok := env[name]; ok {
			return v.value
		}
		return known.byEnv[name].def
	}
	duration := func(name string) time.Duration {
		d, err := time.ParseDuration(setting(name))
		if err != nil {
			t.Errorf("%s: %s: %v", what, name, err)
		}
		return d
	}
	integer := func(name string) int64 {
		n, err := strconv.ParseInt(setting(name), 10, 64)
		if err != nil {
			t.Errorf("%s: %s: %v", what, name, err)
		}
		return n
	}

	// Listeners: every interface, exactly the declared ports, named for what they are.
	ports := map[string]int32{}
	for _, l := range []struct{ env, name string }{{"HTTP_ADDR", "http"}, {"GRPC_ADDR", "grpc"}} {
		p, err := listenPort(setting(l.env))
		if err != nil {
			t.Errorf("%s: %s=%q: %v", what, l.env, setting(l.env), err)
			continue
		}
		ports[l.name] = p
	}
	declared := map[string]int32{}
	for _, cp := range ctr.Ports {
		declared[cp.Name] = cp.ContainerPort
	}
	if fmt.Sprint(declared) != fmt.Sprint(ports) {
		t.Errorf("%s: declares ports %v, listens on %v (HTTP_ADDR, GRPC_ADDR)", what, declared, ports)
	}

	// Credentials: the token from the Secret, the certificates from theirs.
	mounts := map[string]string{} // mount path -> secret name
	for _, vm := range ctr.VolumeMounts {
		for _, v := range w.template.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				if _, ok := knownSecrets[v.Secret.SecretName]; !ok {
					t.Errorf("%s: mounts Secret %q, which the guide does not tell the operator to create", what, v.Secret.SecretName)
				}
				mounts[vm.MountPath] = v.Secret.SecretName
			}
		}
	}
	inSecret := func(name, secret string) {
		p := setting(name)
		s, ok := mounts[path.Dir(p)]
		if !ok || s != secret || !slices.Contains(knownSecrets[secret], path.Base(p)) {
			t.Errorf("%s: %s=%q: want a key of Secret %s %v mounted there", what, name, p, secret, knownSecrets[secret])
		}
	}
	for _, secretVar := range []string{"AUTH_TOKEN", "ETCD_PASSWORD"} {
		if v, ok := env[secretVar]; ok && v.literal {
			t.Errorf("%s: %s given as a value (%s): take it from a Secret", what, secretVar, v.source)
		}
	}
	if _, ok := env["AUTH_TOKEN"]; !ok {
		inSecret("AUTH_TOKEN_FILE", "tidemark-auth")
	}
	tls := setting("TLS_CERT") != ""
	if tls {
		inSecret("TLS_CERT", "tidemark-tls")
		inSecret("TLS_KEY", "tidemark-tls")
		inSecret("TLS_CA", "tidemark-tls")
	}
	if setting("AUTH_DISABLED") == "true" {
		t.Errorf("%s: AUTH_DISABLED=true", what)
	}

	// Probes: on the health route of the HTTP listener (HTTPS under TLS), or gRPC
	// health (never under TLS: the kubelet's gRPC probe speaks plaintext only).
	grace := int64(deref(w.template.Spec.TerminationGracePeriodSeconds, 30))
	probes := map[string]*corev1.Probe{"readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe, "startup": ctr.StartupProbe}
	for kind, p := range probes {
		if p == nil {
			if kind != "startup" {
				t.Errorf("%s: no %s probe", what, kind)
			}
			continue
		}
		handlers := 0
		if h := p.HTTPGet; h != nil {
			handlers++
			port, ok := portNumber(ctr, h.Port)
			switch {
			case h.Path != "/api/v1/health":
				t.Errorf("%s: %s probe GET %s: want /api/v1/health", what, kind, h.Path)
			case !ok || port != ports["http"]:
				t.Errorf("%s: %s probe port %s: want the HTTP listener's (%d)", what, kind, h.Port.String(), ports["http"])
			case (h.Scheme == corev1.URISchemeHTTPS) != tls:
				t.Errorf("%s: %s probe scheme %q with TLS_CERT %q", what, kind, h.Scheme, setting("TLS_CERT"))
			}
		}
		if g := p.GRPC; g != nil {
			handlers++
			if g.Port != ports["grpc"] {
				t.Errorf("%s: %s probe gRPC port %d: want the gRPC listener's (%d)", what, kind, g.Port, ports["grpc"])
			}
			if tls {
				t.Errorf("%s: %s probe is gRPC under TLS: the kubelet's gRPC probe has no TLS", what, kind)
			}
		}
		if s := p.TCPSocket; s != nil {
			handlers++
			if _, ok := portNumber(ctr, s.Port); !ok {
				t.Errorf("%s: %s probe TCP port %s is not a declared port", what, kind, s.Port.String())
			}
		}
		if p.Exec != nil {
			handlers++
			t.Errorf("%s: %s probe runs a command: the image has no shell", what, kind)
		}
		if handlers != 1 {
			t.Errorf("%s: %s probe has %d handlers, want exactly 1", what, kind, handlers)
		}
		period, failures := int64(p.PeriodSeconds), int64(p.FailureThreshold)
		if period == 0 {
			period = 10 // the API's defaults
		}
		if failures == 0 {
			failures = 3
		}
		if kind == "liveness" && period*failures < grace {
			t.Errorf("%s: liveness gives up after %ds, sooner than terminationGracePeriodSeconds (%ds): it would kill a draining process",
				what, period*failures, grace)
		}
	}

	// Grace: the drain fits. A worker waits for requests and merges (SHUTDOWN_TIMEOUT),
	// then seals every open store (as long again); a master lets tasks finish.
	var preStop int64
	if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil {
		if s := ctr.Lifecycle.PreStop.Sleep; s != nil {
			preStop = s.Seconds
		} else {
			t.Errorf("%s: preStop other than sleep: the image has no shell", what)
		}
	}
	drain := preStop + int64(duration("SHUTDOWN_TIMEOUT")/time.Second)
	if binary == "worker" {
		drain += int64(duration("SHUTDOWN_TIMEOUT") / time.Second)
	}
	if grace < drain+5 {
		times := "once: running tasks"
		if binary == "worker" {
			times = "twice: requests, then the final seal"
		}
		t.Errorf("%s: terminationGracePeriodSeconds %d: the drain takes up to %ds (preStop %ds, SHUTDOWN_TIMEOUT %s %s), want at least 5s more",
			what, grace, drain, preStop, setting("SHUTDOWN_TIMEOUT"), times)
	}

	// Memory: the limit fits docs/OPERATIONS.md's sizing, GOMEMLIMIT is about 90% of it.
	limit, ok := ctr.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Errorf("%s: no memory limit", what)
	} else {
		if req, ok := ctr.Resources.Requests[corev1.ResourceMemory]; !ok || req.Cmp(limit) != 0 {
			t.Errorf("%s: memory request %v, limit %v: request the limit (a node must really have it)", what, req.String(), limit.String())
		}
		gml, err := goMemLimit(setting("GOMEMLIMIT"))
		if err != nil || setting("GOMEMLIMIT") == "" {
			t.Errorf("%s: GOMEMLIMIT %q: %v", what, setting("GOMEMLIMIT"), err)
		} else if share := float64(gml) / float64(limit.Value()); share < 0.85 || share > 0.95 {
			t.Errorf("%s: GOMEMLIMIT %s is %.0f%% of the memory limit %s: want about 90%%", what, setting("GOMEMLIMIT"), share*100, limit.String())
		}
		if binary == "worker" {
			need := integer("MERGE_MEMORY_BUDGET") + integer("CACHE_BYTES") +
				integer("MAX_OPEN_STORES")*(integer("CACHE_BYTES")/4) + 400<<20
			if limit.Value() < need {
				t.Errorf("%s: memory limit %s < MERGE_MEMORY_BUDGET + CACHE_BYTES + MAX_OPEN_STORES x CACHE_BYTES/4 + 400 MiB = %s (docs/OPERATIONS.md, \"Sizing a worker's memory\")",
					what, limit.String(), resource.NewQuantity(need, resource.BinarySI).String())
			}
		}
	}

	// Scraping: the pods say where their metrics are.
	ann := w.template.Annotations
	wantScheme := "" // http, Prometheus's default
	if tls {
		wantScheme = "https"
	}
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" ||
		ann["prometheus.io/port"] != strconv.Itoa(int(ports["http"])) || ann["prometheus.io/scheme"] != wantScheme {
		t.Errorf("%s: scrape annotations %v: want scrape \"true\", path /metrics, port %d, scheme %q", what, ann, ports["http"], wantScheme)
	}
	return env
}

// checkWorkerIdentity: workers are a StatefulSet whose pod name is INSTANCE_ID (the
// shard name), registered at their name under the headless Service.
func checkWorkerIdentity(t *testing.T, c cluster, w workload, env map[string]envVar) {
	if w.kind != "StatefulSet" {
		t.Errorf("worker: a %s: pods renamed by every rollout orphan their shards; want a StatefulSet", w.kind)
		return
	}
	if v := env["INSTANCE_ID"]; v.source != "fieldRef metadata.name" {
		t.Errorf("worker: INSTANCE_ID from %q, want the pod name (fieldRef metadata.name)", v.source)
	}
	var headless *corev1.Service
	for _, s := range c.services {
		if s.Name == w.serviceName {
			headless = s
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !selects(headless.Spec.Selector, w.template.Labels) {
		t.Errorf("worker: serviceName %q: want a headless Service selecting the workers", w.serviceName)
		return
	}
	for adv, listen := range map[string]string{"ADVERTISE_HTTP_ADDR": "HTTP_ADDR", "ADVERTISE_GRPC_ADDR": "GRPC_ADDR"} {
		_, port, _ := net.SplitHostPort(env[listen].value)
		want := net.JoinHostPort(w.podName()+"."+w.serviceName+"."+w.namespace+".svc", port)
		if got := env[adv].value; got != want {
			t.Errorf("worker %s: %s=%q: other pods reach it at %s", w.podName(), adv, got, want)
		}
	}
}

// checkEtcd checks the etcd members and returns the client URLs they advertise.
func checkEtcd(t *testing.T, w workload, ctr corev1.Container, wantVersion string) []string {
	if !strings.HasSuffix(ctr.Image, ":"+wantVersion) {
		t.Errorf("etcd image %q: want the version of go.etcd.io/etcd/server/v3 in go.mod (%s)", ctr.Image, wantVersion)
	}
	if w.kind != "StatefulSet" || w.replicas != 3 {
		t.Errorf("etcd: %s of %d, want a StatefulSet of 3 members", w.kind, w.replicas)
	}
	flag := func(name string) string {
		for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		t.Errorf("etcd: no --%s", name)
		return ""
	}
	var urls, cluster []string
	for i := range w.replicas {
		pod := fmt.Sprintf("%s-%d", w.name, i)
		urls = append(urls, strings.ReplaceAll(flag("advertise-client-urls"), "$(POD_NAME)", pod))
		cluster = append(cluster, pod+"="+strings.ReplaceAll(flag("initial-advertise-peer-urls"), "$(POD_NAME)", pod))
	}
	if got := flag("initial-cluster"); got != strings.Join(cluster, ",") {
		t.Errorf("etcd: --initial-cluster=%s, want %s", got, strings.Join(cluster, ","))
	}
	return urls
}

// checkSecurity: non-root, read-only root filesystem, no privilege escalation.
func checkSecurity(t *testing.T, w workload, ctr corev1.Container) {
	pod := w.template.Spec.SecurityContext
	if pod == nil || !deref(pod.RunAsNonRoot, false) {
		t.Errorf("%s: pod securityContext.runAsNonRoot is not true", w.name)
	}
	sc := ctr.SecurityContext
	if sc == nil || !deref(sc.ReadOnlyRootFilesystem, false) || deref(sc.AllowPrivilegeEscalation, true) {
		t.Errorf("%s/%s: want readOnlyRootFilesystem true and allowPrivilegeEscalation false", w.name, ctr.Name)
	}
}

// checkPDB: a node drain never takes more of a workload than it can lose.
func checkPDB(t *testing.T, c cluster, w workload) {
	for _, p := range c.pdbs {
		if p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, w.template.Labels) {
			return
		}
	}
	t.Errorf("%s: no PodDisruptionBudget selects its pods", w.name)
}

// checkServices: each Service selects pods, and each of its ports targets a port
// those pods declare.
func checkServices(t *testing.T, c cluster) {
	for _, s := range c.services {
		var selected []workload
		for _, w := range c.workloads {
			if selects(s.Spec.Selector, w.template.Labels) {
				selected = append(selected, w)
			}
		}
		if len(selected) == 0 {
			t.Errorf("Service %s selects no pods (%v)", s.Name, s.Spec.Selector)
		}
		for _, w := range selected {
			for _, sp := range s.Spec.Ports {
				target := sp.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(sp.Port)
				}
				if _, ok := portNumber(w.template.Spec.Containers[0], target); !ok {
					t.Errorf("Service %s port %s targets %s, which %s does not declare", s.Name, sp.Name, target.String(), w.name)
				}
			}
		}
	}
}
