package devcluster

import (
	"fmt"
	"os/exec"
	"strings"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
)

// Banner is what the cluster prints once it is up: where everything listens, the
// dashboard's URL and login token, the dev token, and commands to try (add rows, watch tasks, requeue a merge with the
// token, merge through a worker's internal route with the token), plus the load
// generator and a tail of the demo store.
func Banner(ep Endpoints, cfg Config) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\nTidemark dev cluster is up. Ctrl-C stops it; running it again reuses %s.\n\n", ep.Dir)
	p("  etcd    %s  (keys under %s/)\n", ep.Etcd, ep.Prefix)
	if ep.MasterGRPC != "" {
		p("  master  admin gRPC %s  HTTP http://%s  (/api/v1/tasks, /api/v1/stats, /metrics)\n", ep.MasterGRPC, ep.MasterHTTP)
		if ep.Token != "" {
			p("  dashboard  http://%s/ui/  log in with the token %s\n", ep.MasterHTTP, ep.Token)
		} else {
			p("  dashboard  http://%s/ui/  (open: authentication is disabled)\n", ep.MasterHTTP)
		}
	} else {
		credential := "AUTH_DISABLED=true"
		if ep.TokenFile != "" {
			credential = "AUTH_TOKEN_FILE=" + shellQuote(ep.TokenFile)
		}
		p("  master  none (--master=false): start one with ETCD_ENDPOINTS=%s DATA_URL=%s %s %s serve\n",
			ep.Etcd, ep.DataURL, credential, cfg.MasterCommand)
	}
	for _, w := range ep.Workers {
		p("  %-6s  HTTP http://%s  gRPC %s\n", w.InstanceID, w.HTTPAddr, w.GRPCAddr)
	}
	p("  data    %s  (logs in %s/logs/)\n", ep.DataURL, ep.Dir)
	if ep.TokenFile != "" {
		p("  auth    token in %s: the AdminService, the task routes and the workers' gRPC and internal routes need it\n", ep.TokenFile)
	} else {
		p("  auth    disabled (--auth-disabled, AUTH_DISABLED): anyone who reaches these ports can merge, requeue and read\n")
	}

	etcdctl := "etcdctl"
	hint := ""
	if _, err := exec.LookPath("etcdctl"); err != nil {
		hint = "  (no etcdctl in PATH: `make etcdctl` installs it into $(go env GOPATH)/bin)"
	}
	prefixFlag := ""
	if ep.Prefix != keys.DefaultPrefix {
		prefixFlag = " --etcd-prefix " + ep.Prefix
	}

	p("\nTry it:\n\n")
	if len(ep.Workers) > 0 {
		w := ep.Workers[0]
		p("  # 1. add rollout records through %s to the store %q (?flush=true seals them at once)\n", w.InstanceID, DemoStore)
		p("  curl -sS -X POST 'http://%s/api/v1/rollouts/%s/records?flush=true' -H 'Content-Type: application/json' \\\n", w.HTTPAddr, DemoStore)
		p(`    -d '{"records":[{"id":"r1-0","rollout_id":"r1","role":"user","content":"What is 2+2?"},{"id":"r1-1","rollout_id":"r1","content":"4","reward":1}]}'` + "\n\n")
	}
	p("  # 2. see the master's tasks in etcd (JSON records; `watch` follows them as they change)%s\n", hint)
	p("  %s --endpoints %s get --prefix %s/tasks/ --print-value-only\n", etcdctl, ep.Etcd, ep.Prefix)
	p("  %s --endpoints %s watch --prefix %s/tasks/\n\n", etcdctl, ep.Etcd, ep.Prefix)
	if ep.MasterGRPC != "" {
		addrFlag := ""
		if ep.MasterGRPC != DefaultMasterGRPCAddr {
			addrFlag = " --addr " + ep.MasterGRPC
		}
		p("  # 3. merge the store's pending generations now, then look at the task (master admin sends the token of AUTH_TOKEN_FILE)\n")
		if ep.TokenFile != "" {
			p("  export AUTH_TOKEN_FILE=%s\n", shellQuote(ep.TokenFile))
		}
		p("  %s admin requeue-merge %s%s\n", cfg.MasterCommand, DemoStore, addrFlag)
		p("  %s admin list --newest-first --limit 5%s\n\n", cfg.MasterCommand, addrFlag)
	}
	if len(ep.Workers) > 0 && ep.TokenFile != "" {
		w := ep.Workers[0]
		p("  # 4. or have %s merge its own shard of the store now: the internal routes need the token too\n", w.InstanceID)
		p("  curl -sS -X POST http://%s/api/v1/internal/merge-wal/%s -H \"Authorization: Bearer $(cat %s)\"\n\n",
			w.HTTPAddr, DemoStore, shellQuote(ep.TokenFile))
	}
	if len(ep.Workers) > 0 {
		p("  # then: steady load on every worker, and watch generations pile up and get merged\n")
		p("  %s load --etcd-endpoints %s%s --rate 200\n\n", cfg.WorkerCommand, ep.Etcd, prefixFlag)
		// worker tail finds a worker registered in etcd, the dev cluster's by default.
		etcdFlag := ""
		if ep.Etcd != "http://"+DefaultEtcdAddr {
			etcdFlag = " --etcd-endpoints " + ep.Etcd
		}
		p("  # 5. follow the store's changes as a named consumer (worker tail finds a worker in etcd)\n")
		p("  %s tail rollouts/%s --consumer trainer --follow%s%s\n\n", cfg.WorkerCommand, DemoStore, etcdFlag, prefixFlag)
	}
	p("Finished tasks show below as \"tasks | ...\"; warnings and errors of every process too.\n\n")
	return b.String()
}

// shellQuote quotes path for a POSIX shell when it has characters the shell
// would split or expand.
func shellQuote(path string) string {
	if path != "" && strings.IndexFunc(path, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@", r))
	}) < 0 {
		return path
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}
