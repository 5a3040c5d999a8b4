package rpc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

const grpcTestSpec = `{"columns":[["id",{"type":"string"}],["v",{"type":"int64","nullable":true}]]}`

// grpcEnv is one worker (shard "w1") with a rollout store "gs" and a generic store
// "gs" - the same name in both kinds - served over gRPC on a loopback port.
type grpcEnv struct {
	svc     *WorkerService
	merger  *merge.Merger
	metrics *Metrics
	// merges and mergeSvc are the merge service the WorkerService merges through,
	// and its series.
	merges   *mergesvc.Metrics
	mergeSvc *mergesvc.Service
	stores   *store.Stores
	rollout  *store.Store
	generic  *store.Store
	client   tidemarkv1.WorkerServiceClient
	conn     *grpc.ClientConn
	// stop shuts the server down (ServeGRPC's context) and returns Serve's error.
	stop func() error
	// entered receives the method of every unary call once it reaches the server.
	entered chan string
}

type grpcEnvOptions struct {
	shutdownTimeout time.Duration
	// bucket holds the stores (a fresh in-memory bucket when nil).
	bucket *objstore.Bucket
	// instance is the worker's INSTANCE_ID and shard ("w1" when empty); a second
	// worker on the same bucket finds the stores the first created.
	instance string
	// horizons are the stores' change-feed horizons exports read (none when nil).
	horizons Horizons
}

func newGRPCEnv(t *testing.T, o grpcEnvOptions) *grpcEnv {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	bucket := o.bucket
	if bucket == nil {
		bucket = objstoretest.Mem(t)
	}
	instance := cmp.Or(o.instance, "w1")
	ss := store.NewStores(store.Config{Bucket: bucket, Shard: instance, Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	spec, err := schema.ParseSpec([]byte(grpcTestSpec))
	if err != nil {
		t.Fatal(err)
	}
	canon, err := spec.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: "gs"}); err != nil && !errors.Is(err, registry.ErrExists) {
		t.Fatal(err)
	}
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindGeneric, Name: "gs", Schema: canon}); err != nil && !errors.Is(err, registry.ErrExists) {
		t.Fatal(err)
	}
	e := &grpcEnv{stores: ss, entered: make(chan string, 64)}
	var rel store.Release
	if e.rollout, rel, err = ss.Open(ctx, registry.KindRollout, "gs"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel)
	if e.generic, rel, err = ss.Open(ctx, registry.KindGeneric, "gs"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel)

	e.merger = merge.New(merge.Config{Concurrency: 1, Logger: quiet})
	e.metrics = NewMetrics(prometheus.NewRegistry())
	e.merges = mergesvc.NewMetrics(prometheus.NewRegistry())
	if e.mergeSvc, err = mergesvc.New(mergesvc.Config{Stores: ss, Merger: e.merger, Metrics: e.merges, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	e.svc, err = NewWorkerService(WorkerServiceConfig{
		InstanceID: instance, Version: "v-test", GRPCAddr: "grpc.example:9090", HTTPAddr: "http.example:8080",
		Stores: ss, Merger: e.merger, Merges: e.mergeSvc, Metrics: e.metrics, Logger: quiet, Horizons: o.horizons,
	})
	if err != nil {
		t.Fatal(err)
	}
	signal := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		select {
		case e.entered <- info.FullMethod:
		default:
		}
		return next(ctx, req)
	})
	gs, err := NewGRPCServer(GRPCConfig{Service: e.svc, Logger: quiet, Options: []grpc.ServerOption{signal}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- ServeGRPC(serveCtx, gs, ln, GRPCServeOptions{
			ShutdownTimeout: o.shutdownTimeout, Health: e.svc.Health(), Logger: quiet,
		})
	}()
	var once sync.Once
	var stopErr error
	stoppedByTest := false
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-served:
			case <-time.After(30 * time.Second): // liveness bound
				stopErr = fmt.Errorf("ServeGRPC did not return 30s after its context was cancelled")
			}
		})
		return stopErr
	}
	e.stop = func() error { stoppedByTest = true; return stop() }
	t.Cleanup(func() {
		if stoppedByTest {
			return // the test checked the error
		}
		if err := stop(); err != nil {
			t.Errorf("stopping the grpc server: %v", err)
		}
	})
	e.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.conn.Close() })
	e.client = tidemarkv1.NewWorkerServiceClient(e.conn)
	return e
}

// add appends one row to s (unsealed).
func (e *grpcEnv) add(t *testing.T, s *store.Store, id string) {
	t.Helper()
	var rec arrow.RecordBatch
	var err error
	if s.Entry().Kind == registry.KindRollout {
		rec, err = schema.DecodeRollouts([]json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":%q,"rollout_id":"r1"}`, id))}, time.Now())
	} else {
		var spec *schema.Spec
		if spec, err = schema.ParseSpec([]byte(grpcTestSpec)); err == nil {
			rec, err = spec.Codec().Decode([]json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":%q,"v":1}`, id))})
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if err := s.Append(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// pending adds and seals one generation in s, so this worker's shard of s has one
// more generation to merge.
func (e *grpcEnv) pending(t *testing.T, s *store.Store, id string) {
	t.Helper()
	e.add(t, s, id)
	if g, err := s.Seal(context.Background()); err != nil || g == nil {
		t.Fatalf("seal %s: generation %v, err %v", s.Target(), g, err)
	}
}

func (e *grpcEnv) merge(target string, token int64) (*tidemarkv1.MergeWalResponse, error) {
	return e.client.MergeWal(context.Background(), &tidemarkv1.MergeWalRequest{Target: target, FencingToken: token})
}

func wantCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("err = %v (code %s), want code %s", err, status.Code(err), code)
	}
	for _, c := range contains {
		if !strings.Contains(status.Convert(err).Message(), c) {
			t.Errorf("message %q does not mention %q", status.Convert(err).Message(), c)
		}
	}
}

// The master sends "generic:gs" for the generic store gs. It must reach that store
// and never the rollout store of the same name (issue 5), and the bare name must
// reach the rollout store.
func TestMergeWalGenericTargetMergesTheGenericStoreNeverTheRolloutOfTheSameName(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.rollout, "r-1")
	e.pending(t, e.generic, "g-1")
	e.pending(t, e.generic, "g-2")
	rolloutVersion := e.rollout.Table().Latest().Version

	resp, err := e.merge("generic:gs", 7)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGenerations() != 2 || resp.GetRows() != 2 || resp.GetInstanceId() != "w1" || resp.GetBaseVersion() == 0 {
		t.Fatalf("MergeWal(generic:gs) = %v, want 2 generations, 2 rows, instance w1, a base version", resp)
	}
	if n := merge.PendingOwn(e.generic); n != 0 {
		t.Errorf("generic store gs: %d generations still pending", n)
	}
	if n := merge.PendingOwn(e.rollout); n != 1 {
		t.Errorf("rollout store gs: %d pending, want its 1 untouched", n)
	}
	if v := e.rollout.Table().Latest().Version; v != rolloutVersion {
		t.Errorf("rollout store gs: base version moved %d -> %d", rolloutVersion, v)
	}

	resp, err = e.merge("gs", 8)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGenerations() != 1 || merge.PendingOwn(e.rollout) != 0 {
		t.Fatalf("MergeWal(gs) = %v, rollout pending %d: want the rollout store merged", resp, merge.PendingOwn(e.rollout))
	}
	if n := testutil.ToFloat64(e.merges.Merges.WithLabelValues(mergesvc.TriggerMaster, "success")); n != 2 {
		t.Errorf("tidemark_merge_total{trigger=master,result=success} = %v, want 2", n)
	}
	if n := testutil.ToFloat64(e.merges.MergedGenerations.WithLabelValues("generic")); n != 2 {
		t.Errorf("merged generic generations = %v, want 2", n)
	}
}

// A master whose claim of a target expired and was taken over still holds the old
// fencing token; its late call must not merge (issue 5: "a fencing token older than
// the last one seen is refused by the worker").
func TestMergeWalRefusesAFencingTokenOlderThanTheNewestSeen(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.generic, "a")
	if _, err := e.merge("generic:gs", 10); err != nil {
		t.Fatal(err)
	}

	e.pending(t, e.generic, "b")
	versionBefore := e.generic.Table().Latest().Version
	_, err := e.merge("generic:gs", 9)
	wantCode(t, err, codes.FailedPrecondition, "generic:gs", "9", "10")
	if n := merge.PendingOwn(e.generic); n != 1 {
		t.Fatalf("after a refused token: %d pending, want the 1 generation left alone", n)
	}
	if v := e.generic.Table().Latest().Version; v != versionBefore {
		t.Fatalf("after a refused token: base version %d -> %d", versionBefore, v)
	}

	// The same token again (a retry of the current claim) and a newer one are fine.
	if resp, err := e.merge("generic:gs", 10); err != nil || resp.GetGenerations() != 1 {
		t.Fatalf("equal token: %v, %v; want the pending generation merged", resp, err)
	}
	e.pending(t, e.generic, "c")
	if resp, err := e.merge("generic:gs", 11); err != nil || resp.GetGenerations() != 1 {
		t.Fatalf("newer token: %v, %v; want the pending generation merged", resp, err)
	}
	_, err = e.merge("generic:gs", 10)
	wantCode(t, err, codes.FailedPrecondition, "11")
	// Operators alert on refusals: each one means two claims of a target were live.
	if n := testutil.ToFloat64(e.merges.FencingRefusals.WithLabelValues("generic")); n != 2 {
		t.Errorf("tidemark_merge_fencing_refusals_total{kind=generic} = %v, want 2", n)
	}

	// Tokens are per target: the rollout store of the same name has seen none.
	if _, err := e.merge("gs", 1); err != nil {
		t.Fatalf("first token of another target: %v", err)
	}
}

// The HTTP internal route merges with token 0 (mergesvc.Service.MergeTarget, which
// the HTTP API and this service share), which skips fencing; gRPC may not.
func TestTokenZeroIsRefusedOverGRPCAndSkipsFencingOverHTTP(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.rollout, "a")
	_, err := e.merge("gs", 0)
	wantCode(t, err, codes.InvalidArgument, "fencing_token", "> 0")
	_, err = e.merge("gs", -3)
	wantCode(t, err, codes.InvalidArgument, "fencing_token")
	if n := merge.PendingOwn(e.rollout); n != 1 {
		t.Fatalf("%d pending after refused calls, want 1", n)
	}

	if _, err := e.merge("gs", 5); err != nil {
		t.Fatal(err)
	}
	e.pending(t, e.rollout, "b")
	r, err := e.mergeSvc.MergeTarget(context.Background(), registry.MustParseTarget("gs"), 0, mergesvc.TriggerRequest)
	if err != nil || r.Generations != 1 {
		t.Fatalf("unfenced MergeTarget after token 5: %+v, %v; want a merge", r, err)
	}
	// Token 0 recorded nothing: 5 is still the newest.
	_, err = e.merge("gs", 4)
	wantCode(t, err, codes.FailedPrecondition, "5")
}

func TestMergeWalAndFlushRefuseMalformedTargetsAndUnknownStores(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	bad := []struct {
		target string
		why    string
	}{
		{"generic:", "empty"},
		{"a/b", `'/'`},
		{"generic:../x", "must start with"},
		{"", "empty"},
		{"_registry", "reserved"},
	}
	for _, c := range bad {
		t.Run("merge "+c.target, func(t *testing.T) {
			_, err := e.merge(c.target, 1)
			wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("%q", c.target), c.why)
		})
		if c.target == "" {
			continue // an empty Flush target means every resident store
		}
		t.Run("flush "+c.target, func(t *testing.T) {
			_, err := e.client.Flush(context.Background(), &tidemarkv1.FlushRequest{Target: c.target})
			wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("%q", c.target), c.why)
		})
	}
	for _, target := range []string{"nosuch", "generic:nosuch"} {
		_, err := e.merge(target, 1)
		wantCode(t, err, codes.NotFound, "nosuch")
		_, err = e.client.Flush(context.Background(), &tidemarkv1.FlushRequest{Target: target})
		wantCode(t, err, codes.NotFound, "nosuch")
	}
}

func TestFlushSealsOneTargetOrEveryResidentStore(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	flush := func(target string) int64 {
		t.Helper()
		resp, err := e.client.Flush(context.Background(), &tidemarkv1.FlushRequest{Target: target})
		if err != nil {
			t.Fatalf("Flush(%q): %v", target, err)
		}
		return resp.GetSealedGenerations()
	}
	e.add(t, e.rollout, "r")
	e.add(t, e.generic, "g")
	if n := flush("generic:gs"); n != 1 {
		t.Fatalf("Flush(generic:gs) sealed %d, want 1", n)
	}
	if merge.PendingOwn(e.generic) != 1 || merge.PendingOwn(e.rollout) != 0 {
		t.Fatalf("after Flush(generic:gs): generic pending %d, rollout pending %d; want 1 and 0",
			merge.PendingOwn(e.generic), merge.PendingOwn(e.rollout))
	}
	if n := flush(""); n != 1 {
		t.Fatalf("Flush(all) sealed %d, want 1 (the rollout store)", n)
	}
	if n := flush(""); n != 0 {
		t.Fatalf("Flush(all) with nothing unsealed sealed %d", n)
	}
	if n := testutil.ToFloat64(e.merges.Flushes.WithLabelValues(mergesvc.ResultOK, "rollout")); n != 1 {
		t.Errorf("rollout flush successes %v, want 1", n)
	}
}

func TestInfoListsResidentStoresWithThisWorkersShard(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.generic, "g1")
	e.pending(t, e.generic, "g2")
	e.add(t, e.rollout, "r1")
	e.add(t, e.rollout, "r2")
	resp, err := e.client.Info(context.Background(), &tidemarkv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetInstanceId() != "w1" || resp.GetVersion() != "v-test" ||
		resp.GetGrpcAddr() != "grpc.example:9090" || resp.GetHttpAddr() != "http.example:8080" {
		t.Errorf("Info = %v", resp)
	}
	stores := resp.GetStores()
	if len(stores) != 2 || stores[0].GetTarget() != "generic:gs" || stores[1].GetTarget() != "gs" {
		t.Fatalf("stores = %v, want generic:gs then gs", stores)
	}
	g, r := stores[0], stores[1]
	if g.GetPendingGenerations() != 2 || g.GetMemtableRows() != 0 || g.GetWriterEpoch() == 0 {
		t.Errorf("generic:gs = %v, want 2 pending, 0 memtable rows, an epoch", g)
	}
	if r.GetPendingGenerations() != 0 || r.GetMemtableRows() != 2 || r.GetWriterEpoch() == 0 {
		t.Errorf("gs = %v, want 0 pending, 2 memtable rows, an epoch", r)
	}
}

func TestHealthServiceAnswersServingAndNotServingAfterShutdown(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	hc := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", tidemarkv1.WorkerService_ServiceDesc.ServiceName} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %s, want SERVING", svc, resp.GetStatus())
		}
	}
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	resp, err := e.svc.Health().Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after shutdown: %v, %v; want NOT_SERVING", resp, err)
	}
}

// grpcurl needs reflection to call the worker without the .proto files.
func TestReflectionListsTheServices(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"tidemark.v1.WorkerService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
	// The descriptors resolve too, which is what grpcurl describe/invoke need.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "tidemark.v1.WorkerService"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("no file descriptor for tidemark.v1.WorkerService: %v", resp.GetErrorResponse())
	}
}

// A merge in flight when shutdown starts is allowed to finish within the timeout.
func TestServeGRPCLetsAnInFlightMergeFinish(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{shutdownTimeout: time.Minute})
	e.pending(t, e.generic, "a")
	release, err := e.merger.AcquireSlot(context.Background()) // the merge waits for this slot
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp *tidemarkv1.MergeWalResponse
		err  error
	}
	done := make(chan result, 1)
	go func() { r, err := e.merge("generic:gs", 1); done <- result{r, err} }()
	<-e.entered

	stopped := make(chan error, 1)
	go func() { stopped <- e.stop() }()
	waitNotServing(t, e.svc)
	release()
	r := <-done
	if r.err != nil || r.resp.GetGenerations() != 1 {
		t.Fatalf("in-flight merge: %v, %v; want it to finish", r.resp, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
}

// A call still running after the shutdown timeout is cancelled, and ServeGRPC says so.
func TestServeGRPCCancelsCallsStillRunningAfterTheTimeout(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{shutdownTimeout: 200 * time.Millisecond})
	e.pending(t, e.generic, "a")
	release, err := e.merger.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	done := make(chan error, 1)
	go func() { _, err := e.merge("generic:gs", 1); done <- err }()
	<-e.entered
	if err := e.stop(); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("stop = %v, want an error saying calls were still running", err)
	}
	if err := <-done; err == nil {
		t.Fatal("the cut-off call succeeded")
	}
	if n := merge.PendingOwn(e.generic); n != 1 {
		t.Fatalf("%d pending, want the generation left for a later merge", n)
	}
}

func waitNotServing(t *testing.T, svc *WorkerService) {
	t.Helper()
	testwait.For(t, 30*time.Second, "health to turn NOT_SERVING", func() (bool, string) {
		resp, err := svc.Health().Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return false, err.Error()
		}
		return resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING, "health is " + resp.GetStatus().String()
	})
}

func TestGRPCErrorCodes(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("x: %w", store.ErrOverloaded), codes.ResourceExhausted},
		{fmt.Errorf("x: %w", merge.ErrBusy), codes.ResourceExhausted},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{fmt.Errorf("x: %w", wal.ErrFenced), codes.Aborted},
		{fmt.Errorf("x: %w", store.ErrDeleted), codes.NotFound},
		{fmt.Errorf("x: %w", wal.ErrCorrupt), codes.DataLoss},
		{fmt.Errorf("disk on fire"), codes.Internal},
		{fmt.Errorf("x: %w", wal.ErrClosed), codes.Aborted},
		{fmt.Errorf("get x/_wal/w2/gen/1.arrow: %w", objstore.ErrNotFound), codes.Aborted},
		{fmt.Errorf("table x: version 1 vanished: %w", table.ErrNotFound), codes.NotFound},
		{fmt.Errorf("x: %w", registry.ErrExists), codes.AlreadyExists},
		{fmt.Errorf("x: %w", objstore.ErrUnavailable), codes.ResourceExhausted},
		{fmt.Errorf("target a: %w", mergesvc.ErrStaleFencingToken), codes.FailedPrecondition},
		{fmt.Errorf("target a: %w", mergesvc.ErrInvalidFencingToken), codes.InvalidArgument},
	}
	for _, c := range cases {
		err := grpcError(c.err)
		if status.Code(err) != c.code || status.Convert(err).Message() != c.err.Error() {
			t.Errorf("grpcError(%v) = %v, want code %s with the error's text", c.err, err, c.code)
		}
	}
}

// A merge the master asked for, of a store another worker deleted meanwhile, trips
// over whatever the delete removed first (here: the generation it was merging). The
// master must hear NOT_FOUND, which skips the task, not INTERNAL, which failed it;
// and ABORTED (retry) while the name is registered again.
func TestMergeOfAStoreDeletedUnderItIsNotFound(t *testing.T) {
	bucket := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	e := newGRPCEnv(t, grpcEnvOptions{bucket: objstore.WithFaults(bucket, f)})
	e.pending(t, e.rollout, "a")
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyPrefix: "rollout/gs@", KeyContains: "/_wal/w1/gen/", Err: objstore.ErrNotFound})

	_, err := e.merge("gs", 1)
	wantCode(t, err, codes.Aborted, "/_wal/w1/gen/")
	if err := bucket.Delete(context.Background(), "_registry/rollout/gs.json"); err != nil {
		t.Fatal(err)
	}
	_, err = e.merge("gs", 2)
	wantCode(t, err, codes.NotFound, "store deleted")
}

// A corrupt object stops a merge with DATA_LOSS naming it: the master fails the task
// with that name and cools the target down instead of retrying it every sweep.
func TestMergeOverACorruptObjectIsDataLossNamingIt(t *testing.T) {
	bucket := objstoretest.Mem(t)
	e := newGRPCEnv(t, grpcEnvOptions{bucket: bucket})
	e.pending(t, e.generic, "a")
	objs, err := listContaining(bucket, "generic/gs@", "/_wal/w1/gen/")
	if err != nil || len(objs) != 1 {
		t.Fatalf("generations: %v, %v", objs, err)
	}
	if err := bucket.Put(context.Background(), objs[0].Key, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	_, err = e.merge("generic:gs", 1)
	wantCode(t, err, codes.DataLoss, objs[0].Key)
}

// listContaining lists the objects under prefix whose keys contain part.
func listContaining(b *objstore.Bucket, prefix, part string) ([]objstore.Object, error) {
	objs, err := b.List(context.Background(), prefix)
	var out []objstore.Object
	for _, o := range objs {
		if strings.Contains(o.Key, part) {
			out = append(out, o)
		}
	}
	return out, err
}

// Maintain is fenced like MergeWal, in its own lane: a stale master's compaction
// is refused before it touches the store, and the newest maintenance token of the
// target is the one a maintenance call must then beat, while merges, whose lock is
// another key, keep theirs. An unknown kind and a token of 0 are INVALID_ARGUMENT.
func TestMaintainIsFencedLikeMergesAndReportsItsWork(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	for _, id := range []string{"a", "b", "c"} {
		e.pending(t, e.generic, id)
		if _, err := e.merge("generic:gs", 5); err != nil {
			t.Fatal(err)
		}
	}
	maintain := func(kind string, token int64) (*tidemarkv1.MaintainResponse, error) {
		return e.client.Maintain(context.Background(), &tidemarkv1.MaintainRequest{Target: "generic:gs", Kind: kind, FencingToken: token})
	}
	if _, err := maintain("verify", 7); err != nil {
		t.Fatal(err)
	}
	_, err := maintain("compact", 4)
	wantCode(t, err, codes.FailedPrecondition, "4", "7")
	_, err = maintain("index_id", 8)
	wantCode(t, err, codes.InvalidArgument, "index_id")
	_, err = maintain("compact", 0)
	wantCode(t, err, codes.InvalidArgument, "fencing_token")

	resp, err := maintain("compact", 8)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCompactedFragments() != 3 || resp.GetWrittenFragments() != 1 || !strings.Contains(resp.GetSummary(), "compacted 3 fragments into 1") {
		t.Fatalf("compact answered %v", resp)
	}
	if resp.GetDeletedVersions()+resp.GetDeletedFiles() != resp.GetDeletedObjects() {
		t.Errorf("compact answered %d versions and %d files deleted, which are not its %d objects",
			resp.GetDeletedVersions(), resp.GetDeletedFiles(), resp.GetDeletedObjects())
	}
	if n := testutil.ToFloat64(e.metrics.Compactions.WithLabelValues("success")); n != 1 {
		t.Errorf("rollout_compaction_total{result=success} = %v, want 1", n)
	}
	if _, err := e.merge("generic:gs", 5); err != nil {
		t.Fatalf("a merge of token 5 after maintenance of token 8: %v, want it admitted (merges fence in their own lane)", err)
	}
	_, err = e.merge("generic:gs", 4)
	wantCode(t, err, codes.FailedPrecondition, "4", "5")
	if resp, err := maintain("verify", 8); err != nil || resp.GetCheckedObjects() == 0 || len(resp.GetProblems()) != 0 {
		t.Fatalf("verify answered %v, %v", resp, err)
	}
}

// The two-phase fan-out is gone from the worker: an old master still calling its
// methods hears UNIMPLEMENTED, and nothing is merged or staged.
func TestTheTwoPhaseMethodsAnswerUnimplementedAndMergeNothing(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.rollout, "a")
	ctx := context.Background()
	_, err := e.client.PrepareMerge(ctx, &tidemarkv1.PrepareMergeRequest{Target: "gs", FencingToken: 1})
	wantCode(t, err, codes.Unimplemented)
	_, err = e.client.CommitMerge(ctx, &tidemarkv1.CommitMergeRequest{Target: "gs", FencingToken: 1})
	wantCode(t, err, codes.Unimplemented)
	_, err = e.client.AbortMerge(ctx, &tidemarkv1.AbortMergeRequest{Target: "gs", FencingToken: 1})
	wantCode(t, err, codes.Unimplemented)
	if n := merge.PendingOwn(e.rollout); n != 1 {
		t.Fatalf("%d pending after the two-phase calls, want the 1 sealed", n)
	}
}
