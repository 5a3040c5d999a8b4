package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testlog"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/devcluster"
)

func TestTailRefusesAStoreWithoutItsKind(t *testing.T) {
	for _, arg := range []string{"r", "rollout/r", "generic/", "tables/r"} {
		_, err := run(t, "tail", arg)
		if err == nil || !strings.Contains(err.Error(), "rollouts/<name> or generic/<name>") {
			t.Errorf("tail %s: %v, want the expected form named", arg, err)
		}
	}
}

// The flags reach the requests: the store, the consumer, the page size and
// the worker's address; a page short of the limit ends the command.
func TestTailSendsItsFlagsToTheWorker(t *testing.T) {
	var got string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path + "?" + r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"changes":[{"cursor":"c1.AAAAAAAAAAo","row":{"id": "a"}}],"next_cursor":"c1.AAAAAAAAAAs"}`))
	}))
	defer hs.Close()
	t.Setenv("TAIL_URL", hs.URL)
	out, err := run(t, "tail", "generic/events", "--limit", "7")
	if err != nil {
		t.Fatal(err)
	}
	if out != `{"id":"a"}`+"\n" || got != "/api/v1/generic/events/changes?limit=7" {
		t.Fatalf("printed %q after requesting %q", out, got)
	}
}

// The dev cluster's etcd is where tail looks without --url or --etcd-endpoints.
func TestTailLooksForWorkersInTheDevClustersEtcd(t *testing.T) {
	if want := "http://" + devcluster.DefaultEtcdAddr; devEtcd != want {
		t.Fatalf("tail's default etcd %q, the dev cluster's %q", devEtcd, want)
	}
}

// Without --url, tail reads from a worker registered in etcd: the first in
// instance order that answers (a record left by a worker that cannot be
// reached is passed over). `worker tail` after `make run` answered
// "connection refused" from its old default, 127.0.0.1:8080.
func TestTailWithoutURLFindsARegisteredWorker(t *testing.T) {
	etcd, endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	var logs testlog.Buffer
	root.SetOut(&logs)
	root.SetErr(&logs)
	root.SetArgs([]string{"serve", "--data-url", "mem://", "--instance-id", "w1",
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--flush-interval", "100ms",
		"--etcd-endpoints", strings.Join(endpoints, ","), "--etcd-prefix", "/e2e/", "--auth-disabled"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	}()
	// A record of a worker gone without deregistering, first in instance order.
	if _, err := etcd.Put(context.Background(), "/e2e/workers/w0", `{"instance_id":"w0","grpc_addr":"127.0.0.1:1","http_addr":"127.0.0.1:1"}`); err != nil {
		t.Fatal(err)
	}
	var rec membership.Worker
	testwait.For(t, 30*time.Second, "the worker registered", func() (bool, string) {
		resp, err := etcd.Get(context.Background(), "/e2e/workers/w1")
		if err != nil || len(resp.Kvs) != 1 {
			return false, fmt.Sprintf("get: %v, %v", resp, err)
		}
		rec, err = membership.Parse("/e2e/workers/w1", resp.Kvs[0].Value)
		return err == nil, fmt.Sprint(err)
	})
	wc, err := client.New(rec.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.CreateStore(ctx, client.Rollouts, client.StoreSpec{Name: "demo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := wc.AddRows(ctx, client.Rollouts, "demo", []map[string]any{{"id": "a", "rollout_id": "r1"}, {"id": "b", "rollout_id": "r1"}},
		client.AddOptions{Flush: true}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TAIL_URL", "")
	var out string
	testwait.For(t, 30*time.Second, "tail printed the rows through the registered worker", func() (bool, string) {
		out, err = run(t, "tail", "rollouts/demo", "--consumer", "trainer", "--etcd-endpoints", strings.Join(endpoints, ","), "--etcd-prefix", "/e2e/")
		if err != nil {
			t.Fatalf("tail without --url: %v (%s)", err, out)
		}
		return strings.Count(out, "\n") == 2, out
	})
	if !strings.Contains(out, `"id":"a"`) || !strings.Contains(out, `"id":"b"`) {
		t.Fatalf("printed %q, want rows a and b", out)
	}
	if got, err := wc.GetConsumer(ctx, "trainer", client.Rollouts, "demo"); err != nil || got.Cursor == "" {
		t.Fatalf("the consumer's cursor: %+v, %v; want it committed through the worker found", got, err)
	}
}
