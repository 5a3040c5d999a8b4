package devcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
)

// Defaults of `master dev`.
const (
	DefaultDir             = "./data"
	DefaultWorkers         = 3
	DefaultEtcdAddr        = "127.0.0.1:2379"
	DefaultMasterGRPCAddr  = "127.0.0.1:7070"
	DefaultMasterHTTPAddr  = "127.0.0.1:7080"
	DefaultWorkerHTTPPort  = 8081
	DefaultWorkerGRPCPort  = 9091
	DefaultStartTimeout    = time.Minute
	DefaultShutdownTimeout = 45 * time.Second
)

// TokenFileName is the dev token's file in the data directory.
const TokenFileName = "auth-token"

// DemoStore is the rollout store the cluster creates (through w1) when it first
// starts with workers, so the printed example commands work as they are.
const DemoStore = "demo"

// WorkerDefaults are the dev defaults of every worker, applied unless the
// environment sets the variable: seal every 5 s so generations appear quickly (the
// master drives merges).
var WorkerDefaults = []string{
	"FLUSH_INTERVAL=5s",
}

// MasterDefaults are the dev defaults of the master, applied unless the
// environment sets the variable: scan and sweep every 5 s, and merge a store as
// soon as it has 2 pending generations, so merges are visible within seconds.
var MasterDefaults = []string{
	"STATS_SCAN_INTERVAL=5s",
	"MERGE_WAL_INTERVAL=5s",
	"MERGE_WAL_MIN_GENERATIONS=2",
}

// Config is a dev cluster.
type Config struct {
	// Dir is the data directory (etcd/, store/, logs/), created if missing.
	Dir string
	// DataURL is the object storage every child keeps its stores in (DATA_URL):
	// a bucket of the user's (s3://, gs://, azblob://, with its credentials in
	// Environ). Empty: file://<Dir>/store, and Dir holds everything.
	DataURL string
	// Workers is how many workers to run (w1..wN); 0 runs none.
	Workers int
	// NoMaster runs no master (start one yourself, e.g. under a debugger).
	NoMaster bool
	// NoAuth runs every child with AUTH_DISABLED=true and makes no token: for a
	// developer who asked for it, never the default.
	NoAuth bool
	// MasterBinary runs `serve` as the master; WorkerBinary runs `serve` as each
	// worker. Each is required when it is used.
	MasterBinary, WorkerBinary string
	// MasterCommand and WorkerCommand are how the printed example commands name
	// the binaries (e.g. "bin/master"); the binary paths when empty.
	MasterCommand, WorkerCommand string

	// EtcdAddr is the embedded etcd's client host:port (port 0: kernel-chosen).
	EtcdAddr string
	// EtcdPrefix is ETCD_PREFIX of every child (keys.DefaultPrefix when empty).
	EtcdPrefix string
	// EtcdUnsafeNoFsync runs etcd without fsync.
	EtcdUnsafeNoFsync bool
	// MasterGRPCAddr and MasterHTTPAddr are the master's listeners (port 0: a free
	// port is picked).
	MasterGRPCAddr, MasterHTTPAddr string
	// WorkerHTTPPort and WorkerGRPCPort are w1's ports on 127.0.0.1; wI listens on
	// port+I-1. 0 lets the kernel choose each worker's ports.
	WorkerHTTPPort, WorkerGRPCPort int

	// Environ is the environment the children start from (os.Environ() in the
	// binary): it overrides the dev defaults, not what the cluster sets itself.
	Environ []string
	// StartTimeout bounds the wait for every process to be ready;
	// ShutdownTimeout how long each child may take to stop after SIGTERM.
	StartTimeout, ShutdownTimeout time.Duration

	// Console gets the banner, finished tasks and the children's log lines at or
	// above EchoLevel (every line goes to logs/<name>.log). Required.
	Console   *Console
	EchoLevel slog.Level
	// OnReady, if set, is called once with the endpoints when everything is up.
	OnReady func(Endpoints)
}

// Endpoints are where a running cluster listens.
type Endpoints struct {
	Dir     string // absolute data directory
	DataURL string
	Etcd    string // client URL
	Prefix  string
	// MasterGRPC and MasterHTTP are host:port, empty without a master.
	MasterGRPC, MasterHTTP string
	Workers                []membership.Worker
	// TokenFile is the dev cluster's bearer token (<dir>/auth-token, 0600): every
	// child accepts it (AUTH_TOKEN_FILE), and `master admin` and curl send it.
	TokenFile string
	// Token is the token in TokenFile: the banner prints it for the dashboard's
	// login form.
	Token string
}

// Run runs the cluster until ctx is done (then shuts it down in order and
// returns nil if everything stopped cleanly) or until a process fails (then
// shuts down the rest and returns an error naming it).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	c := &cluster{cfg: cfg, console: cfg.Console}
	return c.run(ctx)
}

func (cfg *Config) check() error {
	if cfg.Console == nil {
		return errors.New("devcluster: Console is required")
	}
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if cfg.DataURL != "" {
		// Caught here, not as every child's start-up failure: a path given where a
		// URL belongs (./data/store) would otherwise read as "missing scheme" in
		// each child's log.
		u, err := url.Parse(cfg.DataURL)
		if err != nil {
			return fmt.Errorf("data URL: %w", err)
		}
		if u.Scheme == "" {
			return fmt.Errorf("data URL %q has no scheme: want a bucket URL such as s3://bucket?region=..., gs://bucket, azblob://container or file:///dir", cfg.DataURL)
		}
	}
	if cfg.Workers < 0 {
		return fmt.Errorf("workers must not be negative, got %d", cfg.Workers)
	}
	if cfg.Workers > 0 && cfg.WorkerBinary == "" {
		return errors.New("devcluster: WorkerBinary is required to run workers")
	}
	if !cfg.NoMaster && cfg.MasterBinary == "" {
		return errors.New("devcluster: MasterBinary is required to run the master")
	}
	for _, p := range []*int{&cfg.WorkerHTTPPort, &cfg.WorkerGRPCPort} {
		if *p < 0 || *p+cfg.Workers-1 > 65535 {
			return fmt.Errorf("worker ports %d..%d are out of range", *p, *p+cfg.Workers-1)
		}
	}
	if cfg.EtcdAddr == "" {
		cfg.EtcdAddr = DefaultEtcdAddr
	}
	cfg.EtcdPrefix = keys.NormalizePrefix(cfg.EtcdPrefix)
	if cfg.MasterGRPCAddr == "" {
		cfg.MasterGRPCAddr = DefaultMasterGRPCAddr
	}
	if cfg.MasterHTTPAddr == "" {
		cfg.MasterHTTPAddr = DefaultMasterHTTPAddr
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.MasterCommand == "" {
		cfg.MasterCommand = cfg.MasterBinary
	}
	if cfg.WorkerCommand == "" {
		cfg.WorkerCommand = cfg.WorkerBinary
	}
	return nil
}

type cluster struct {
	cfg     Config
	console *Console
	ep      Endpoints

	etcd    *Etcd
	client  *clientv3.Client
	master  *Process
	workers []*Process
}

func (c *cluster) run(ctx context.Context) (err error) {
	cfg := c.cfg
	if err := c.preflight(); err != nil {
		return err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return fmt.Errorf("data directory %s: %w", cfg.Dir, err)
	}
	logs := filepath.Join(dir, "logs")
	dirs := []string{filepath.Join(dir, "etcd"), logs}
	c.ep = Endpoints{Dir: dir, DataURL: cfg.DataURL, Prefix: cfg.EtcdPrefix}
	if c.ep.DataURL == "" {
		store := filepath.Join(dir, "store")
		dirs = append(dirs, store)
		c.ep.DataURL = "file://" + filepath.ToSlash(store)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	// The children refuse to serve without a credential: the dev cluster has its
	// own token, made once and reused, so printed commands keep working.
	if !cfg.NoAuth {
		c.ep.TokenFile = filepath.Join(dir, TokenFileName)
		if _, err := auth.EnsureTokenFile(c.ep.TokenFile); err != nil {
			return err
		}
		tokens, err := auth.LoadTokenFile("dev token", c.ep.TokenFile)
		if err != nil {
			return fmt.Errorf("%w (delete it and run again: a new token is made)", err)
		}
		c.ep.Token = tokens.Outgoing()
	}

	c.etcd, err = StartEtcd(EtcdConfig{
		Dir: filepath.Join(dir, "etcd"), ClientAddr: cfg.EtcdAddr,
		LogPath: filepath.Join(logs, "etcd.log"), UnsafeNoFsync: cfg.EtcdUnsafeNoFsync,
	})
	if err != nil {
		return err
	}
	c.ep.Etcd = c.etcd.Endpoint()
	c.client, err = clientv3.New(clientv3.Config{Endpoints: []string{c.ep.Etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.etcd.Close()
		return fmt.Errorf("etcd client of %s: %w", c.ep.Etcd, err)
	}
	// From here on every exit goes through the ordered shutdown.
	defer func() {
		if stopErr := c.shutdown(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()

	started := time.Now()
	if err := c.startChildren(logs); err != nil {
		return err
	}
	if err := c.awaitReady(ctx, started); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting: a clean stop
		}
		return err
	}
	if len(c.ep.Workers) > 0 {
		if err := createDemoStore(ctx, c.ep.Workers[0].HTTPAddr, c.ep.TokenFile); err != nil {
			c.console.Line("dev", fmt.Sprintf("could not create the rollout store %q: %v", DemoStore, err))
		}
	}
	c.console.Printf("%s", Banner(c.ep, c.cfg))
	if cfg.OnReady != nil {
		cfg.OnReady(c.ep)
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchTasks(watchCtx, c.client, c.ep.Prefix, c.console)

	exited := make(chan *Process, 1+len(c.workers))
	for _, p := range c.children() {
		go func() {
			<-p.Done()
			exited <- p
		}()
	}
	select {
	case <-ctx.Done():
		c.console.Line("dev", "shutting down: master, then workers, then etcd")
		return nil
	case p := <-exited:
		return fmt.Errorf("%s exited on its own (%v); stopping the cluster (log %s)", p.Name(), exitText(p.Err()), p.LogPath())
	case err := <-c.etcd.Err():
		return fmt.Errorf("embedded etcd failed: %w", err)
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (c *cluster) children() []*Process {
	var out []*Process
	if c.master != nil {
		out = append(out, c.master)
	}
	return append(out, c.workers...)
}

// startChildren starts the master and the workers.
func (c *cluster) startChildren(logs string) error {
	cfg := c.cfg
	filter := LineFilter{Level: cfg.EchoLevel}
	common := []string{
		"ETCD_ENDPOINTS=" + c.ep.Etcd,
		"ETCD_PREFIX=" + c.ep.Prefix,
		"DATA_URL=" + c.ep.DataURL,
		"AUTH_TOKEN_FILE=" + c.ep.TokenFile,
		"AUTH_TOKEN=", // the file is the one source: an AUTH_TOKEN in the environment would conflict
		"AUTH_DISABLED=" + strconv.FormatBool(cfg.NoAuth),
	}
	if !cfg.NoMaster {
		grpcAddr, err := pickPort(cfg.MasterGRPCAddr)
		if err != nil {
			return fmt.Errorf("master gRPC address: %w", err)
		}
		httpAddr, err := pickPort(cfg.MasterHTTPAddr)
		if err != nil {
			return fmt.Errorf("master HTTP address: %w", err)
		}
		c.ep.MasterGRPC, c.ep.MasterHTTP = grpcAddr, httpAddr
		env := ChildEnv("master", cfg.Environ, MasterDefaults, append(common, "GRPC_ADDR="+grpcAddr, "HTTP_ADDR="+httpAddr))
		c.master, err = startProcess(processConfig{
			name: "master", path: cfg.MasterBinary, args: []string{"serve"}, env: env,
			logPath: filepath.Join(logs, "master.log"), echo: c.console, filter: filter,
		})
		if err != nil {
			return err
		}
	}
	for i := 1; i <= cfg.Workers; i++ {
		id := "w" + strconv.Itoa(i)
		port := func(first int) string {
			if first == 0 {
				return "127.0.0.1:0"
			}
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(first+i-1))
		}
		env := ChildEnv("worker", cfg.Environ, WorkerDefaults, append(common,
			"INSTANCE_ID="+id,
			"HTTP_ADDR="+port(cfg.WorkerHTTPPort),
			"GRPC_ADDR="+port(cfg.WorkerGRPCPort),
			// Empty: register the listeners' addresses, whatever the environment says.
			"ADVERTISE_HTTP_ADDR=",
			"ADVERTISE_GRPC_ADDR=",
		))
		p, err := startProcess(processConfig{
			name: id, path: cfg.WorkerBinary, args: []string{"serve"}, env: env,
			logPath: filepath.Join(logs, id+".log"), echo: c.console, filter: filter,
		})
		if err != nil {
			return err
		}
		c.workers = append(c.workers, p)
	}
	return nil
}

// preflight checks that the fixed addresses of the children are free, so that a
// second `master dev` (or anything else on those ports) fails at once with the
// flag to change, not after starting half a cluster.
func (c *cluster) preflight() error {
	type addr struct{ addr, flag string }
	var addrs []addr
	if !c.cfg.NoMaster {
		addrs = append(addrs, addr{c.cfg.MasterGRPCAddr, "--master-grpc-addr"}, addr{c.cfg.MasterHTTPAddr, "--master-http-addr"})
	}
	for i := range c.cfg.Workers {
		if p := c.cfg.WorkerHTTPPort; p != 0 {
			addrs = append(addrs, addr{net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)), "--worker-http-port"})
		}
		if p := c.cfg.WorkerGRPCPort; p != 0 {
			addrs = append(addrs, addr{net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)), "--worker-grpc-port"})
		}
	}
	var errs []error
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a.addr); err != nil || port == "0" {
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
			}
			continue
		}
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is in use (another master dev?): choose other ports with %s: %w", a.addr, a.flag, err))
			continue
		}
		_ = ln.Close()
	}
	return errors.Join(errs...)
}

// ChildEnv is the environment of a child running binary ("master" or "worker"):
// defaults, overridden by environ, overridden by forced. Each is a list of
// KEY=VALUE; later lists win. A default is left out when environ sets one of the
// reference's aliases of it for binary (cli.Aliases): the child would otherwise
// see the default as the Tidemark variable, which wins over the alias, and the
// user's ROLLOUT_FLUSH_INTERVAL_SECS would lose to a default they never set.
func ChildEnv(binary string, environ, defaults, forced []string) []string {
	aliased := map[string]bool{}
	for _, a := range cli.Aliases() {
		if a.Binary != binary {
			continue
		}
		for _, kv := range environ {
			if k, _, _ := strings.Cut(kv, "="); k == a.Name {
				aliased[a.Env] = true
			}
		}
	}
	var out []string
	seen := map[string]int{}
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			out[i] = kv
			return
		}
		seen[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range defaults {
		if k, _, _ := strings.Cut(kv, "="); !aliased[k] {
			add(kv)
		}
	}
	for _, list := range [][]string{environ, forced} {
		for _, kv := range list {
			add(kv)
		}
	}
	return out
}

// pickPort returns addr, or addr with a free port when its port is 0. (The port
// is free when picked; something else could take it before the child listens,
// which is unlikely enough for a development cluster.)
func pickPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// awaitReady waits until every worker registered in etcd (its record written
// after started) and the master answers its health check.
func (c *cluster) awaitReady(ctx context.Context, started time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	// Records are second-precise at worst; one from an earlier run (a worker
	// killed before its lease expired) is older than this.
	since := started.Add(-time.Second)
	httpc := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range c.children() {
			select {
			case <-p.Done():
				return fmt.Errorf("%s exited while starting (%v); its log: %s", p.Name(), exitText(p.Err()), p.LogPath())
			default:
			}
		}
		workers, werr := c.registered(ctx, since)
		ready := werr == nil && len(workers) == len(c.workers)
		if ready && c.master != nil {
			ready = masterHealthy(ctx, httpc, c.ep.MasterHTTP)
		}
		if ready {
			c.ep.Workers = workers
			return nil
		}
		select {
		case <-ctx.Done():
			if werr != nil {
				return fmt.Errorf("cluster not ready within %s: %w", c.cfg.StartTimeout, werr)
			}
			return fmt.Errorf("cluster not ready within %s: %d of %d workers registered in etcd, master healthy: %v (logs in %s)",
				c.cfg.StartTimeout, len(workers), len(c.workers), c.master == nil || masterHealthy(context.Background(), httpc, c.ep.MasterHTTP),
				filepath.Join(c.ep.Dir, "logs"))
		case <-tick.C:
		}
	}
}

// registered returns the records of this cluster's workers registered since.
func (c *cluster) registered(ctx context.Context, since time.Time) ([]membership.Worker, error) {
	var out []membership.Worker
	for _, p := range c.workers {
		key := keys.Under(c.ep.Prefix).Worker(p.Name())
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.client.Get(gctx, key)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		w, err := membership.Parse(key, resp.Kvs[0].Value)
		if err != nil {
			return nil, err
		}
		if w.StartedAt.Before(since) {
			continue // left by an earlier run
		}
		out = append(out, w)
	}
	return out, nil
}

func masterHealthy(ctx context.Context, httpc *http.Client, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/health", nil)
	if err != nil {
		return false
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// createDemoStore creates the rollout store DemoStore through a worker; one that
// exists already (a second run) is fine.
func createDemoStore(ctx context.Context, httpAddr, tokenFile string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Sent in case the environment turned AUTH_DATA_ROUTES on.
	var tokens *auth.Tokens
	if tokenFile != "" {
		var err error
		if tokens, err = auth.LoadTokenFile("dev token", tokenFile); err != nil {
			return err
		}
	}
	wc, err := client.New(httpAddr, client.WithToken(tokens.Outgoing()))
	if err != nil {
		return err
	}
	_, err = wc.CreateStore(ctx, client.Rollouts, client.StoreSpec{Name: DemoStore})
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusConflict {
		return nil // it exists, or a create of it raced this one
	}
	return err
}

// shutdown stops the master, then the workers (at once), then etcd, and returns
// what went wrong on the way.
func (c *cluster) shutdown() error {
	var errs []error
	stop := func(p *Process) error {
		select {
		case <-p.Done():
			return nil // exited before the shutdown: already reported
		default:
		}
		if err := p.Stop(c.cfg.ShutdownTimeout); err != nil {
			return fmt.Errorf("%s: %s (log %s)", p.Name(), exitText(err), p.LogPath())
		}
		return nil
	}
	if c.master != nil {
		if err := stop(c.master); err != nil {
			errs = append(errs, err)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range c.workers {
		wg.Go(func() {
			if err := stop(p); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	_ = c.client.Close()
	c.etcd.Close()
	if len(errs) == 0 {
		kept := c.ep.Dir
		if c.cfg.DataURL != "" {
			kept += " (etcd, logs) and " + c.ep.DataURL + " (stores)"
		}
		c.console.Line("dev", "stopped; data kept in "+kept)
	}
	return errors.Join(errs...)
}
