package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The production binaries do not link the embedded etcd server (about 10 MB, and a
// server nobody runs in production): only master-dev, which `master dev` execs,
// does. The guarded regression: an import of tools/devcluster or testutil/etcdtest
// from cmd/master, cmd/worker or a package they use.
func TestProductionBinariesDoNotLinkTheEtcdServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	for _, cmd := range []string{"master", "worker"} {
		pkg := "github.com/tidemark-io/tidemark/cmd/" + cmd
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "go.etcd.io/etcd/server/") || strings.HasSuffix(dep, "/tools/devcluster") {
				t.Errorf("%s links %s", cmd, dep)
			}
		}
	}
}
