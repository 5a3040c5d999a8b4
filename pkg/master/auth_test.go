package master

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testcerts"
)

const testToken = "master-test-token-0123456789"

// The guarded failure: anyone who could reach the master's AdminService could
// enqueue merges. A master with a token and mutual TLS refuses an enqueue that
// lacks either (Unauthenticated, and no task reaches etcd) and the task routes
// answer 401; health (gRPC and HTTP) needs no credential; with both, the call
// works.
func TestAdminServiceWithoutCredentialIsUnauthenticatedAndEnqueuesNothing(t *testing.T) {
	client, _ := etcdtest.Start(t)
	bucket := objstoretest.Mem(t)
	createStores(t, bucket)
	certs := testcerts.New(t, t.TempDir())
	flags := auth.Flags{Token: testToken, CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCA: certs.CA}
	srv, err := flags.Server(nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runMaster(t, client, Config{Bucket: bucket, GRPCListener: gln, HTTPListener: hln,
		Discovery: fanout.StaticDiscovery{{InstanceID: "w1", GRPCAddr: "127.0.0.1:9"}}, Auth: srv.Guard, TLS: srv.TLS})

	withCert, err := auth.ClientTLS(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := auth.ClientTLS(certs.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := func(token string, cfg *tls.Config) tidemarkv1.AdminServiceClient {
		cc, err := grpc.NewClient(gln.Addr().String(), auth.DialOptions(token, cfg)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return tidemarkv1.NewAdminServiceClient(cc)
	}
	for _, tc := range []struct {
		name  string
		token string
		cfg   *tls.Config
	}{
		{"token without client certificate", testToken, noCert},
		{"client certificate without token", "", withCert},
		{"client certificate with a wrong token", "wrong-token-0123456789abcdef", withCert},
	} {
		_, err := admin(tc.token, tc.cfg).RequeueMerge(ctx, &tidemarkv1.RequeueMergeRequest{Target: "r1"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: RequeueMerge = %v, want Unauthenticated", tc.name, err)
		}
	}
	if n := taskKeys(t, client); n != 0 {
		t.Fatalf("%d task keys in etcd after refused enqueues, want none", n)
	}
	cc, err := grpc.NewClient(gln.Addr().String(), auth.DialOptions("", noCert)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health without a credential = %v, %v", h, err)
	}

	get := func(path, token string, cfg *tls.Config) int {
		req, err := http.NewRequest(http.MethodGet, "https://"+hln.Addr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		auth.SetHeader(req.Header, token)
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/api/v1/tasks", "/api/v1/stats", "/api/v1/workers"} {
		if code := get(path, testToken, noCert); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a client certificate: %d, want 401", path, code)
		}
		if code := get(path, "", withCert); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", path, code)
		}
	}
	for _, path := range []string{"/api/v1/health", "/metrics"} {
		if code := get(path, "", noCert); code != http.StatusOK {
			t.Errorf("GET %s without a credential: %d, want 200", path, code)
		}
	}

	rq, err := admin(testToken, withCert).RequeueMerge(ctx, &tidemarkv1.RequeueMergeRequest{Target: "r1"})
	if err != nil || rq.GetTask().GetId() == "" {
		t.Fatalf("RequeueMerge with token and client certificate = %v, %v", rq, err)
	}
	if code := get("/api/v1/tasks/"+rq.GetTask().GetId(), testToken, withCert); code != http.StatusOK {
		t.Fatalf("GET the task with both credentials: %d, want 200", code)
	}
}

func taskKeys(t *testing.T, client *clientv3.Client) int {
	t.Helper()
	resp, err := client.Get(context.Background(), "/m/tasks/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.Count)
}
