package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/storetest"
	"github.com/tidemark-io/tidemark/testutil/testlog"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// testToken is the bearer token the tests' masters accept.
const testToken = "cmd-master-test-token-0123456789"

// run executes the root command with args and returns what it printed on stdout
// and stderr.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestServeHelpListsEverySetting(t *testing.T) {
	out, _, err := run(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"ETCD_ENDPOINTS", "ETCD_PREFIX", "ETCD_USERNAME", "ETCD_PASSWORD", "ETCD_CA_CERT",
		"ETCD_CLIENT_CERT", "ETCD_CLIENT_KEY", "DATA_URL", "WORKER_ENDPOINTS", "GRPC_ADDR", "HTTP_ADDR",
		"STATS_SCAN_INTERVAL", "MERGE_WAL_INTERVAL", "MERGE_WAL_MIN_GENERATIONS", "MERGE_MAX_DELAY",
		"TASK_CONCURRENCY", "TASK_TIMEOUT", "LEASE_TTL",
		"SHUTDOWN_TIMEOUT", "LOG_LEVEL"} {
		if !strings.Contains(out, env) {
			t.Errorf("serve --help does not mention %s", env)
		}
	}
	for _, def := range []string{`"127.0.0.1:7070"`, `"127.0.0.1:7080"`} {
		if !strings.Contains(out, def) {
			t.Errorf("serve --help does not show the default %s", def)
		}
	}
}

func TestServeFailsAtStartupWhenEtcdIsUnreachable(t *testing.T) {
	_, _, err := run(t, "serve", "--data-url", "mem://", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--etcd-endpoints", "http://127.0.0.1:1", "--etcd-dial-timeout", "300ms", "--auth-disabled")
	if err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:1") || !strings.Contains(err.Error(), "ETCD_ENDPOINTS") {
		t.Fatalf("err = %v, want a startup error naming the endpoint and ETCD_ENDPOINTS", err)
	}
}

func TestServeRefusesBadSettingsNamingThem(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--worker-endpoints", "nohost"}, "WORKER_ENDPOINTS"},
		{[]string{"--merge-wal-min-generations", "0"}, "MERGE_WAL_MIN_GENERATIONS"},
		{[]string{"--lease-ttl", "1s"}, "LEASE_TTL"},
		{[]string{"--master-lease-ttl", "1s"}, "LEASE_TTL"}, // the former name sets it too
		{[]string{"--task-concurrency", "-1"}, "TASK_CONCURRENCY"},
		{[]string{"--auth-token", ""}, "AUTH_DISABLED"}, // secure by default: no credential, no start
		{[]string{"--auth-token", "short"}, "AUTH_TOKEN"},
		{[]string{"--tls-client-ca", "/ca.pem"}, "TLS_CERT"},
	} {
		args := append([]string{"serve", "--data-url", "mem://", "--etcd-endpoints", "http://127.0.0.1:1", "--auth-token", testToken}, tc.args...)
		if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// liveMaster runs `master serve` in-process on loopback against an embedded etcd
// and a file:// bucket holding rollout store r1 and generic store g1, and returns
// the gRPC address it listens on.
func liveMaster(t *testing.T) string {
	t.Helper()
	_, endpoints := etcdtest.Start(t)
	dir := t.TempDir()
	dataURL := "file://" + dir
	createStores(t, dataURL)

	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCmd()
	var logs testlog.Buffer
	root.SetOut(&logs)
	root.SetErr(&logs)
	root.SetArgs([]string{"serve", "--data-url", dataURL, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--etcd-endpoints", strings.Join(endpoints, ","), "--etcd-prefix", "/e2e", "--lease-ttl", "2s",
		"--shutdown-timeout", "2s", "--auth-token", testToken})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not return 30 s after its context ended")
		}
		if t.Failed() {
			t.Logf("master logs:\n%s", logs.String())
		}
	})
	var addr string
	testwait.For(t, 30*time.Second, "the master started", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("serve returned early: %v\n%s", err, logs.String())
		default:
		}
		addr = logField(logs.String(), "master starting", "grpc_addr")
		return addr != "", logs.String()
	})
	return addr
}

// logField returns field of the first JSON log line whose msg is msg.
func logField(logs, msg, field string) string {
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != msg {
			continue
		}
		s, _ := line[field].(string)
		return s
	}
	return ""
}

// createStores registers rollout store r1 and generic store g1 at dataURL.
func createStores(t *testing.T, dataURL string) {
	t.Helper()
	b, err := objstore.Open(context.Background(), dataURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	storetest.Create(t, b, "r1", "generic:g1")
}

// The admin client against a live in-process master: table and JSON output, and
// errors with the status code and message.
func TestAdminAgainstALiveMaster(t *testing.T) {
	addr := liveMaster(t)
	admin := func(args ...string) (string, string, error) {
		t.Helper()
		return run(t, append([]string{"admin", "--addr", addr, "--timeout", "10s", "--auth-token", testToken}, args...)...)
	}

	// Without the token: a clear refusal that says how to give it.
	_, _, err := run(t, "admin", "--addr", addr, "--timeout", "10s", "workers")
	if err == nil || !strings.Contains(err.Error(), "refused the credential") || !strings.Contains(err.Error(), "AUTH_TOKEN_FILE") {
		t.Fatalf("admin without the token: err = %v, want a refusal naming AUTH_TOKEN_FILE", err)
	}

	// compact has no runner: the task stays queued, so the listing is stable.
	out, _, err := admin("enqueue", "compact", "r1")
	if err != nil {
		t.Fatal(err)
	}
	id := fieldOf(out, "id")
	if id == "" || fieldOf(out, "kind") != "compact" || fieldOf(out, "state") != "queued" || fieldOf(out, "deduplicated") != "false" {
		t.Fatalf("enqueue printed:\n%s", out)
	}
	out, _, err = admin("enqueue", "compact", "r1")
	if err != nil || fieldOf(out, "id") != id || fieldOf(out, "deduplicated") != "true" {
		t.Fatalf("second enqueue printed (%v):\n%s", err, out)
	}
	if _, _, err := admin("enqueue", "verify", "generic:g1"); err != nil {
		t.Fatal(err)
	}

	out, stderr, err := admin("list", "--kind", "compact")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "TARGET") ||
		!strings.HasPrefix(lines[1], id) || !strings.Contains(lines[1], "queued") || stderr != "" {
		t.Fatalf("list table:\n%s\nstderr: %s", out, stderr)
	}
	out, stderr, err = admin("list", "--limit", "1")
	if err != nil || !strings.Contains(stderr, "--page-token "+id) {
		t.Fatalf("paged list (%v): stdout\n%s\nstderr %q, want the next page token", err, out, stderr)
	}

	out, _, err = admin("-o", "json", "list")
	if err != nil {
		t.Fatal(err)
	}
	var resp tidemarkv1.ListTasksResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("list -o json is not a ListTasksResponse: %v\n%s", err, out)
	}
	if len(resp.Tasks) != 2 || resp.Tasks[0].Id != id || resp.Tasks[1].Target != "generic:g1" {
		t.Fatalf("list -o json = %v", &resp)
	}
	if !strings.Contains(out, `"enqueued_at"`) {
		t.Errorf("JSON does not use the .proto field names:\n%s", out)
	}

	out, _, err = admin("get", id)
	if err != nil || fieldOf(out, "target") != "r1" {
		t.Fatalf("get (%v):\n%s", err, out)
	}
	out, _, err = admin("cancel", id)
	if err != nil || fieldOf(out, "state") != "failed" || fieldOf(out, "error") != "cancelled" {
		t.Fatalf("cancel (%v):\n%s", err, out)
	}

	_, _, err = admin("cancel", id)
	if err == nil || !strings.Contains(err.Error(), "FailedPrecondition") {
		t.Errorf("second cancel: err = %v, want FailedPrecondition", err)
	}
	_, _, err = admin("requeue-merge", "nope")
	if err == nil || !strings.Contains(err.Error(), "NotFound") || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("requeue-merge of an unregistered store: err = %v, want NotFound naming it", err)
	}
	_, _, err = admin("enqueue", "defrag", "r1")
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), "defrag") {
		t.Errorf("enqueue of an unknown kind: err = %v, want InvalidArgument naming it", err)
	}

	out, _, err = admin("rescan")
	if err != nil || !strings.Contains(out, "observed 2 stores") {
		t.Fatalf("rescan (%v):\n%s", err, out)
	}
	out, _, err = admin("stats")
	if err != nil || !strings.Contains(out, "PENDING_GENERATIONS") || !strings.Contains(out, "generic:g1") || !strings.Contains(out, "\nr1 ") {
		t.Fatalf("stats (%v):\n%s", err, out)
	}
	out, _, err = admin("workers")
	if err != nil || !strings.HasPrefix(out, "INSTANCE") {
		t.Fatalf("workers (%v):\n%s", err, out)
	}

	// MASTER_ADDR and AUTH_TOKEN_FILE reach the subcommands' inherited flags.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MASTER_ADDR", addr)
	t.Setenv("AUTH_TOKEN_FILE", tokenFile)
	if _, _, err := run(t, "admin", "get", id); err != nil {
		t.Errorf("admin with MASTER_ADDR and AUTH_TOKEN_FILE: %v", err)
	}
	_, _, err = run(t, "admin", "--addr", "127.0.0.1:1", "--timeout", "500ms", "workers")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("admin against no master: err = %v, want one naming the address", err)
	}
	if _, _, err := run(t, "admin", "-o", "yaml", "workers"); err == nil || !strings.Contains(err.Error(), "yaml") {
		t.Errorf("-o yaml: err = %v", err)
	}
}

// fieldOf returns the value of "field:" in a task printed as a table.
func fieldOf(out, field string) string {
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// The reference's WORKER_ENDPOINTS are the workers' HTTP URLs; Tidemark calls
// workers over gRPC, so that form is refused at startup saying what to give,
// after the warnings for the reference's variables used (its interval in
// seconds here).
func TestServeRefusesTheReferencesWorkerURLsAndWarnsAboutItsVariables(t *testing.T) {
	t.Setenv("WORKER_ENDPOINTS", "http://rollout-0:3000,http://rollout-1:3000")
	t.Setenv("MERGE_WAL_INTERVAL_SECS", "600")
	t.Setenv("MERGE_WAL_INTERVL", "1m")
	_, stderr, err := run(t, "serve", "--etcd-endpoints", "http://127.0.0.1:1", "--auth-disabled",
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "http://rollout-0:3000") || !strings.Contains(err.Error(), "host:port") {
		t.Fatalf("err = %v, want the URL refused, saying to give host:port", err)
	}
	for _, want := range []string{`"variable":"MERGE_WAL_INTERVAL_SECS","use":"MERGE_WAL_INTERVAL"`,
		`"variable":"MERGE_WAL_INTERVL","use":"MERGE_WAL_INTERVAL"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("log lacks the warning %s:\n%s", want, stderr)
		}
	}
}

// The master reads the registries and scans the stores through a bucket that
// resends what the store throttles, as a worker's stores do: without it the
// first 503 of a throttled account failed the scan or the admin call.
func TestTheMastersBucketResendsThrottledRequests(t *testing.T) {
	ctx := context.Background()
	faults := objstore.NewFaults(nil)
	b := objstore.WithFaults(objstoretest.Mem(t), faults)
	if _, err := registry.New(b).Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: "r1"}); err != nil {
		t.Fatal(err)
	}
	throttle := objstore.Rule{Ops: []objstore.Op{objstore.OpList, objstore.OpGet}, KeyContains: "_registry/",
		Times: 2, Err: objstore.ErrThrottled}

	rule := faults.AddRule(throttle)
	if _, err := registry.New(b).List(ctx, registry.KindRollout); !errors.Is(err, objstore.ErrThrottled) {
		t.Fatalf("the bare bucket's listing: %v, want the throttling error (the test throttles nothing)", err)
	}
	rule.Remove()

	rule = faults.AddRule(throttle)
	entries, err := registry.New(resendThrottled(b, objstore.DefaultOpTimeout)).List(ctx, registry.KindRollout)
	if err != nil || len(entries) != 1 || entries[0].Name != "r1" {
		t.Fatalf("listing through the master's bucket: %v, %v; want r1", entries, err)
	}
	if n := rule.Fired(); n != 2 {
		t.Errorf("%d requests throttled, want 2 (each resent)", n)
	}
}
