package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// minioBehindProxy returns a fault proxy in front of the test MinIO, and the
// DATA_URL (with the environment its credentials need) of a new bucket view that
// goes through it.
func minioBehindProxy(t *testing.T) (*faultproxy.Proxy, map[string]string) {
	t.Helper()
	p, err := faultproxy.Start(faultproxy.Config{Flavor: faultproxy.S3, Target: objstoretest.MinIOAddr(t), Seed: 1,
		S3SecretKey: objstoretest.MinIOPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	raw, env := objstoretest.MinIOURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("endpoint", p.URL())
	u.RawQuery = q.Encode()
	vars := map[string]string{"DATA_URL": u.String()}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	return p, vars
}

// The production failure: S3 answering 503 SlowDown for minutes. A worker whose
// bucket throttles past the SDK's retries and its own resends
// (half of OBJECT_STORE_TIMEOUT) answers an add 503 OVERLOADED with Retry-After,
// in bounded time, instead of hanging or a 500; once the store stops
// throttling, adds are acknowledged again, and every acknowledged row is read
// back.
func TestAWorkerOnAThrottledBucketAnswersOverloadedAndRecovers(t *testing.T) {
	skipShort(t)
	p, env := minioBehindProxy(t)
	env["OBJECT_STORE_TIMEOUT"] = "4s" // throttled requests are sent again for 2s
	c := newCluster(t, env, nil)
	w := c.startWorker("w1")
	client := &http.Client{Timeout: 2 * time.Minute}
	if a, err := send(client, http.MethodPost, w.url()+"/api/v1/rollouts", `{"name":"throttled"}`); err != nil || a.status != http.StatusCreated {
		t.Fatalf("create the store: %+v %v", a, err)
	}
	add := func(id string) (answer, error) {
		return send(client, http.MethodPost, w.url()+"/api/v1/rollouts/throttled/records",
			fmt.Sprintf(`{"records":[{"id":%q,"rollout_id":"r","content":%q}]}`, id, id))
	}
	if a, err := add("before"); err != nil || a.status/100 != 2 {
		t.Fatalf("add before the throttling: %+v %v", a, err)
	}

	p.Set(faultproxy.Faults{Throttle: 1})
	start := time.Now()
	a, err := add("during")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(a.body), &body)
	if a.status != http.StatusServiceUnavailable || body.Error.Code != "OVERLOADED" || a.retryAfter == "" {
		t.Fatalf("add while the store throttles everything: %d %s (Retry-After %q), want 503 OVERLOADED with Retry-After", a.status, a.body, a.retryAfter)
	}
	t.Logf("answered %d %s after %s; proxy %+v", a.status, body.Error.Code, took.Round(time.Millisecond), p.Counts())
	if p.Counts().Throttled == 0 {
		t.Fatal("the proxy throttled nothing")
	}

	p.Set(faultproxy.Faults{})
	if a, err := add("after"); err != nil || a.status/100 != 2 {
		t.Fatalf("add once the throttling stopped: %+v %v", a, err)
	}
	for _, id := range []string{"before", "after"} {
		testwait.ForEvery(t, 30*time.Second, poll, "row "+id+" readable", func() (bool, string) {
			a, err := send(client, http.MethodGet, w.url()+"/api/v1/rollouts/throttled/records/"+id+"?flush=true", "")
			return err == nil && a.status == http.StatusOK, fmt.Sprintf("%+v %v", a, err)
		})
	}
}

// A worker started on a bucket without conditional writes (a real MinIO whose
// If-None-Match the proxy strips) exits at start-up, non-zero, with the probe's
// message naming the missing capability, before it writes anything or reaches
// etcd. (The master only reads the bucket: it does not probe, so it needs no
// write permission.)
func TestProcessesRefuseABucketWithoutConditionalWrites(t *testing.T) {
	skipShort(t)
	p, env := minioBehindProxy(t)
	p.Set(faultproxy.Faults{StripConditional: true})
	bins := build(t)
	dir := t.TempDir()
	env["ETCD_ENDPOINTS"] = "http://" + freeAddr(t) // nothing listens: the probe comes first
	env["HTTP_ADDR"], env["GRPC_ADDR"] = freeAddr(t), freeAddr(t)
	env["AUTH_DISABLED"] = "true"
	for _, bin := range []struct{ name, path string }{{"worker", bins.worker}} {
		pr := startProc(t, dir, bin.name, bin.path, []string{"serve"}, env)
		select {
		case <-pr.done:
		case <-time.After(time.Minute):
			pr.kill()
			t.Fatalf("%s still running on a bucket without conditional writes:\n%s", bin.name, pr.tail(20))
		}
		log := pr.tail(20)
		if pr.err == nil || !strings.Contains(log, "does not support conditional writes (put-if-absent)") {
			t.Fatalf("%s exited with %v; log:\n%s\nwant a non-zero exit naming the missing capability", bin.name, pr.err, log)
		}
	}
	if c := p.Counts(); c.Stripped < 2 {
		t.Fatalf("%+v: the worker should have probed through the proxy", c)
	}
}
