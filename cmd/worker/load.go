package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/coord/etcdcli"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

type loadFlags struct {
	cfg   loadgen.Config
	addrs []string
	etcd  etcdcli.Config
	auth  auth.Flags
}

func newLoadCmd() *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Write realistic rollout records and generic rows to every worker at a chosen rate",
		Long: `Write load to running workers: rollout records (several turns per rollout, with
tokens, logprobs and grades) and generic rows (service events), spread over every
worker and both kinds, at --rate rows per second, with a progress line. The stores
are created if missing. Workers are --workers, or every worker registered in etcd
(--etcd-endpoints). Ctrl-C stops it after the requests in flight.

  worker load --etcd-endpoints http://127.0.0.1:2379 --rate 200
  worker load --workers 127.0.0.1:8081,127.0.0.1:8082 --rows 10000 --flush`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLoad(cmd, f)
		},
	}
	fs := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(fs, name, env) }
	c := &f.cfg
	fs.StringSliceVar(&f.addrs, "workers", nil, "worker HTTP addresses, comma-separated host:port (default: every worker registered in etcd)")
	bind("workers", "LOAD_WORKERS")
	f.etcd.AddFlags(fs, "where to find the workers when --workers is empty")
	fs.Float64Var(&c.Rate, "rate", 100, "rows per second over every worker and kind (0: as fast as the workers take them)")
	bind("rate", "LOAD_RATE")
	fs.IntVar(&c.Batch, "batch", loadgen.DefaultBatch, "rows per request")
	bind("batch", "LOAD_BATCH")
	fs.IntVar(&c.Concurrency, "concurrency", loadgen.DefaultConcurrency, "requests in flight")
	bind("concurrency", "LOAD_CONCURRENCY")
	fs.DurationVar(&c.Duration, "duration", 0, "stop after this long (0: until Ctrl-C or --rows)")
	bind("duration", "LOAD_DURATION")
	fs.Int64Var(&c.MaxRows, "rows", 0, "stop after this many rows (0: no limit)")
	bind("rows", "LOAD_ROWS")
	fs.StringVar(&c.RolloutStore, "rollout-store", loadgen.DefaultRolloutStore, "rollout store to write (created if missing; empty: no rollout records)")
	bind("rollout-store", "LOAD_ROLLOUT_STORE")
	fs.StringVar(&c.GenericStore, "generic-store", loadgen.DefaultGenericStore, "generic store to write (created if missing; empty: no generic rows)")
	bind("generic-store", "LOAD_GENERIC_STORE")
	fs.StringVar(&c.RunID, "run-id", "", "prefix of every row id (default: load<start time>, so runs never overwrite each other)")
	bind("run-id", "LOAD_RUN_ID")
	fs.BoolVar(&c.Flush, "flush", false, "add with ?flush=true: every request seals a generation (piles generations up fast)")
	bind("flush", "LOAD_FLUSH")
	f.auth.AddTokenFlags(fs)
	return cmd
}

func runLoad(cmd *cobra.Command, f loadFlags) error {
	ctx := cmd.Context()
	cfg := f.cfg
	cfg.Workers = f.addrs
	cred, err := f.auth.Client()
	if err != nil {
		return err
	}
	if cred.Token != "" {
		// Only workers with --auth-data-routes need it; others ignore it.
		cfg.Client = &http.Client{Timeout: 2 * time.Minute, Transport: &auth.Transport{Token: cred.Token}}
	}
	if len(cfg.Workers) == 0 {
		if !f.etcd.Enabled() {
			return errors.New("no workers: give --workers (LOAD_WORKERS) or --etcd-endpoints (ETCD_ENDPOINTS) to find them")
		}
		if cfg.Workers, err = registeredWorkers(ctx, f.etcd); err != nil {
			return err
		}
	}
	out := cmd.ErrOrStderr()
	cfg.Progress = out
	if file, ok := out.(*os.File); ok {
		if fi, err := file.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			cfg.InPlace = true
		}
	}
	fmt.Fprintf(out, "load: writing to %s (rollout store %q, generic store %q)\n",
		strings.Join(cfg.Workers, ", "), cfg.RolloutStore, cfg.GenericStore)
	st, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if st.Requests > 0 && st.Failed == st.Requests {
		return fmt.Errorf("every request failed (last: %s)", st.LastError)
	}
	return nil
}
