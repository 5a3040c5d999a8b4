package kubernetes

import (
	"os"
	"path"
	"strings"
	"testing"
)

// createAuthSecret is how the operator makes the token Secret the manifests mount
// (knownSecrets): one token per line under the key "tokens".
const createAuthSecret = "create secret generic tidemark-auth --from-literal=tokens="

// The Secrets the manifests mount are never in them (no token is committed): the
// guide and each overlay's instructions must say how to create them, with the key
// the manifests read, or the first apply leaves every pod waiting for a volume.
func TestGuideSaysHowToCreateEverySecretAndApplyEveryOverlay(t *testing.T) {
	guide, err := os.ReadFile(path.Join(repoRoot, "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{createAuthSecret, "tidemark-tls", "`tls.crt`, `tls.key`, `ca.crt`"} {
		if !strings.Contains(string(guide), want) {
			t.Errorf("docs/OPERATIONS.md does not say %q", want)
		}
	}
	for _, o := range overlays {
		if !strings.Contains(string(guide), "overlays/"+o) {
			t.Errorf("docs/OPERATIONS.md does not mention overlays/%s", o)
		}
		k, err := os.ReadFile(path.Join("overlays", o, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{createAuthSecret, "kubectl apply -k deploy/kubernetes/overlays/" + o} {
			if !strings.Contains(string(k), want) {
				t.Errorf("overlays/%s/kustomization.yaml does not say %q", o, want)
			}
		}
	}
}
