package devcluster

import (
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
)

// An operator who runs `make run` opens the printed URL and logs in with the
// printed token; without auth, the banner says the dashboard is open.
func TestBannerPrintsTheDashboardURLAndItsLoginToken(t *testing.T) {
	ep := Endpoints{
		Dir: "/d", DataURL: "file:///d/store", Etcd: "http://127.0.0.1:2379", Prefix: "/tidemark",
		MasterGRPC: "127.0.0.1:7070", MasterHTTP: "127.0.0.1:7080",
		Workers:   []membership.Worker{{InstanceID: "w1", HTTPAddr: "127.0.0.1:8081", GRPCAddr: "127.0.0.1:9091"}},
		TokenFile: "/d/auth-token", Token: "tok123",
	}
	b := Banner(ep, Config{MasterCommand: "bin/master", WorkerCommand: "bin/worker"})
	if want := "dashboard  http://127.0.0.1:7080/ui/  log in with the token tok123\n"; !strings.Contains(b, want) {
		t.Errorf("banner lacks %q:\n%s", want, b)
	}
	ep.TokenFile, ep.Token = "", ""
	b = Banner(ep, Config{MasterCommand: "bin/master", WorkerCommand: "bin/worker", NoAuth: true})
	if want := "dashboard  http://127.0.0.1:7080/ui/  (open: authentication is disabled)"; !strings.Contains(b, want) {
		t.Errorf("banner without auth lacks %q:\n%s", want, b)
	}
}
