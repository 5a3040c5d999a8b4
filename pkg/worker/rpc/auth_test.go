package rpc

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

const testToken = "test-token-0123456789abcdef"

func testGuard(t *testing.T) *auth.Guard {
	t.Helper()
	toks, err := auth.NewTokens("test", testToken)
	if err != nil {
		t.Fatal(err)
	}
	return auth.NewGuard(auth.GuardConfig{Tokens: toks})
}

// The master's path: gRPC MergeWal without the token is Unauthenticated and
// merges nothing; with it the generation is merged. Health needs no token.
func TestGRPCMergeWalWithoutTokenIsUnauthenticatedAndMergesNothing(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	ss := store.NewStores(store.Config{Bucket: objstoretest.Mem(t), Shard: "w1", Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: "sec"}); err != nil {
		t.Fatal(err)
	}
	svc, err := NewWorkerService(WorkerServiceConfig{InstanceID: "w1", Stores: ss,
		Merger: merge.New(merge.Config{Concurrency: 1, Logger: quiet}), Metrics: NewMetrics(prometheus.NewRegistry()), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s, release, err := ss.Open(ctx, registry.KindRollout, "sec")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	(&grpcEnv{}).pending(t, s, "a")

	gs, err := NewGRPCServer(GRPCConfig{Service: svc, Logger: quiet, Auth: testGuard(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	client := func(token string) tidemarkv1.WorkerServiceClient {
		cc, err := grpc.NewClient(ln.Addr().String(), auth.DialOptions(token, nil)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return tidemarkv1.NewWorkerServiceClient(cc)
	}
	pending := func() int { return merge.PendingOwn(s) }
	if n := pending(); n != 1 {
		t.Fatalf("pending generations %d, want 1", n)
	}
	for _, token := range []string{"", "wrong-token-0123456789abcdef"} {
		_, err := client(token).MergeWal(ctx, &tidemarkv1.MergeWalRequest{Target: "sec", FencingToken: 1})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("MergeWal with token %q: %v, want Unauthenticated", token, err)
		}
	}
	if n := pending(); n != 1 {
		t.Fatalf("pending generations %d after refused merges, want 1 (nothing merged)", n)
	}
	cc, err := grpc.NewClient(ln.Addr().String(), auth.DialOptions("", nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token = %v, %v", h, err)
	}
	resp, err := client(testToken).MergeWal(ctx, &tidemarkv1.MergeWalRequest{Target: "sec", FencingToken: 1})
	if err != nil || resp.GetGenerations() != 1 {
		t.Fatalf("MergeWal with the token = %v, %v; want 1 generation merged", resp, err)
	}
	if n := pending(); n != 0 {
		t.Fatalf("pending generations %d after the authorized merge, want 0", n)
	}
}
