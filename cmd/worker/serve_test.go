package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testlog"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// testToken is the bearer token the tests' workers accept.
const testToken = "cmd-worker-test-token-0123456789"

// Secure by default: with neither a token nor a client CA the worker refuses to
// start, naming the settings; --auth-disabled is the explicit way out.
func TestServeRefusesToStartWithoutACredential(t *testing.T) {
	_, err := run(t, "serve", "--data-url", "mem://", "--instance-id", "w1", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "AUTH_TOKEN_FILE") || !strings.Contains(err.Error(), "AUTH_DISABLED") {
		t.Fatalf("err = %v, want a refusal naming AUTH_TOKEN_FILE and AUTH_DISABLED", err)
	}
	_, err = run(t, "serve", "--data-url", "mem://", "--instance-id", "w1", "--auth-token", "short")
	if err == nil || !strings.Contains(err.Error(), "AUTH_TOKEN") {
		t.Fatalf("err = %v, want a short token refused naming AUTH_TOKEN", err)
	}
}

func TestServeHelpListsTheGRPCAndEtcdSettings(t *testing.T) {
	out, err := run(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"GRPC_ADDR", "ADVERTISE_GRPC_ADDR", "ADVERTISE_HTTP_ADDR", "ETCD_ENDPOINTS", "ETCD_PREFIX",
		"ETCD_USERNAME", "ETCD_PASSWORD", "ETCD_CA_CERT", "ETCD_CLIENT_CERT", "ETCD_CLIENT_KEY", "ETCD_DIAL_TIMEOUT", "LEASE_TTL"} {
		if !strings.Contains(out, env) {
			t.Errorf("serve --help does not mention %s", env)
		}
	}
}

func TestServeFailsAtStartupWhenEtcdIsUnreachable(t *testing.T) {
	_, err := run(t, "serve", "--data-url", "mem://", "--instance-id", "w1", "--http-addr", "127.0.0.1:0",
		"--grpc-addr", "127.0.0.1:0", "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-dial-timeout", "300ms", "--auth-disabled")
	if err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:1") || !strings.Contains(err.Error(), "ETCD_ENDPOINTS") {
		t.Fatalf("err = %v, want a startup error naming the endpoint and ETCD_ENDPOINTS", err)
	}
}

// The wiring end to end: the worker registers in etcd with the addresses it really
// listens on, answers gRPC (WorkerService, health) and HTTP there, and on shutdown
// deregisters and returns cleanly.
func TestServeRegistersServesGRPCAndHTTPAndDeregistersOnShutdown(t *testing.T) {
	client, endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	var logs testlog.Buffer
	root.SetOut(&logs)
	root.SetErr(&logs)
	root.SetArgs([]string{"serve", "--data-url", "mem://", "--instance-id", "w1",
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--etcd-endpoints", strings.Join(endpoints, ","), "--etcd-prefix", "/e2e/", "--lease-ttl", "2s",
		"--auth-token", testToken})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	}()

	var rec membership.Worker
	testwait.For(t, 30*time.Second, "the worker registered", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("serve returned before registering: %v", err)
		default:
		}
		resp, err := client.Get(context.Background(), "/e2e/workers/w1")
		if err != nil || len(resp.Kvs) != 1 {
			return false, fmt.Sprintf("get: %v, %v", resp, err)
		}
		if rec, err = membership.Parse("/e2e/workers/w1", resp.Kvs[0].Value); err != nil {
			t.Fatal(err)
		}
		return true, ""
	})
	if rec.InstanceID != "w1" || strings.HasSuffix(rec.GRPCAddr, ":0") || strings.HasSuffix(rec.HTTPAddr, ":0") || rec.StartedAt.IsZero() {
		t.Fatalf("record %+v: want the real listen ports and a start time", rec)
	}

	bare, err := grpc.NewClient(rec.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := tidemarkv1.NewWorkerServiceClient(bare).Info(context.Background(), &tidemarkv1.InfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Info without the token: %v, want Unauthenticated", err)
	}
	conn, err := grpc.NewClient(rec.GRPCAddr, auth.DialOptions(testToken, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info, err := tidemarkv1.NewWorkerServiceClient(conn).Info(context.Background(), &tidemarkv1.InfoRequest{})
	if err != nil || info.GetInstanceId() != "w1" || info.GetGrpcAddr() != rec.GRPCAddr || info.GetHttpAddr() != rec.HTTPAddr {
		t.Fatalf("Info = %v, %v; want w1 with the registered addresses", info, err)
	}
	h, err := healthpb.NewHealthClient(bare).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", h, err)
	}
	resp, err := http.Get("http://" + rec.HTTPAddr + "/api/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	var health struct {
		InstanceID string `json:"instance_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if err != nil || health.InstanceID != "w1" {
		t.Fatalf("HTTP health: %+v, %v", health, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after shutdown: %v", err)
		}
	case <-time.After(60 * time.Second): // liveness bound
		t.Fatal("serve did not return after its context was cancelled")
	}
	if resp, err := client.Get(context.Background(), "/e2e/workers/w1"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after shutdown the record is still there: %v, %v", resp, err)
	}
}
