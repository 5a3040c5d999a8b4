package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// DefaultDialTimeout is how long a worker may take to
// accept a connection before a call to it counts as unreachable.
const DefaultDialTimeout = 5 * time.Second

// GRPCCallerConfig configures a GRPCCaller.
type GRPCCallerConfig struct {
	// DialTimeout bounds how long a worker may take to accept a connection before
	// the call counts as unreachable (DefaultDialTimeout; the master passes
	// ETCD_DIAL_TIMEOUT, one bound on connecting to a peer).
	DialTimeout time.Duration
	// DialOptions are added to every connection (TLS credentials, interceptors).
	// Without transport credentials, connections are plaintext.
	DialOptions []grpc.DialOption
}

// GRPCCaller calls workers' WorkerService over gRPC, keeping one connection per
// address.
//
// "Before admission" is decided by the connection, not by the error code: the call
// is made only once the connection is READY; if it is not READY within DialTimeout
// the worker is unreachable (ErrUnreachable) and the fan-out may skip it. Once the
// call is sent, every error - Unavailable included, since a dropped connection may
// have dropped it after the worker started merging - stops the fan-out.
//
// A connection to a worker that left is closed (Retain), but never under a call in
// flight: a worker that stops cleanly deregisters first and then finishes the calls
// it admitted, so the last of those calls to return closes it.
type GRPCCaller struct {
	cfg   GRPCCallerConfig
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	// calls counts the calls in flight on each connection; retired holds the
	// connections Retain dropped from conns while calls were in flight.
	calls   map[*grpc.ClientConn]int
	retired map[*grpc.ClientConn]bool
}

// NewGRPCCaller returns a caller; Close releases its connections.
func NewGRPCCaller(cfg GRPCCallerConfig) *GRPCCaller {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	return &GRPCCaller{cfg: cfg, conns: map[string]*grpc.ClientConn{},
		calls: map[*grpc.ClientConn]int{}, retired: map[*grpc.ClientConn]bool{}}
}

func (c *GRPCCaller) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connLocked(addr)
}

// acquire is the connection to addr with one more call in flight on it; release
// ends that call.
func (c *GRPCCaller) acquire(addr string) (*grpc.ClientConn, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, err := c.connLocked(addr)
	if err != nil {
		return nil, nil, err
	}
	c.calls[cc]++
	release := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.calls[cc]--; c.calls[cc] > 0 {
			return
		}
		delete(c.calls, cc)
		if c.retired[cc] {
			delete(c.retired, cc)
			_ = cc.Close()
		}
	}
	return cc, release, nil
}

func (c *GRPCCaller) connLocked(addr string) (*grpc.ClientConn, error) {
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Workers refuse pings more often than every 10 s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}, c.cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// ready waits until cc is READY, up to the dial timeout.
func (c *GRPCCaller) ready(ctx context.Context, cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	cc.Connect()
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connection %s after %s", s, c.cfg.DialTimeout)
		}
	}
}

// client returns a WorkerService client of w once its connection is READY, and
// the release to call when the call is over; an error wrapping ErrUnreachable if
// it does not get there (the call was never made), or ctx's error.
func (c *GRPCCaller) client(ctx context.Context, w Worker) (tidemarkv1.WorkerServiceClient, func(), error) {
	cc, release, err := c.acquire(w.GRPCAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, w.GRPCAddr, err)
	}
	if err := c.ready(ctx, cc); err != nil {
		release()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, w.GRPCAddr, err)
	}
	return tidemarkv1.NewWorkerServiceClient(cc), release, nil
}

// MergeWal calls one worker's MergeWal.
func (c *GRPCCaller) MergeWal(ctx context.Context, w Worker, target registry.Target, fencingToken int64) (MergeResult, error) {
	client, release, err := c.client(ctx, w)
	if err != nil {
		return MergeResult{}, err
	}
	defer release()
	resp, err := client.MergeWal(ctx,
		&tidemarkv1.MergeWalRequest{Target: target.String(), FencingToken: fencingToken}, grpc.WaitForReady(false))
	if err != nil {
		return MergeResult{}, err
	}
	return mergeResult(resp), nil
}

func mergeResult(resp *tidemarkv1.MergeWalResponse) MergeResult {
	return MergeResult{Generations: resp.GetGenerations(), Rows: resp.GetRows(), Reclaimed: resp.GetReclaimed(), BaseVersion: resp.GetBaseVersion()}
}

// MergeStore has worker w merge every shard of target's store in one commit per
// pass (WorkerService.MergeStore); the result's Merged names the shards merged.
func (c *GRPCCaller) MergeStore(ctx context.Context, w Worker, target registry.Target, fencingToken int64) (MergeResult, error) {
	client, release, err := c.client(ctx, w)
	if err != nil {
		return MergeResult{}, err
	}
	defer release()
	resp, err := client.MergeStore(ctx,
		&tidemarkv1.MergeStoreRequest{Target: target.String(), FencingToken: fencingToken}, grpc.WaitForReady(false))
	if err != nil {
		return MergeResult{}, err
	}
	return MergeResult{Generations: resp.GetGenerations(), Rows: resp.GetRows(), Reclaimed: resp.GetReclaimed(),
		BaseVersion: resp.GetBaseVersion(), Merged: resp.GetMerged(), Level0: resp.GetLevel0Fragments()}, nil
}

// DrainMerged has worker w drain its shard of target up to the base watermark
// (WorkerService.DrainMerged); it returns the generations drained.
func (c *GRPCCaller) DrainMerged(ctx context.Context, w Worker, target registry.Target, fencingToken int64, baseVersion uint64) (int64, error) {
	client, release, err := c.client(ctx, w)
	if err != nil {
		return 0, err
	}
	defer release()
	resp, err := client.DrainMerged(ctx,
		&tidemarkv1.DrainMergedRequest{Target: target.String(), FencingToken: fencingToken, BaseVersion: baseVersion}, grpc.WaitForReady(false))
	if err != nil {
		return 0, err
	}
	return resp.GetReclaimed(), nil
}

// AdoptShard has worker w adopt shard of target (WorkerService.AdoptShard).
func (c *GRPCCaller) AdoptShard(ctx context.Context, w Worker, target registry.Target, shard string, fencingToken int64) (AdoptResult, error) {
	client, release, err := c.client(ctx, w)
	if err != nil {
		return AdoptResult{}, err
	}
	defer release()
	resp, err := client.AdoptShard(ctx,
		&tidemarkv1.AdoptShardRequest{Target: target.String(), Shard: shard, FencingToken: fencingToken}, grpc.WaitForReady(false))
	if err != nil {
		return AdoptResult{}, err
	}
	return AdoptResult{SealedRows: resp.GetSealedRows(), Generations: resp.GetGenerations(), Retired: resp.GetRetired()}, nil
}

// Retain closes the connections to addresses no worker of live has, each once its
// calls in flight returned: a worker that left (a pod renamed by a deploy) would
// otherwise keep a connection reconnecting to its dead address for the life of the
// master.
func (c *GRPCCaller) Retain(live []Worker) {
	keep := make(map[string]bool, len(live))
	for _, w := range live {
		keep[w.GRPCAddr] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, cc := range c.conns {
		if keep[addr] {
			continue
		}
		delete(c.conns, addr)
		if c.calls[cc] > 0 {
			c.retired[cc] = true
		} else {
			_ = cc.Close()
		}
	}
}

// Close closes every connection, with calls in flight or not.
func (c *GRPCCaller) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, addr)
	}
	for cc := range c.retired {
		_ = cc.Close()
		delete(c.retired, cc)
	}
	return nil
}

// Maintain has worker w run a maintenance task of target (WorkerService.Maintain).
func (c *GRPCCaller) Maintain(ctx context.Context, w Worker, kind tasks.Kind, target registry.Target, fencingToken int64) (MaintainResult, error) {
	client, release, err := c.client(ctx, w)
	if err != nil {
		return MaintainResult{}, err
	}
	defer release()
	resp, err := client.Maintain(ctx,
		&tidemarkv1.MaintainRequest{Target: target.String(), Kind: string(kind), FencingToken: fencingToken}, grpc.WaitForReady(false))
	if err != nil {
		return MaintainResult{}, err
	}
	return MaintainResult{Summary: resp.GetSummary(), Stats: maintainStats(resp), Problems: resp.GetProblems()}, nil
}

// maintainStats are the counts of a worker's maintenance answer.
func maintainStats(resp *tidemarkv1.MaintainResponse) tasks.Stats {
	files := resp.GetDeletedFiles()
	if files+resp.GetDeletedVersions() == 0 {
		files = resp.GetDeletedObjects() // a worker older than the split says only the sum
	}
	return tasks.Stats{
		FragmentsCompacted: resp.GetCompactedFragments(),
		FragmentsWritten:   resp.GetWrittenFragments(),
		RowsRewritten:      resp.GetRewrittenRows(),
		DeletedRowsDropped: resp.GetDroppedDeletedRows(),
		VersionsDeleted:    resp.GetDeletedVersions(),
		FilesDeleted:       files,
		BytesReclaimed:     resp.GetDeletedBytes(),
		ObjectsChecked:     resp.GetCheckedObjects(),
		ProblemsFound:      int64(len(resp.GetProblems())),
		FragmentsDropped:   resp.GetDroppedFragments(),
		RowsDropped:        resp.GetDroppedRows(),
		BaseVersion:        resp.GetBaseVersion(),
	}
}

// errExportStreamEnded is an export stream that ended without its last message:
// the worker's answer was cut off, so the export may not be complete.
var errExportStreamEnded = errclass.New(errclass.Unavailable, "the export stream ended without the export's result")

// Export has worker w run an export (WorkerService.Export), calling progress with
// each report it streams.
func (c *GRPCCaller) Export(ctx context.Context, w Worker, call ExportCall, progress func(tasks.Progress)) (tasks.ExportResult, tasks.Progress, error) {
	client, release, err := c.client(ctx, w)
	if err != nil {
		return tasks.ExportResult{}, tasks.Progress{}, err
	}
	defer release()
	// The stream ends with the call: cancel it on every return, or its goroutine
	// and the worker's export would outlive a failed Recv.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Export(ctx, &tidemarkv1.ExportRequest{Target: call.Target.String(), FencingToken: call.FencingToken,
		TaskId: call.TaskID, Spec: ExportSpecProto(call.Spec)}, grpc.WaitForReady(false))
	if err != nil {
		return tasks.ExportResult{}, tasks.Progress{}, err
	}
	var last tasks.Progress
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return tasks.ExportResult{}, last, fmt.Errorf("%s: %w", w.InstanceID, errExportStreamEnded)
		}
		if err != nil {
			return tasks.ExportResult{}, last, err
		}
		last = tasks.Progress{Rows: msg.GetRows(), Files: msg.GetFiles(), Bytes: msg.GetBytes(), Estimate: msg.GetEstimate(),
			Worker: cmp.Or(msg.GetInstanceId(), w.InstanceID)}
		if msg.GetDone() {
			return tasks.ExportResult{Manifest: msg.GetManifest(), Version: msg.GetVersion(), Rows: msg.GetRows(),
				Files: msg.GetFiles(), Bytes: msg.GetBytes(), FeedCursor: msg.GetFeedCursor()}, last, nil
		}
		progress(last)
	}
}
