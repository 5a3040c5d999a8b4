package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/testutil/testcerts"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// postWith POSTs body to u through client, with token when not empty.
func postWith(client *http.Client, u, token, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	auth.SetHeader(req.Header, token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), err
}

// tlsClient trusts ca and presents cert/key when given.
func tlsClient(t *testing.T, ca, cert, key string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", ca)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// A cluster where every process requires the token and a client certificate
// (mutual TLS on gRPC and HTTP): the master still merges through every worker
// (its calls carry the token and its certificate), `master admin` works with the
// client certificate and the token, and without either it fails with a clear
// refusal; a worker's internal route refuses a caller without a certificate or
// without the token, and nothing is merged by such a call.
func TestClusterWithTokenAndMutualTLSMergesAndRefusesCallersWithoutCredentials(t *testing.T) {
	t.Parallel()
	skipShort(t)
	certs := testcerts.New(t, t.TempDir())
	env := map[string]string{
		"TLS_CERT": certs.ServerCert, "TLS_KEY": certs.ServerKey, // also the client certificate of the master's calls
		"TLS_CLIENT_CA": certs.CA, "TLS_CA": certs.CA,
	}
	c := newCluster(t, env, env)
	c.scheme = "https"
	c.httpc = tlsClient(t, certs.CA, certs.ClientCert, certs.ClientKey)
	c.adminEnv = map[string]string{"TLS_CA": certs.CA, "TLS_CERT": certs.ClientCert, "TLS_KEY": certs.ClientKey}

	m := c.startMaster("m1", nil)
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")
	const store = "secure"
	if code, body, err := postWith(c.httpc, w1.url()+"/api/v1/rollouts", "", `{"name":"`+store+`"}`); err != nil || code != http.StatusCreated {
		t.Fatalf("create %s: %d %s %v", store, code, body, err)
	}

	// A caller without a client certificate, or without the token, cannot make a
	// worker merge; the generation stays pending.
	add := func(w *workerProc, id string) {
		t.Helper()
		code, body, err := postWith(c.httpc, w.url()+"/api/v1/rollouts/"+store+"/records?flush=true", "",
			fmt.Sprintf(`{"records":[{"id":%q,"rollout_id":"r"}]}`, id))
		if err != nil || code != http.StatusCreated {
			t.Fatalf("add %s through %s: %d %s %v", id, w.id, code, body, err)
		}
	}
	add(w1, "a")
	noCert := tlsClient(t, certs.CA, "", "")
	for name, try := range map[string]func() (int, string, error){
		"token without a client certificate": func() (int, string, error) {
			return postWith(noCert, w1.url()+"/api/v1/internal/merge-wal/"+store, e2eToken, "")
		},
		"client certificate without the token": func() (int, string, error) {
			return postWith(c.httpc, w1.url()+"/api/v1/internal/merge-wal/"+store, "", "")
		},
	} {
		if code, body, err := try(); err != nil || code != http.StatusUnauthorized {
			t.Fatalf("%s: POST internal merge-wal = %d %s %v, want 401", name, code, body, err)
		}
	}
	var st struct {
		PendingGenerations int `json:"pending_generations"`
	}
	code, body, err := c.get(w1.url() + "/api/v1/rollouts/" + store)
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &st) != nil || st.PendingGenerations != 1 {
		t.Fatalf("store after refused merges: %d %s %v, want 1 pending generation", code, body, err)
	}

	// The master merges through both workers over mutual TLS with the token.
	add(w2, "b")
	add(w2, "c")
	testwait.ForEvery(c.t, 60*time.Second, poll, "the master merged "+store+" through the workers", func() (bool, string) {
		row, ok := c.stats(m)[store]
		if !ok {
			return false, "no stats row yet"
		}
		for _, tk := range c.tasksNow() {
			if tk.Target == store && tk.State == "failed" {
				return false, fmt.Sprintf("task %s failed: %s", tk.ID, tk.Error)
			}
		}
		// The stats can see the commit before the task ends (a gather merge
		// drains the other workers after it): wait for both.
		merged := false
		for _, tk := range c.tasksNow() {
			if tk.Target == store && tk.Kind == "merge_wal" && tk.State == "done" && strings.Contains(tk.Detail, "2/2 workers") {
				merged = true
			}
		}
		return row.PendingWALGenerations == 0 && row.RowCount == 3 && merged,
			fmt.Sprintf("%d rows, %d pending generations, a done merge_wal across 2/2 workers: %v", row.RowCount, row.PendingWALGenerations, merged)
	})

	// master admin: works with the client certificate and the token ...
	var workers struct {
		Workers []struct {
			InstanceID string `json:"instance_id"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(c.admin(m, "workers"), &workers); err != nil || len(workers.Workers) != 2 {
		t.Fatalf("master admin workers = %+v (%v), want w1 and w2", workers, err)
	}
	// ... and without either, fails with a clear refusal.
	for name, extra := range map[string][]string{
		"without the client certificate": {"AUTH_TOKEN_FILE=" + c.tokenFile(), "TLS_CA=" + certs.CA},
		"without the token":              {"TLS_CA=" + certs.CA, "TLS_CERT=" + certs.ClientCert, "TLS_KEY=" + certs.ClientKey},
	} {
		cmd := exec.Command(c.bin.master, "admin", "requeue-merge", store, "--addr", m.grpcAddr, "--timeout", "10s")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, extra...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "refused the credential") {
			t.Errorf("master admin %s: %v\n%s\nwant a refusal naming the credential", name, err, out)
		}
	}
	// A plaintext client is not served at all.
	if _, _, err := httpGet("http://" + m.httpAddr + "/api/v1/tasks"); err == nil {
		if code, _, _ := httpGet("http://" + m.httpAddr + "/api/v1/tasks"); code == http.StatusOK {
			t.Error("the master answered its task list over plaintext HTTP")
		}
	}
}
