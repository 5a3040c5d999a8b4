package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/client/tail"
	"github.com/tidemark-io/tidemark/pkg/coord/etcdcli"
)

// devEtcd is the dev cluster's etcd (tools/devcluster's DefaultEtcdAddr, which
// a test keeps equal): where `worker tail` looks for a worker when given neither
// --url nor --etcd-endpoints, so it works as is after `make run`.
const devEtcd = "http://127.0.0.1:2379"

type tailFlags struct {
	cfg  tail.Config
	url  string
	etcd etcdcli.Config
	auth auth.Flags
}

func newTailCmd() *cobra.Command {
	var f tailFlags
	cmd := &cobra.Command{
		Use:   "tail <rollouts|generic>/<name>",
		Short: "Print a store's changes as JSON lines, optionally as a named consumer that commits its cursor",
		Long: `Read a store's change feed (GET .../changes) from a worker and print each changed
row as one JSON line on stdout, oldest first. Without --follow it exits at the end
of the feed; with it, it waits for new rows until Ctrl-C.

With --consumer it starts from the consumer's committed cursor and commits each
page's next_cursor once the page is printed, so a tail stopped at any point and
started again prints every row at least once, and nothing before its committed
cursor again.

The worker is --url, or else the first worker registered in etcd (--etcd-endpoints,
by default the dev cluster's ` + devEtcd + `) that answers its health check.

  worker tail rollouts/trajectories
  worker tail generic/events --consumer trainer --follow --url http://10.0.0.7:8080`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTail(cmd, args[0], f)
		},
	}
	fs := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(fs, name, env) }
	c := &f.cfg
	fs.StringVar(&f.url, "url", "", "the worker's HTTP address (default: a worker registered in etcd)")
	bind("url", "TAIL_URL")
	f.etcd.AddFlags(fs, "where to find a worker when --url is empty (default "+devEtcd+", the dev cluster's)")
	fs.StringVar(&c.Consumer, "consumer", "", "named consumer: start from its committed cursor and commit after each page")
	bind("consumer", "TAIL_CONSUMER")
	fs.StringVar(&c.Cursor, "cursor", "", `where to start: a cursor of an earlier answer, or "now" (default: the consumer's committed cursor, else the beginning)`)
	bind("cursor", "TAIL_CURSOR")
	fs.BoolVar(&c.Follow, "follow", false, "keep waiting for new rows at the end of the feed (until Ctrl-C)")
	bind("follow", "TAIL_FOLLOW")
	fs.DurationVar(&c.Wait, "wait", tail.DefaultWait, "with --follow, how long one request waits for new rows (the worker caps it)")
	bind("wait", "TAIL_WAIT")
	fs.IntVar(&c.Limit, "limit", tail.DefaultLimit, "rows per page (and per commit)")
	bind("limit", "TAIL_LIMIT")
	f.auth.AddClientFlags(fs)
	return cmd
}

func runTail(cmd *cobra.Command, store string, f tailFlags) error {
	cfg := f.cfg
	kind, name, ok := strings.Cut(store, "/")
	k, err := client.ParseKind(kind)
	if !ok || name == "" || err != nil {
		return fmt.Errorf("store %q: want rollouts/<name> or generic/<name>", store)
	}
	if cfg.Limit <= 0 {
		return fmt.Errorf("--limit (TAIL_LIMIT) %d: must be positive", cfg.Limit)
	}
	cred, err := f.auth.Client()
	if err != nil {
		return err
	}
	opts := []client.Option{client.WithToken(cred.Token), client.WithTLS(cred.TLS)}
	cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	if cfg.Worker, err = tailWorker(cmd.Context(), f, opts, cfg.Logger); err != nil {
		return err
	}
	cfg.Kind, cfg.Name = k, name
	cfg.Out = cmd.OutOrStdout()
	st, err := tail.Run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Debug("tail ended", "pages", st.Pages, "rows", st.Rows, "commits", st.Commits, "cursor", st.Cursor)
	return nil
}

// tailWorker is the client of the worker to read from: --url's, or else that of
// the first worker registered in etcd that answers its health check (one
// registered but stopping, or unreachable from here, is passed over).
func tailWorker(ctx context.Context, f tailFlags, opts []client.Option, log *slog.Logger) (*client.Client, error) {
	return findWorker(ctx, f.url, "--url (TAIL_URL)", f.etcd, opts, log)
}

// findWorker is the client of the worker a command calls: url's if set, or
// else that of the first worker registered in etcd (ec, by default the dev
// cluster's) that answers its health check. urlFlag names url's flag in errors.
func findWorker(ctx context.Context, url, urlFlag string, ec etcdcli.Config, opts []client.Option, log *slog.Logger) (*client.Client, error) {
	if url != "" {
		return client.New(url, opts...)
	}
	if !ec.Enabled() {
		ec.Endpoints = []string{devEtcd}
	}
	addrs, err := registeredWorkers(ctx, ec)
	if err != nil {
		return nil, fmt.Errorf("no %s, and no worker found in etcd at %s (--etcd-endpoints, ETCD_ENDPOINTS): %w",
			urlFlag, strings.Join(ec.Endpoints, ","), err)
	}
	var errs []error
	for _, addr := range addrs {
		c, err := client.New(addr, append(opts, client.WithTimeout(healthTimeout))...)
		if err == nil {
			_, err = c.Health(ctx)
		}
		if err == nil {
			log.Debug("calling a worker registered in etcd", "worker", addr)
			return client.New(addr, opts...)
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("no worker registered in etcd answers: %w", errors.Join(errs...))
}
