package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/coord/etcdcli"
)

// exportPoll spaces the polls of `worker export --wait`: the task's progress is
// recorded every few seconds.
const exportPoll = time.Second

type exportFlags struct {
	req  client.ExportRequest
	wait bool
	url  string
	etcd etcdcli.Config
	auth auth.Flags
}

func newExportCmd() *cobra.Command {
	var f exportFlags
	cmd := &cobra.Command{
		Use:   "export <rollouts|generic>/<name> <destination>",
		Short: "Export a store's live rows to a bucket as Parquet files and a manifest, through a worker",
		Long: `Ask a worker to enqueue an export task (POST .../export): the master has a worker write
the store's live rows (deletions applied, the newest version of each id) to the destination
bucket as Parquet files (part-00000-<attempt>.parquet, ...) and then _manifest.json, which lists them
with the store, version, schema, rows, bytes and the change-feed cursor to tail from after
the snapshot. Prints the task id.

The destination is a bucket URL the workers can write with their own credentials, as
DATA_URL is: file:///dir, s3://bucket?region=..., gs://bucket, azblob://container, each
with an optional ?prefix=dir/. --version exports a base-table version instead of the
store now; --columns the named columns (id and _seq are always written); --filter a
generic store's SQL predicate or a rollout store's filters JSON object. --id (a UUID you
pick) makes the command safe to run again: the same id and arguments print the first task.

With --wait it polls the task (GET .../export/{id}) and prints its progress on stderr
until it is done (the manifest's URL and feed cursor on stdout) or failed (exit
non-zero). The export goes on if the command is interrupted; "master admin cancel <id>"
stops it.

The worker is --url, or else the first worker registered in etcd (--etcd-endpoints,
by default the dev cluster's ` + devEtcd + `) that answers its health check. The route
needs the worker's credential (AUTH_TOKEN_FILE, or a client certificate).

  worker export rollouts/trajectories 's3://exports?region=eu-west-1&prefix=2026-05-01/'
  worker export generic/events file:///data/exports/events --columns id,score --filter 'score > 0.5' --wait`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExport(cmd, args[0], args[1], f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.url, "url", "", "the worker's HTTP address (default: a worker registered in etcd)")
	f.etcd.AddFlags(fs, "where to find a worker when --url is empty (default "+devEtcd+", the dev cluster's)")
	fs.Uint64Var(&f.req.Version, "version", 0, "export this base-table version (0: the store now, base and pending rows)")
	fs.StringSliceVar(&f.req.Columns, "columns", nil, "columns to export besides id and _seq (comma-separated; default: every column)")
	fs.StringVar(&f.req.Filter, "filter", "", "rows to export: a generic store's SQL predicate, a rollout store's filters JSON object")
	fs.StringVar(&f.req.ID, "id", "", "the task's id (a UUID): running the command again with it enqueues nothing new")
	fs.BoolVar(&f.wait, "wait", false, "follow the task's progress until it is done or failed")
	f.auth.AddClientFlags(fs)
	return cmd
}

func runExport(cmd *cobra.Command, store, destination string, f exportFlags) error {
	kind, name, ok := strings.Cut(store, "/")
	k, err := client.ParseKind(kind)
	if !ok || name == "" || err != nil {
		return fmt.Errorf("store %q: want rollouts/<name> or generic/<name>", store)
	}
	cred, err := f.auth.Client()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	ctx := cmd.Context()
	c, err := findWorker(ctx, f.url, "--url", f.etcd, []client.Option{client.WithToken(cred.Token), client.WithTLS(cred.TLS)}, log)
	if err != nil {
		return err
	}
	req := f.req
	req.Destination = destination
	t, existing, err := c.Export(ctx, k, name, req)
	if err != nil {
		return fmt.Errorf("export %s: %w", store, err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), t.ID)
	if existing {
		fmt.Fprintf(cmd.ErrOrStderr(), "task %s existed already (same --id and arguments); it is %s\n", t.ID, t.State)
	}
	if !f.wait {
		return nil
	}
	return waitExport(ctx, cmd, c, k, name, t)
}

// waitExport polls the export task t until it is finished, printing each change
// of its state or progress on stderr.
func waitExport(ctx context.Context, cmd *cobra.Command, c *client.Client, k client.Kind, name string, t client.ExportTask) error {
	last := ""
	for {
		if line := exportLine(t); line != last {
			fmt.Fprintln(cmd.ErrOrStderr(), line)
			last = line
		}
		if t.Finished() {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting (the export goes on; master admin get %s shows it): %w", t.ID, ctx.Err())
		case <-time.After(exportPoll):
		}
		got, err := c.GetExport(ctx, k, name, t.ID)
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status >= 500 {
			continue // etcd or the worker busy: ask again
		}
		if err != nil {
			return fmt.Errorf("export %s: %w", t.ID, err)
		}
		t = got
	}
	if t.State != "done" {
		return fmt.Errorf("export %s failed: %s", t.ID, t.Error)
	}
	if x := t.Exported; x != nil {
		fmt.Fprintf(cmd.OutOrStdout(), "manifest: %s\nversion: %d\nrows: %d\nfiles: %d\nbytes: %d\nfeed_cursor: %s\n",
			x.Manifest, x.Version, x.Rows, x.Files, x.Bytes, x.FeedCursor)
	}
	return nil
}

// exportLine is a task's state and progress in words.
func exportLine(t client.ExportTask) string {
	line := t.ID + " " + t.State
	if t.Attempts > 1 {
		line += fmt.Sprintf(" (attempt %d)", t.Attempts)
	}
	if p := t.Progress; p != nil {
		rows := humanize.Comma(p.Rows)
		if p.Estimate > 0 {
			rows += " of ~" + humanize.Comma(p.Estimate)
		}
		line += fmt.Sprintf(": %s rows, %d files, %s", rows, p.Files, humanize.IBytes(uint64(max(p.Bytes, 0))))
		if p.Worker != "" {
			line += " (on " + p.Worker + ")"
		}
	}
	if t.Error != "" {
		line += ": " + t.Error
	}
	return line
}
