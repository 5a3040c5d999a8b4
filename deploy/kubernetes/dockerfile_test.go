package kubernetes

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
)

// The image the manifests run: built in one stage, shipped in a small one (a
// distroless static base, or scratch with CA certificates for TLS to the object
// stores), as a non-root user, with the stripped production binaries only: not
// master-dev, the one binary with the embedded etcd server.
func TestDockerfileBuildsALeanNonRootImage(t *testing.T) {
	data, err := os.ReadFile(path.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(text, -1)
	if len(froms) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a final one", len(froms))
	}
	final := froms[len(froms)-1][1]
	finalStage := text[strings.LastIndex(text, "\nFROM "):]
	switch {
	case strings.HasPrefix(final, "gcr.io/distroless/static"):
	case final == "scratch":
		if !strings.Contains(finalStage, "ca-certificates.crt") {
			t.Error("a scratch image needs CA certificates (COPY .../ca-certificates.crt) for TLS to the object stores")
		}
	default:
		t.Errorf("final stage FROM %s: want gcr.io/distroless/static* or scratch", final)
	}
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindStringSubmatch(finalStage)
	if user == nil || strings.HasPrefix(user[1], "0") || strings.HasPrefix(user[1], "root") {
		t.Errorf("final stage USER %v: want a non-root user", user)
	}
	build := regexp.MustCompile(`(?s)go build .*?-o /out/ ([^\n\\]+)`).FindStringSubmatch(text)
	if build == nil {
		t.Fatal("Dockerfile runs no `go build ... -o /out/ <packages>`")
	}
	pkgs := strings.Fields(build[1])
	for _, want := range []string{"./cmd/worker", "./cmd/master"} {
		if !strings.Contains(" "+build[1]+" ", " "+want+" ") {
			t.Errorf("Dockerfile builds %v: want %s", pkgs, want)
		}
	}
	if strings.Contains(build[1], "master-dev") {
		t.Errorf("Dockerfile builds %v: master-dev (the embedded etcd) does not belong in a production image", pkgs)
	}
	if !strings.Contains(text, "-s -w") {
		t.Error("Dockerfile does not strip the binaries (-ldflags \"-s -w ...\")")
	}
}
