package kubernetes

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kinds are the types a manifest may be, by apiVersion and kind. A kind not listed
// here fails the test: it would be applied unchecked.
var kinds = map[string]func() any{
	"v1/Service":                    func() any { return &corev1.Service{} },
	"v1/ServiceAccount":             func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"apps/v1/StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return &types.Kustomization{} },
	"kustomize.config.k8s.io/v1alpha1/Component":    func() any { return &types.Kustomization{} },
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs returns the YAML documents of data that hold anything but comments.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		for _, line := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, []byte(d))
				break
			}
		}
	}
	return docs
}

// decodeStrict decodes one YAML document into the Go type of its apiVersion and
// kind, the way the API server's strict field validation does: a field the type
// does not have (misspelt, wrongly indented, or of another case) or given twice is
// an error.
func decodeStrict(doc []byte) (any, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	newObj, ok := kinds[head.APIVersion+"/"+head.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these tests know (add it to kinds)", head.APIVersion, head.Kind)
	}
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	obj := newObj()
	strict, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", head.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", head.Kind, joinErrs(strict))
	}
	return obj, nil
}

func joinErrs(errs []error) error {
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// manifestFiles returns every YAML file of the tree, relative to it.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests found")
	}
	return files
}

// Every file of the tree (resources, patches, kustomizations) decodes strictly: a
// misspelt field (`readinesProbe`, `terminationGracePeriod`) would otherwise be
// dropped by kubectl's client and the pod would run without it.
func TestEveryManifestDecodesStrictly(t *testing.T) {
	for _, file := range manifestFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs := splitDocs(data)
		if len(docs) == 0 {
			t.Errorf("%s: no document", file)
		}
		for i, doc := range docs {
			if _, err := decodeStrict(doc); err != nil {
				t.Errorf("%s, document %d: %v", file, i+1, err)
			}
		}
	}
}

// variant is one deployable build: an overlay, with or without components.
type variant struct {
	name       string // "s3", "s3+tls"
	overlay    string // "s3": the object store scheme of its DATA_URL
	components []string
}

// overlays are the deployable overlays; each is built alone and with every
// optional component.
var overlays = []string{"s3", "azblob", "gs"}

var optionalComponents = []string{"tls"}

func variants() []variant {
	var vs []variant
	for _, o := range overlays {
		vs = append(vs, variant{name: o, overlay: o})
		for _, c := range optionalComponents {
			vs = append(vs, variant{name: o + "+" + c, overlay: o, components: []string{c}})
		}
	}
	return vs
}

// built is the output of `kustomize build` of one variant, decoded.
type built struct {
	variant variant
	objects []any
	err     error
}

var (
	buildOnce sync.Once
	builds    []built
)

// buildAll runs `kustomize build` of every variant through the kustomize Go API,
// on an in-memory copy of this tree (to which a kustomization per variant with
// components is added), and decodes the output strictly.
func buildAll(t *testing.T) []built {
	t.Helper()
	buildOnce.Do(func() {
		const root = "/tidemark"
		mem := filesys.MakeFsInMemory()
		for _, file := range manifestFiles(t) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := mem.WriteFile(filepath.Join(root, file), data); err != nil {
				t.Fatal(err)
			}
		}
		k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
		for _, v := range variants() {
			dir := filepath.Join(root, "overlays", v.overlay)
			if len(v.components) > 0 {
				dir = filepath.Join(root, "variants", strings.ReplaceAll(v.name, "+", "-"))
				var b bytes.Buffer
				fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../overlays/%s\ncomponents:\n", v.overlay)
				for _, c := range v.components {
					fmt.Fprintf(&b, "  - ../../components/%s\n", c)
				}
				if err := mem.WriteFile(filepath.Join(dir, "kustomization.yaml"), b.Bytes()); err != nil {
					t.Fatal(err)
				}
			}
			out := built{variant: v}
			m, err := k.Run(mem, dir)
			if err != nil {
				out.err = fmt.Errorf("kustomize build %s: %w", v.name, err)
				builds = append(builds, out)
				continue
			}
			data, err := m.AsYaml()
			if err != nil {
				out.err = fmt.Errorf("kustomize build %s: %w", v.name, err)
				builds = append(builds, out)
				continue
			}
			for i, doc := range splitDocs(data) {
				obj, err := decodeStrict(doc)
				if err != nil {
					out.err = fmt.Errorf("kustomize build %s, object %d: %w\n%s", v.name, i+1, err, doc)
					break
				}
				out.objects = append(out.objects, obj)
			}
			builds = append(builds, out)
		}
	})
	return builds
}

// `kustomize build` of every overlay succeeds, alone and with each optional
// component, and what it builds decodes strictly (a patch can add a misspelt
// field that no source file has on its own).
func TestEveryOverlayBuilds(t *testing.T) {
	for _, b := range buildAll(t) {
		if b.err != nil {
			t.Error(b.err)
			continue
		}
		var kindsBuilt []string
		for _, o := range b.objects {
			kindsBuilt = append(kindsBuilt, fmt.Sprintf("%T", o))
		}
		for _, want := range []string{"*v1.StatefulSet", "*v1.Deployment", "*v1.Service", "*v1.PodDisruptionBudget", "*v1.ConfigMap"} {
			if !slices.Contains(kindsBuilt, want) {
				t.Errorf("%s builds no %s", b.variant.name, want)
			}
		}
	}
}
