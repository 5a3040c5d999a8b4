package worker

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/tidemark-io/tidemark/pkg/membership"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Process is the parts of one worker process, built by the caller (cmd/worker wires
// them from flags) and run by Run.
type Process struct {
	// HTTP serves the data API on HTTPListener; GRPC serves Service on GRPCListener.
	HTTP         *Server
	HTTPListener net.Listener
	GRPC         *grpc.Server
	GRPCListener net.Listener
	Service      *WorkerService
	// Sweeper seals and merges on timers.
	Sweeper *Sweeper
	// Registration keeps the worker listed in etcd; nil: not registered (the master
	// then calls it through WORKER_ENDPOINTS).
	Registration *membership.Registration
	// Stores are sealed and closed on the way out.
	Stores *store.Stores
	// ShutdownTimeout bounds the gRPC server's graceful stop and the final seal
	// (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
}

// Run serves until ctx is done or a server fails, then stops in the order that loses
// nothing and strands nothing:
//
//  1. deregister (revoke the lease), so the master stops calling this worker;
//  2. stop both servers gracefully: accepted requests and merges finish, new ones
//     are refused;
//  3. abort the merges prepared and not committed, and stop the sweepers;
//  4. seal every open store, so rows acknowledged here (durable in WAL entries
//     already) are visible to every worker without waiting for this one to return.
//
// A server that fails starts the same shutdown; its error is returned.
func (p *Process) Run(ctx context.Context) error {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := p.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	sweepCtx, stopSweeps := context.WithCancel(context.WithoutCancel(ctx))
	var sweeps sync.WaitGroup
	sweeps.Go(func() { p.Sweeper.Run(sweepCtx) })
	sweeps.Go(func() {
		// Rows acknowledged before a crash and never sealed are durable but read by
		// no one until sealed; do not wait for a write to the store to find them.
		stores, rows, err := p.Stores.SealLeftovers(sweepCtx)
		if err != nil && sweepCtx.Err() == nil {
			log.Warn("sealing rows left unsealed by an earlier run failed for some stores; their next write or merge seals them", "err", err)
		}
		if stores > 0 {
			log.Info("sealed rows an earlier run acknowledged and left unsealed", "stores", stores, "rows", rows)
		}
	})

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	registered := make(chan struct{})
	if p.Registration != nil {
		go func() { defer close(registered); _ = p.Registration.Run(runCtx) }()
	} else {
		close(registered)
	}
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		<-runCtx.Done()
		<-registered // lease revoked (or given up on)
		stopServing()
	}()
	var servers errgroup.Group
	servers.Go(func() error {
		err := p.HTTP.Serve(serveCtx, p.HTTPListener) // returns after in-flight requests finished
		stopRun()
		return err
	})
	servers.Go(func() error {
		err := ServeGRPC(serveCtx, p.GRPC, p.GRPCListener, GRPCServeOptions{
			ShutdownTimeout: timeout, Health: p.Service.Health(), Logger: log,
		})
		stopRun()
		return err
	})
	serveErr := servers.Wait()
	<-registered
	// Prepared merges no master can commit any more: delete what they staged now
	// rather than leaving it for garbage collection.
	p.Service.AbortPrepared()
	stopSweeps()
	sweeps.Wait()
	sealCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := p.Stores.Close(sealCtx); err != nil {
		log.Warn("sealing stores at shutdown", "err", err)
	}
	return serveErr
}
