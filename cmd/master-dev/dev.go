package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/tools/devcluster"
)

type devFlags struct {
	cfg          devcluster.Config
	masterBinary string
	workerBinary string
	echoLevel    string
	master       bool
}

func newDevCmd() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "master-dev",
		Short: "Run a whole cluster on this machine: embedded etcd, a master and N workers, until Ctrl-C",
		Long: `Run a whole Tidemark cluster on this machine, for development and trying it out:
an embedded single-node etcd, a master (the master binary, "master serve") and N
workers (the worker binary, "worker serve"), each its own process on loopback, sharing
the file:// store in <dir>/store, or the bucket --data-url names (s3://, gs://,
azblob://; its credentials come from the environment, as for "worker serve").
Everything else lives in --dir; both are reused by the next run. Ctrl-C stops the
master, then the workers, then etcd.

"master dev <flags>" runs this binary with the same flags: it lives apart from the
master so that the production master does not link the embedded etcd server.

Dev defaults make merges visible within seconds: workers seal every 5s
(FLUSH_INTERVAL=5s) and leave merges to the master, which scans and sweeps every 5s (STATS_SCAN_INTERVAL, MERGE_WAL_INTERVAL) and
merges a store at 2 pending generations (MERGE_WAL_MIN_GENERATIONS=2). Any setting
of "master serve" or "worker serve" given in the environment overrides these, e.g.
FLUSH_INTERVAL=1s master dev. Every process logs to <dir>/logs/<name>.log.

Every process requires the cluster's bearer token, <dir>/auth-token (made on the
first run, mode 0600; AUTH_TOKEN_FILE of every child): export
AUTH_TOKEN_FILE=<dir>/auth-token for "master admin", and send
-H "Authorization: Bearer $(cat <dir>/auth-token)" to the internal routes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd, f)
		},
	}
	fs := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(fs, name, env) }
	c := &f.cfg
	fs.StringVar(&c.Dir, "dir", devcluster.DefaultDir, "data directory: etcd/, logs/ and store/ (the DATA_URL of every process unless --data-url names one)")
	bind("dir", "DEV_DIR")
	fs.StringVar(&c.DataURL, "data-url", "", "object storage of every store, e.g. s3://bucket?region=us-east-1&prefix=dev/ (credentials from the environment; default: file://<dir>/store)")
	bind("data-url", "DATA_URL")
	fs.IntVar(&c.Workers, "workers", devcluster.DefaultWorkers, "worker processes to run (w1..wN)")
	bind("workers", "DEV_WORKERS")
	fs.BoolVar(&f.master, "master", true, "run a master (false: etcd and workers only, start your own master)")
	bind("master", "DEV_MASTER")
	fs.BoolVar(&c.NoAuth, "auth-disabled", false, "run master and workers without credentials and make no token (anyone reaching the ports can merge and requeue)")
	bind("auth-disabled", "AUTH_DISABLED")
	fs.StringVar(&f.masterBinary, "master-binary", "", "master executable (default: the master that ran \"master dev\", else \"master\" next to this binary)")
	bind("master-binary", "DEV_MASTER_BINARY")
	fs.StringVar(&f.workerBinary, "worker-binary", "", "worker executable (default: \"worker\" next to this binary, where make build puts it)")
	bind("worker-binary", "DEV_WORKER_BINARY")
	fs.StringVar(&c.EtcdAddr, "etcd-addr", devcluster.DefaultEtcdAddr, "client address of the embedded etcd (port 0: any free port)")
	bind("etcd-addr", "DEV_ETCD_ADDR")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", keys.DefaultPrefix, "key prefix of every Tidemark key in etcd (ETCD_PREFIX of every process)")
	bind("etcd-prefix", "ETCD_PREFIX")
	fs.BoolVar(&c.EtcdUnsafeNoFsync, "etcd-unsafe-no-fsync", false, "run the embedded etcd without fsync (faster; a machine crash can lose its data)")
	bind("etcd-unsafe-no-fsync", "DEV_ETCD_UNSAFE_NO_FSYNC")
	fs.StringVar(&c.MasterGRPCAddr, "master-grpc-addr", devcluster.DefaultMasterGRPCAddr, "the master's AdminService address (port 0: any free port)")
	bind("master-grpc-addr", "DEV_MASTER_GRPC_ADDR")
	fs.StringVar(&c.MasterHTTPAddr, "master-http-addr", devcluster.DefaultMasterHTTPAddr, "the master's HTTP API and /metrics address (port 0: any free port)")
	bind("master-http-addr", "DEV_MASTER_HTTP_ADDR")
	fs.IntVar(&c.WorkerHTTPPort, "worker-http-port", devcluster.DefaultWorkerHTTPPort, "HTTP port of w1 on 127.0.0.1; wN gets port+N-1 (0: any free ports)")
	bind("worker-http-port", "DEV_WORKER_HTTP_PORT")
	fs.IntVar(&c.WorkerGRPCPort, "worker-grpc-port", devcluster.DefaultWorkerGRPCPort, "gRPC port of w1 on 127.0.0.1; wN gets port+N-1 (0: any free ports)")
	bind("worker-grpc-port", "DEV_WORKER_GRPC_PORT")
	fs.DurationVar(&c.StartTimeout, "start-timeout", devcluster.DefaultStartTimeout, "how long every process may take to be ready")
	bind("start-timeout", "DEV_START_TIMEOUT")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", devcluster.DefaultShutdownTimeout, "how long each process may take to stop after SIGTERM before it is killed")
	bind("shutdown-timeout", "DEV_SHUTDOWN_TIMEOUT")
	fs.StringVar(&f.echoLevel, "echo-level", "warn", "lowest log level of the processes echoed here (all of it is in <dir>/logs/): debug, info, warn or error")
	bind("echo-level", "DEV_ECHO_LEVEL")
	return cmd
}

func runDev(cmd *cobra.Command, f devFlags) error {
	cfg := f.cfg
	cfg.Console = devcluster.NewConsole(cmd.OutOrStdout())
	// Once, before anything starts, as master serve and worker serve do: settings
	// of the reference system without an equivalent, and misspelled ones.
	cli.LogEnvWarnings(cmd.Context(), cfg.Console.Logger("dev"))
	cfg.NoMaster = !f.master
	if err := cfg.EchoLevel.UnmarshalText([]byte(f.echoLevel)); err != nil {
		return fmt.Errorf("--echo-level (DEV_ECHO_LEVEL) %q: want debug, info, warn or error", f.echoLevel)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary (master and worker are next to it): %w", err)
	}
	cfg.MasterBinary = f.masterBinary
	if cfg.MasterBinary == "" {
		cfg.MasterBinary = filepath.Join(filepath.Dir(self), "master")
	}
	cfg.WorkerBinary = f.workerBinary
	if cfg.WorkerBinary == "" {
		cfg.WorkerBinary = filepath.Join(filepath.Dir(self), "worker")
	}
	if !cfg.NoMaster {
		if _, err := os.Stat(cfg.MasterBinary); err != nil {
			return fmt.Errorf("master binary: %w (run `make build`, which puts master next to master-dev in bin/, or pass --master-binary)", err)
		}
	}
	if cfg.Workers > 0 {
		if _, err := os.Stat(cfg.WorkerBinary); err != nil {
			return fmt.Errorf("worker binary: %w (run `make build`, which puts worker next to master-dev in bin/, or pass --worker-binary)", err)
		}
	}
	cfg.MasterCommand = displayPath(cfg.MasterBinary)
	cfg.WorkerCommand = displayPath(cfg.WorkerBinary)
	cfg.Environ = os.Environ()
	return devcluster.Run(cmd.Context(), cfg)
}

// displayPath is how the banner names a binary: relative to the working
// directory when it is inside it (bin/master), absolute otherwise.
func displayPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	if !strings.Contains(rel, string(filepath.Separator)) {
		return "." + string(filepath.Separator) + rel
	}
	return rel
}
