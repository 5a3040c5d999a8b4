package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testcerts"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// authTokenTTL is the etcd auth token lifetime of the secured etcd: short, so that
// the processes' tokens expire while they idle and must be renewed in the test.
const authTokenTTL = 2 * time.Second

// newSecuredCluster is a cluster against an etcd run in the test process that
// serves https only, requires a client certificate of its own CA and has
// authentication on, as a production etcd is run. Workers and masters reach it
// with the ETCD_* environment variables alone.
func newSecuredCluster(t *testing.T) (*cluster, *etcdtest.Server) {
	t.Helper()
	skipShort(t)
	certs := testcerts.New(t, t.TempDir())
	srv := etcdtest.StartServer(t, etcdtest.WithTLS(certs), etcdtest.WithAuth("e2e-root-pw"), etcdtest.WithAuthTokenTTL(authTokenTTL))
	const prefix, user, userPassword = "/tidemark-tls", "tidemark", "e2e-tidemark-pw"
	root := srv.Client(t)
	grantPrefix(t, root, user, userPassword, prefix+"/")
	env := map[string]string{
		"ETCD_CA_CERT":     certs.CA,
		"ETCD_CLIENT_CERT": certs.ClientCert,
		"ETCD_CLIENT_KEY":  certs.ClientKey,
		"ETCD_USERNAME":    user,
		"ETCD_PASSWORD":    userPassword,
	}
	c := &cluster{
		t: t, bin: build(t), dir: t.TempDir(), prefix: prefix,
		etcdURL: srv.Endpoints()[0], client: root,
		workers: map[string]*workerProc{}, masters: map[string]*masterProc{},
		workerEnv: env, masterEnv: env,
	}
	c.dataURL = "file://" + filepath.Join(c.dir, "store")
	t.Cleanup(c.shutdown)
	return c, srv
}

// grantPrefix adds user with password and a role of the same name that may read
// and write the keys under prefix and nothing else: the least a Tidemark
// deployment's etcd user needs (docs/SECURITY.md, "A secured etcd").
func grantPrefix(t *testing.T, root *clientv3.Client, user, password, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, user); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, user, password); return err },
		func() error { _, err := root.UserGrantRole(ctx, user, user); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("etcd user %s with read-write on %s: %v", user, prefix, err)
		}
	}
}

// TestClusterRunsAgainstEtcdWithClientCertificatesAndAuthentication runs real
// worker and master processes against an etcd that requires a client
// certificate and a user, as a user that may only read and write the keys under
// the prefix: the workers register, the master lists them and runs
// merge_wal tasks through them. The etcd auth tokens expire every couple of
// seconds of disuse: the workers' registrations (lease keep-alive and watch of
// their key) and the master's session outlive them, and a second round of rows
// merges after the processes idled past that expiry. A third merges after an etcd
// restart, which forgets every token it issued.
func TestClusterRunsAgainstEtcdWithClientCertificatesAndAuthentication(t *testing.T) {
	t.Parallel()
	c, srv := newSecuredCluster(t)
	if !strings.HasPrefix(c.etcdURL, "https://") {
		t.Fatalf("etcd at %s: want https", c.etcdURL)
	}
	m := c.startMaster("m1", nil)
	ids := []string{"w1", "w2"}
	for _, id := range ids { // startWorker waits until P/workers/<id> is in etcd
		c.startWorker(id)
	}
	c.awaitWorkersListed(m, ids)

	const rollouts = "tls_rollouts"
	l := newLedger()
	load := func(run string, rows int64) {
		t.Helper()
		st, err := loadgen.Run(context.Background(), loadgen.Config{
			Workers: c.workerURLs(), MaxRows: rows, Batch: 10, Concurrency: 2,
			RolloutStore: rollouts, RunID: run, Flush: true, OnBatch: l.record,
		})
		if err != nil || st.Failed > 0 || st.RolloutRows != rows {
			t.Fatalf("load %s: %+v, %v; want %d rollout rows acknowledged", run, st, err, rows)
		}
	}
	load("tls-1", 100)
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, time.Minute)
	c.awaitNoLiveTask()

	// Idle well past the token TTL and the workers' lease TTL (4s): a keep-alive
	// or watch that needed a fresh token would have lost a worker's key by now.
	time.Sleep(3 * authTokenTTL)
	for _, id := range ids {
		if err := c.workerRegistered(id); err != nil {
			t.Errorf("after the tokens expired: %v\n%s", err, c.workers[id].tail(20))
		}
	}
	c.awaitWorkersListed(m, ids)

	load("tls-2", 60)
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, time.Minute)
	c.awaitNoLiveTask()

	// A restarted etcd has forgotten every token it issued: each process must
	// authenticate again, on its own, and carry on.
	srv.Stop()
	time.Sleep(time.Second)
	srv.Restart(t)
	for _, id := range ids {
		testwait.ForEvery(c.t, 30*time.Second, poll, "worker "+id+" registered after the etcd restart", func() (bool, string) {
			err := c.workerRegistered(id)
			return err == nil, fmt.Sprint(err)
		})
	}
	c.awaitWorkersListed(m, ids)
	load("tls-3", 40)
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, time.Minute)
	c.awaitNoLiveTask()

	done := 0
	for _, tk := range c.tasksNow() {
		if tk.State == "queued" || tk.State == "running" {
			// The merge sweep may enqueue the store again from stats read before
			// the last merge (they lag it): a later task, not one this test judges.
			continue
		}
		if tk.Kind != "merge_wal" || tk.State != "done" {
			t.Errorf("task %s: %s %s is %s (%s), want every merge done", tk.ID, tk.Kind, tk.Target, tk.State, tk.Error)
			continue
		}
		if !strings.Contains(tk.Detail, "across 2/2 workers") {
			t.Errorf("task %s detail %q: want a merge across 2/2 workers", tk.ID, tk.Detail)
		}
		done++
	}
	if done == 0 {
		t.Error("no merge_wal task ran")
	}
}

// workerRegistered checks that worker id's key is in etcd.
func (c *cluster) workerRegistered(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := c.prefix + "/workers/" + id
	resp, err := c.client.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	if resp.Count != 1 {
		return fmt.Errorf("%s is not in etcd", key)
	}
	return nil
}

// awaitWorkersListed waits until the master's GET /api/v1/workers lists exactly ids.
func (c *cluster) awaitWorkersListed(m *masterProc, ids []string) {
	c.t.Helper()
	testwait.ForEvery(c.t, 30*time.Second, poll, fmt.Sprintf("master %s lists workers %v", m.name, ids), func() (bool, string) {
		code, body, err := httpGet("http://" + m.httpAddr + "/api/v1/workers")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %s %v", code, body, err)
		}
		var list struct {
			Workers []struct {
				InstanceID string `json:"instance_id"`
			} `json:"workers"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, w := range list.Workers {
			got = append(got, w.InstanceID)
		}
		slices.Sort(got)
		return slices.Equal(got, ids), string(body)
	})
}
