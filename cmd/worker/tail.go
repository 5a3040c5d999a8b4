package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/worker/tail"
)

type tailFlags struct {
	cfg  tail.Config
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
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "the worker's HTTP address")
	bind("url", "TAIL_URL")
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
	if !ok || name == "" || (kind != "rollouts" && kind != "generic") {
		return fmt.Errorf("store %q: want rollouts/<name> or generic/<name>", store)
	}
	if cfg.Limit <= 0 {
		return fmt.Errorf("--limit (TAIL_LIMIT) %d: must be positive", cfg.Limit)
	}
	cred, err := f.auth.Client()
	if err != nil {
		return err
	}
	cfg.Kind, cfg.Name = kind, name
	cfg.Client = auth.HTTPClient(cred.Token, cred.TLS)
	// A request waits up to --wait on the worker; the client allows that and more.
	cfg.Client.Timeout = cfg.Wait + time.Minute
	cfg.Out = cmd.OutOrStdout()
	cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	st, err := tail.Run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Debug("tail ended", "pages", st.Pages, "rows", st.Rows, "commits", st.Commits, "cursor", st.Cursor)
	return nil
}
