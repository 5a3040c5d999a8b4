package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// testToken is the bearer token the tests' guarded services accept.
const testToken = "master-test-token-0123456789"

// adminEnv is an AdminService over a real embedded etcd and a memory bucket
// holding a rollout store "r1" and a generic store "g1", served over gRPC on a
// loopback port.
type adminEnv struct {
	ctx     context.Context
	etcd    *clientv3.Client
	ts      *tasks.Queue
	bucket  *objstore.Bucket
	scanner *scanner.Scanner
	svc     *AdminService
	client  tidemarkv1.AdminServiceClient
	conn    *grpc.ClientConn
	lease   clientv3.LeaseID
	wakes   atomic.Int32
	// orphans is the service's tracker, on clock (fanout.DefaultOrphanGrace).
	orphans *fanout.Orphans
	clock   *clocktesting.FakePassiveClock
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// createStores registers rollout store r1 and generic store g1 in b.
func createStores(t *testing.T, b *objstore.Bucket) { storetest.Create(t, b, "r1", "generic:g1") }

// newAdminEnv serves the AdminService with opts added to the gRPC server's
// options; d nil is discovery through etcd under /admin.
func newAdminEnv(t *testing.T, d fanout.Discovery, opts ...grpc.ServerOption) *adminEnv {
	t.Helper()
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	log := testLogger(t)
	b := objstoretest.Mem(t)
	createStores(t, b)
	grant, err := client.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	e := &adminEnv{ctx: ctx, etcd: client, bucket: b, lease: grant.ID}
	e.ts = tasks.New(client, "/admin", tasks.WithLogger(log))
	e.scanner = scanner.New(client, e.ts, b, scanner.StaticLease(grant.ID), scanner.Config{Logger: log})
	if d == nil {
		d = &membership.Discovery{Client: client, Prefix: "/admin"}
	}
	e.clock = clocktesting.NewFakePassiveClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	e.orphans = fanout.NewOrphans(d, fanout.DefaultOrphanGrace, e.clock, prometheus.NewRegistry())
	e.svc, err = NewAdminService(AdminConfig{Tasks: e.ts, Scanner: e.scanner, Registry: registry.New(b),
		Discovery: d, Wake: func() { e.wakes.Add(1) }, Logger: log, Orphans: e.orphans})
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(e.svc, health.NewServer(), log, opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	e.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.conn.Close() })
	e.client = tidemarkv1.NewAdminServiceClient(e.conn)
	return e
}

// wantCode fails unless err is a status with code and a message containing every
// one of parts.
func wantCode(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	st := status.Convert(err)
	if err == nil || st.Code() != code {
		t.Errorf("%s: got %v, want %s", what, err, code)
		return
	}
	for _, p := range parts {
		if !strings.Contains(st.Message(), p) {
			t.Errorf("%s: message %q does not name %q", what, st.Message(), p)
		}
	}
}

func TestAdminRefusesBadInputWithACodeNamingTheProblem(t *testing.T) {
	e := newAdminEnv(t, nil)
	c, ctx := e.client, e.ctx
	missing := uuid.Must(uuid.NewV7()).String()

	_, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "defrag", Target: "r1"})
	wantCode(t, "unknown kind", err, codes.InvalidArgument, `"defrag"`, "merge_wal")
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "merge_wal", Target: "generic:"})
	wantCode(t, "generic: with no name", err, codes.InvalidArgument, `"generic:"`, "empty")
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "compact", Target: "a/b"})
	wantCode(t, "a/b", err, codes.InvalidArgument, `"a/b"`, `'/'`)
	_, err = c.RequeueMerge(ctx, &tidemarkv1.RequeueMergeRequest{Target: "generic:../x"})
	wantCode(t, "generic:../x", err, codes.InvalidArgument, `"generic:../x"`)
	_, err = c.RequeueMerge(ctx, &tidemarkv1.RequeueMergeRequest{})
	wantCode(t, "no target", err, codes.InvalidArgument, "target is required")
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "merge_wal", Target: "r1", DependsOn: []string{"nope"}})
	wantCode(t, "malformed dependency", err, codes.InvalidArgument, `"nope"`)

	_, err = c.RequeueMerge(ctx, &tidemarkv1.RequeueMergeRequest{Target: "nope"})
	wantCode(t, "unregistered rollout store", err, codes.NotFound, `"nope"`)
	// r1 is a rollout store: the generic store of that name does not exist.
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "merge_wal", Target: "generic:r1"})
	wantCode(t, "unregistered generic store", err, codes.NotFound, `"generic:r1"`)
	_, err = c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "merge_wal", Target: "r1", DependsOn: []string{missing}})
	wantCode(t, "missing dependency", err, codes.NotFound, missing)

	_, err = c.GetTask(ctx, &tidemarkv1.GetTaskRequest{Id: "../x"})
	wantCode(t, "malformed id", err, codes.InvalidArgument, `"../x"`)
	_, err = c.GetTask(ctx, &tidemarkv1.GetTaskRequest{Id: missing})
	wantCode(t, "missing task", err, codes.NotFound, missing)
	_, err = c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: missing})
	wantCode(t, "cancel missing task", err, codes.NotFound, missing)

	_, err = c.ListTasks(ctx, &tidemarkv1.ListTasksRequest{State: "paused"})
	wantCode(t, "unknown state", err, codes.InvalidArgument, `"paused"`)
	_, err = c.ListTasks(ctx, &tidemarkv1.ListTasksRequest{Kind: "defrag"})
	wantCode(t, "unknown kind filter", err, codes.InvalidArgument, `"defrag"`)
	_, err = c.ListTasks(ctx, &tidemarkv1.ListTasksRequest{Target: "a/b"})
	wantCode(t, "malformed target filter", err, codes.InvalidArgument, `"a/b"`)
	_, err = c.ListTasks(ctx, &tidemarkv1.ListTasksRequest{PageSize: -1})
	wantCode(t, "negative page size", err, codes.InvalidArgument, "-1")
	_, err = c.ListTasks(ctx, &tidemarkv1.ListTasksRequest{PageToken: "zz"})
	wantCode(t, "malformed task page token", err, codes.InvalidArgument, `"zz"`)
	_, err = c.ListStats(ctx, &tidemarkv1.ListStatsRequest{PageToken: "a/b"})
	wantCode(t, "malformed stats page token", err, codes.InvalidArgument, `"a/b"`)

	_, err = c.Rescan(ctx, &tidemarkv1.RescanRequest{Target: "a/b"})
	wantCode(t, "rescan malformed target", err, codes.InvalidArgument, `"a/b"`)
	_, err = c.Rescan(ctx, &tidemarkv1.RescanRequest{Target: "generic:nope"})
	wantCode(t, "rescan unregistered target", err, codes.NotFound, `"nope"`)

	if n := e.wakes.Load(); n != 0 {
		t.Errorf("refused enqueues woke the scheduler %d times", n)
	}
}

func TestCancelOnlyQueuedTasks(t *testing.T) {
	e := newAdminEnv(t, nil)
	c, ctx := e.client, e.ctx
	enq, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "merge_wal", Target: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := e.ts.Claim(ctx, e.lease, tasks.ClaimFilter{})
	if err != nil || claim.Task.ID != enq.Task.Id {
		t.Fatalf("claim: %v, %v", claim, err)
	}
	_, err = c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: enq.Task.Id})
	wantCode(t, "cancel running", err, codes.FailedPrecondition, enq.Task.Id, "running")
	if _, err := e.ts.Finish(ctx, claim, tasks.Result{Report: tasks.Report{Detail: "merged 0 generations across 0/0 workers"}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: enq.Task.Id})
	wantCode(t, "cancel done", err, codes.FailedPrecondition, "done")

	queued, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "compact", Target: "generic:g1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: queued.Task.Id})
	if err != nil {
		t.Fatal(err)
	}
	if got.Task.State != "failed" || got.Task.Error != "cancelled" || got.Task.FinishedAt == nil {
		t.Fatalf("cancelled task = %v", got.Task)
	}
	_, err = c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: queued.Task.Id})
	wantCode(t, "cancel twice", err, codes.FailedPrecondition, "failed")
}

func TestRequeueMergeTwiceReturnsTheLiveTaskDeduplicated(t *testing.T) {
	e := newAdminEnv(t, nil)
	first, err := e.client.RequeueMerge(e.ctx, &tidemarkv1.RequeueMergeRequest{Target: "generic:g1"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Deduplicated || first.Task.Kind != "merge_wal" || first.Task.Target != "generic:g1" || first.Task.State != "queued" {
		t.Fatalf("first requeue = %v", first)
	}
	second, err := e.client.RequeueMerge(e.ctx, &tidemarkv1.RequeueMergeRequest{Target: "generic:g1"})
	if err != nil {
		t.Fatal(err)
	}
	if !second.Deduplicated || second.Task.Id != first.Task.Id {
		t.Fatalf("second requeue = %v, want task %s deduplicated", second, first.Task.Id)
	}
	// The same through EnqueueTask.
	third, err := e.client.EnqueueTask(e.ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "merge_wal", Target: "generic:g1"})
	if err != nil || !third.Deduplicated || third.Task.Id != first.Task.Id {
		t.Fatalf("enqueue after requeue = %v, %v", third, err)
	}
	if n := e.wakes.Load(); n < 1 {
		t.Errorf("the scheduler was never woken")
	}
	list, err := e.client.ListTasks(e.ctx, &tidemarkv1.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 {
		t.Fatalf("tasks = %v, %v; want only one", list, err)
	}
}

func TestListTasksFiltersAndPages(t *testing.T) {
	e := newAdminEnv(t, nil)
	c, ctx := e.client, e.ctx
	var ids []string
	for _, req := range []*tidemarkv1.EnqueueTaskRequest{
		{Kind: "merge_wal", Target: "r1"},
		{Kind: "compact", Target: "r1"},
		{Kind: "merge_wal", Target: "generic:g1"},
		{Kind: "verify", Target: "generic:g1"},
		{Kind: "compact", Target: "generic:g1"},
	} {
		resp, err := c.EnqueueTask(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.Task.Id)
	}
	if _, err := c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: ids[4]}); err != nil {
		t.Fatal(err)
	}
	idsOf := func(req *tidemarkv1.ListTasksRequest) []string {
		t.Helper()
		resp, err := c.ListTasks(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, task := range resp.Tasks {
			out = append(out, task.Id)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		req  *tidemarkv1.ListTasksRequest
		want []string
	}{
		{"all", &tidemarkv1.ListTasksRequest{}, ids},
		{"queued", &tidemarkv1.ListTasksRequest{State: "queued"}, ids[:4]},
		{"failed", &tidemarkv1.ListTasksRequest{State: "failed"}, ids[4:]},
		{"merge_wal", &tidemarkv1.ListTasksRequest{Kind: "merge_wal"}, []string{ids[0], ids[2]}},
		{"generic:g1", &tidemarkv1.ListTasksRequest{Target: "generic:g1"}, ids[2:]},
		{"queued compact of r1", &tidemarkv1.ListTasksRequest{State: "queued", Kind: "compact", Target: "r1"}, ids[1:2]},
		{"none running", &tidemarkv1.ListTasksRequest{State: "running"}, nil},
	} {
		if got := idsOf(tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}

	// Pages of 2 cover every task once, in enqueue order, and newest first in
	// reverse.
	for _, newest := range []bool{false, true} {
		var all []string
		token := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("paging does not end")
			}
			resp, err := c.ListTasks(ctx, &tidemarkv1.ListTasksRequest{PageSize: 2, PageToken: token, NewestFirst: newest})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Tasks) > 2 {
				t.Fatalf("page of %d tasks, want at most 2", len(resp.Tasks))
			}
			for _, task := range resp.Tasks {
				all = append(all, task.Id)
			}
			if token = resp.NextPageToken; token == "" {
				break
			}
		}
		want := slices.Clone(ids)
		if newest {
			slices.Reverse(want)
		}
		if !slices.Equal(all, want) {
			t.Errorf("newest_first=%v: pages give %v, want %v", newest, all, want)
		}
	}
}

func TestRescanAndListStats(t *testing.T) {
	e := newAdminEnv(t, nil)
	c, ctx := e.client, e.ctx
	one, err := c.Rescan(ctx, &tidemarkv1.RescanRequest{Target: "generic:g1"})
	if err != nil {
		t.Fatal(err)
	}
	if one.Observed != 1 || one.Written != 1 || one.Stats.GetTarget() != "generic:g1" || one.Stats.ScannedAt == nil {
		t.Fatalf("first rescan of generic:g1 = %v", one)
	}
	again, err := c.Rescan(ctx, &tidemarkv1.RescanRequest{Target: "generic:g1"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Written != 0 {
		t.Errorf("rescan of an unchanged store wrote its row: %v", again)
	}
	all, err := c.Rescan(ctx, &tidemarkv1.RescanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if all.Observed != 2 || all.Written != 1 { // r1 is new, g1 unchanged
		t.Errorf("rescan of every store = %v, want 2 observed, 1 written", all)
	}
	first, err := c.ListStats(ctx, &tidemarkv1.ListStatsRequest{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Stats) != 1 || first.Stats[0].Target != "generic:g1" || first.NextPageToken == "" {
		t.Fatalf("first stats page = %v", first)
	}
	rest, err := c.ListStats(ctx, &tidemarkv1.ListStatsRequest{PageSize: 10, PageToken: first.NextPageToken})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Stats) != 1 || rest.Stats[0].Target != "r1" || rest.NextPageToken != "" {
		t.Fatalf("second stats page = %v", rest)
	}
}

func TestListWorkersNamesTheirSource(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		e := newAdminEnv(t, nil)
		rec, _ := json.Marshal(map[string]any{"instance_id": "w1", "grpc_addr": "10.0.0.1:9090",
			"http_addr": "10.0.0.1:8080", "started_at": "2025-01-02T03:04:05Z", "version": "v1"})
		if _, err := e.etcd.Put(e.ctx, "/admin/workers/w1", string(rec)); err != nil {
			t.Fatal(err)
		}
		resp, err := e.client.ListWorkers(e.ctx, &tidemarkv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Workers) != 1 {
			t.Fatalf("workers = %v", resp.Workers)
		}
		w := resp.Workers[0]
		if w.InstanceId != "w1" || w.GrpcAddr != "10.0.0.1:9090" || w.Source != "etcd" || w.Version != "v1" ||
			w.StartedAt.AsTime().Year() != 2025 {
			t.Errorf("worker = %v", w)
		}
	})
	t.Run("static", func(t *testing.T) {
		d, err := fanout.ParseEndpoints("a=127.0.0.1:1,127.0.0.1:2")
		if err != nil {
			t.Fatal(err)
		}
		e := newAdminEnv(t, d)
		resp, err := e.client.ListWorkers(e.ctx, &tidemarkv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Workers) != 2 || resp.Workers[0].InstanceId != "a" || resp.Workers[1].GrpcAddr != "127.0.0.1:2" ||
			resp.Workers[0].Source != "static" {
			t.Errorf("workers = %v", resp.Workers)
		}
	})
}

func TestAdminServerAnswersHealthAndReflection(t *testing.T) {
	e := newAdminEnv(t, nil)
	resp, err := healthpb.NewHealthClient(e.conn).Check(e.ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", resp, err)
	}
	// What grpcurl does first: list the services through reflection.
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{AdminServiceName, "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

// The admin service answers by class (package errclass), as the worker does; the
// codes it gave before are kept.
func TestAdminCodesFollowTheErrorClass(t *testing.T) {
	live := context.Background()
	for _, c := range []struct {
		err  error
		code codes.Code
		msg  string // a part of the message
	}{
		{fmt.Errorf("x: %w", tasks.ErrInvalidArgument), codes.InvalidArgument, "invalid argument"},
		{fmt.Errorf(`target "s": %w`, registry.ErrNotFound), codes.NotFound, `"s"`},
		{fmt.Errorf("x: %w", stats.ErrRowNotFound), codes.NotFound, "stats row"},
		{fmt.Errorf("x: %w", tasks.ErrNotCancellable), codes.FailedPrecondition, "not queued"},
		{fmt.Errorf("list: %w", context.DeadlineExceeded), codes.Unavailable, "timed out"},
		{fmt.Errorf("get: %w", objstore.ErrThrottled), codes.Unavailable, "throttled"},
		{fmt.Errorf("get: %w", objstore.ErrUnavailable), codes.Unavailable, "object store unavailable"},
		{fmt.Errorf("claim: %w", rpctypes.ErrNoLeader), codes.Unavailable, "etcd unavailable"},
		{fmt.Errorf("registry object _registry/rollout/s.json: %w: bad json", registry.ErrCorrupt), codes.DataLoss, "_registry/rollout/s.json"},
		{errors.New("disk on fire"), codes.Internal, "disk on fire"},
	} {
		code, msg := classify(live, c.err)
		if code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("classify(%v) = %s %q, want %s mentioning %q", c.err, code, msg, c.code, c.msg)
		}
	}
	gone, cancel := context.WithCancel(live)
	cancel()
	if code, _ := classify(gone, fmt.Errorf("get: %w", context.Canceled)); code != codes.Canceled {
		t.Errorf("a call the client cancelled: %s, want Canceled", code)
	}
}
