package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/dustin/go-humanize/english"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// Output formats of `master admin`.
const (
	outputTable = "table"
	outputJSON  = "json"
)

type adminFlags struct {
	addr    string
	timeout time.Duration
	output  string
	auth    auth.Flags
}

func newAdminCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Operate a running master through its gRPC AdminService",
		Long: `Operate a running master through its gRPC AdminService: enqueue and inspect tasks,
requeue a store's WAL merge, read the stats rows, rescan stores, list workers, have an
orphaned shard adopted.

A target is "<name>" for a rollout store and "generic:<name>" for a generic store.
Errors print the gRPC status code and the master's message, and exit non-zero.

The AdminService needs the master's credential: its token (AUTH_TOKEN_FILE, the
file the master reads, or AUTH_TOKEN) and, with mutual TLS, a client certificate
(--tls-cert, --tls-key) and the CA of the master's certificate (--tls-ca).`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.addr, "addr", "127.0.0.1:7070", "gRPC address of the master's AdminService")
	cli.BindEnv(pf, "addr", "MASTER_ADDR")
	pf.DurationVar(&f.timeout, "timeout", 30*time.Second, "bound on the call (a rescan of every store may need more)")
	cli.BindEnv(pf, "timeout", "ADMIN_TIMEOUT")
	pf.StringVarP(&f.output, "output", "o", outputTable, "output format: table or json")
	cli.BindEnv(pf, "output", "ADMIN_OUTPUT")
	f.auth.AddClientFlags(pf)

	var dependsOn []string
	enqueue := &cobra.Command{
		Use:   "enqueue <kind> <target>",
		Short: "Enqueue a task (merge_wal, compact, verify or repair; an export with \"master admin export\"); a live task of the same kind and target is returned instead",
		Args:  cobra.ExactArgs(2),
		RunE: f.run("enqueue", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			return c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: args[0], Target: args[1], DependsOn: dependsOn})
		}),
	}
	enqueue.Flags().StringSliceVar(&dependsOn, "depends-on", nil, "task ids that must be done first (repeat or comma-separate)")

	requeue := &cobra.Command{
		Use:   "requeue-merge <target>",
		Short: "Enqueue a merge_wal task for a target now (deduplicated)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run("requeue-merge", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			return c.RequeueMerge(ctx, &tidemarkv1.RequeueMergeRequest{Target: args[0]})
		}),
	}

	adopt := &cobra.Command{
		Use:   "adopt <target> <shard>",
		Short: "Have a live worker adopt a shard whose worker is gone now, without waiting for ORPHAN_GRACE",
		Long: `Have a live worker adopt a shard whose worker is gone now, without waiting for
ORPHAN_GRACE: the master marks the shard orphaned and enqueues a merge_wal task for the
target (deduplicated), which has a live worker replay, seal, merge and retire it.

The shard is the INSTANCE_ID of the worker that is gone. It is refused while a worker is
registered under that id (FailedPrecondition), and for a shard that is not an active shard
of the store (NotFound; "master admin stats" lists them). The mark is held by the master
that answers: with several master replicas, a merge claimed by another one adopts the
shard once its own grace has passed.`,
		Args: cobra.ExactArgs(2),
		RunE: f.run("adopt", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			return c.ForceAdopt(ctx, &tidemarkv1.ForceAdoptRequest{Target: args[0], Shard: args[1]})
		}),
	}

	var noWait bool
	compact := &cobra.Command{
		Use:   "compact <target>",
		Short: "Compact a store's base table and delete what retention lets go, and wait for the result",
		Long: `Enqueue a compact task for a target (deduplicated) and wait for it to finish: a worker
rewrites the base table's small fragments and fragments with many deleted rows into
fewer (TARGET_ROWS_PER_FRAGMENT rows each), then deletes the manifests older than the
retention (VERSION_RETENTION_COUNT, VERSION_RETENTION_AGE) and the files no kept
version references, of the table and of its WAL shards. Exits non-zero if the task
failed. --timeout bounds the wait (a large table may need minutes).`,
		Args: cobra.ExactArgs(1),
		RunE: f.run("compact", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			return enqueueAndWait(ctx, c, "compact", args[0], !noWait)
		}),
	}
	compact.Flags().BoolVar(&noWait, "no-wait", false, "return once the task is enqueued")

	var dropMissing bool
	verify := &cobra.Command{
		Use:   "verify <target>",
		Short: "Check every object of a store's newest base table version, and wait for the result",
		Long: `Enqueue a verify task for a target and wait for it: a worker checks that every object
the newest base table version references exists with the size the manifest records
and decodes (bloom filters, deletion vectors, Parquet footers). The task fails, and this
command exits non-zero, naming each missing or damaged object.

With --drop-missing it enqueues a repair task instead: the same check, then a commit of
a new version without the fragments found missing or damaged. Their rows are gone from
the table; each dropped fragment is logged by the worker and counted in
tidemark_repair_dropped_fragments_total. Nothing ever drops data without this flag.`,
		Args: cobra.ExactArgs(1),
		RunE: f.run("verify", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			kind := "verify"
			if dropMissing {
				kind = "repair"
			}
			return enqueueAndWait(ctx, c, kind, args[0], !noWait)
		}),
	}
	verify.Flags().BoolVar(&dropMissing, "drop-missing", false, "commit a version without the fragments found missing or damaged (their rows are lost)")
	verify.Flags().BoolVar(&noWait, "no-wait", false, "return once the task is enqueued")

	var ef struct {
		version    uint64
		columns    []string
		filter, id string
		wait       bool
	}
	exportCmd := &cobra.Command{
		Use:   "export <target> <destination>",
		Short: "Export a store's live rows to a bucket as Parquet files and a manifest (an export task)",
		Long: `Enqueue an export task: a worker writes the target's live rows (deletions applied, the
newest version of each id) to the destination bucket as Parquet files (part-00000-<attempt>.parquet,
...) and then _manifest.json, which lists them with the store, version, schema, rows,
bytes and the change-feed cursor a consumer tails from after the snapshot. Prints the
task; the task id is what "master admin get" and "master admin cancel" take.

The destination is a bucket URL the workers can write with their own credentials, as
DATA_URL is: file:///dir, s3://bucket?region=..., gs://bucket, azblob://container, each
with an optional ?prefix=dir/. It must be empty or hold an earlier attempt of the same
task. --version exports a base-table version instead of the store now (base and pending
rows); --columns the named columns (id and _seq are always written); --filter a generic
store's SQL predicate or a rollout store's filters JSON object.

Exports are not deduplicated: each is a task. --id (a UUID you pick) makes the command
safe to run again: a second run with the same id and arguments prints the first task.
With --wait it follows the task's progress on stderr until it is done or failed (exit
non-zero), bounded by --timeout (ADMIN_TIMEOUT): give a long one for a large store.

  master admin export trajectories 's3://exports?region=eu-west-1&prefix=2026-05-01/'
  master admin export generic:events file:///data/exports/events --columns id,score --filter 'score > 0.5' --wait --timeout 2h`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run("export", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
				resp, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: "export", Target: args[0], Id: ef.id,
					Export: &tidemarkv1.ExportSpec{Destination: args[1], Version: ef.version, Columns: ef.columns, Filter: ef.filter}})
				if err != nil || !ef.wait {
					return resp, err
				}
				return waitTask(ctx, c, resp.GetTask().GetId(), func(t *tidemarkv1.Task) {
					fmt.Fprintln(cmd.ErrOrStderr(), progressLine(t))
				})
			})(cmd, args)
		},
	}
	exportCmd.Flags().Uint64Var(&ef.version, "version", 0, "export this base-table version (0: the store now, base and pending rows)")
	exportCmd.Flags().StringSliceVar(&ef.columns, "columns", nil, "columns to export besides id and _seq (comma-separated; default: every column)")
	exportCmd.Flags().StringVar(&ef.filter, "filter", "", "rows to export: a generic store's SQL predicate, a rollout store's filters JSON object")
	exportCmd.Flags().StringVar(&ef.id, "id", "", "the task's id (a UUID): running the command again with it enqueues nothing new")
	exportCmd.Flags().BoolVar(&ef.wait, "wait", false, "follow the task's progress until it is done or failed")

	get := &cobra.Command{
		Use:   "get <task-id>",
		Short: "Show one task",
		Args:  cobra.ExactArgs(1),
		RunE: f.run("get", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			return c.GetTask(ctx, &tidemarkv1.GetTaskRequest{Id: args[0]})
		}),
	}

	var lf struct {
		state, kind, target, token string
		limit                      int32
		newest                     bool
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List tasks in enqueue order, filtered, one page at a time",
		Args:  cobra.NoArgs,
		RunE: f.run("list", func(ctx context.Context, c tidemarkv1.AdminServiceClient, _ []string) (proto.Message, error) {
			return c.ListTasks(ctx, &tidemarkv1.ListTasksRequest{State: lf.state, Kind: lf.kind, Target: lf.target,
				PageSize: lf.limit, PageToken: lf.token, NewestFirst: lf.newest})
		}),
	}
	list.Flags().StringVar(&lf.state, "state", "", "only tasks in this state: queued, running, done or failed")
	list.Flags().StringVar(&lf.kind, "kind", "", "only tasks of this kind: merge_wal, compact, verify, repair or export")
	list.Flags().StringVar(&lf.target, "target", "", "only tasks on this target")
	list.Flags().Int32Var(&lf.limit, "limit", 0, "page size (0: 100; at most 1000)")
	list.Flags().StringVar(&lf.token, "page-token", "", "continue after the previous page (its next page token)")
	list.Flags().BoolVar(&lf.newest, "newest-first", false, "list in reverse enqueue order")

	cancel := &cobra.Command{
		Use:   "cancel <task-id>",
		Short: "Cancel a queued task, or stop a running export (other running tasks, and finished ones, cannot be)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run("cancel", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			return c.CancelTask(ctx, &tidemarkv1.CancelTaskRequest{Id: args[0]})
		}),
	}

	var sf struct {
		token string
		limit int32
	}
	stats := &cobra.Command{
		Use:   "stats",
		Short: "List the stats rows (what the scanner last observed of each store) in target order",
		Long: `List the stats rows (what the scanner last observed of each store) in target order,
with each store's active shards and those no worker is registered under now (MISSING):
since when the master has seen each missing, and whether it is orphaned (missing for
ORPHAN_GRACE; the next merge_wal of the store has it adopted) or when it will be. A shard
adopted and retired leaves ACTIVE_SHARDS; "+N retired" counts those.`,
		Args: cobra.NoArgs,
		RunE: f.run("stats", func(ctx context.Context, c tidemarkv1.AdminServiceClient, _ []string) (proto.Message, error) {
			return c.ListStats(ctx, &tidemarkv1.ListStatsRequest{PageSize: sf.limit, PageToken: sf.token})
		}),
	}
	stats.Flags().Int32Var(&sf.limit, "limit", 0, "page size (0: 100; at most 1000)")
	stats.Flags().StringVar(&sf.token, "page-token", "", "continue after the previous page (its next page token)")

	rescan := &cobra.Command{
		Use:   "rescan [target]",
		Short: "Observe one target, or every store, now and write the stats rows that changed",
		Args:  cobra.MaximumNArgs(1),
		RunE: f.run("rescan", func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error) {
			req := &tidemarkv1.RescanRequest{}
			if len(args) == 1 {
				req.Target = args[0]
			}
			return c.Rescan(ctx, req)
		}),
	}

	workers := &cobra.Command{
		Use:   "workers",
		Short: "List the workers the master calls (registered in etcd, or WORKER_ENDPOINTS)",
		Args:  cobra.NoArgs,
		RunE: f.run("workers", func(ctx context.Context, c tidemarkv1.AdminServiceClient, _ []string) (proto.Message, error) {
			return c.ListWorkers(ctx, &tidemarkv1.ListWorkersRequest{})
		}),
	}

	cmd.AddCommand(enqueue, requeue, adopt, compact, verify, exportCmd, get, list, cancel, stats, rescan, workers)
	return cmd
}

// errTaskFailed is what a subcommand that waited for its task returns, with the
// task, when the task failed: the task is printed, and the command exits non-zero.
var errTaskFailed = errors.New("task failed")

// enqueueAndWait enqueues a task of kind on target and, with wait, polls it until
// it finished (or ctx, bounded by --timeout, ends).
func enqueueAndWait(ctx context.Context, c tidemarkv1.AdminServiceClient, kind, target string, wait bool) (proto.Message, error) {
	resp, err := c.EnqueueTask(ctx, &tidemarkv1.EnqueueTaskRequest{Kind: kind, Target: target})
	if err != nil || !wait {
		return resp, err
	}
	return waitTask(ctx, c, resp.GetTask().GetId(), nil)
}

// waitTask polls task id until it finished (or ctx, bounded by --timeout, ends),
// calling changed, if set, with the task whenever its state or progress moved.
func waitTask(ctx context.Context, c tidemarkv1.AdminServiceClient, id string, changed func(*tidemarkv1.Task)) (proto.Message, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var seen *tidemarkv1.Task
	for {
		got, err := c.GetTask(ctx, &tidemarkv1.GetTaskRequest{Id: id})
		if err != nil {
			return nil, err
		}
		if t := got.GetTask(); changed != nil && (seen == nil || t.GetState() != seen.GetState() ||
			!proto.Equal(t.GetProgress(), seen.GetProgress()) || t.GetAttempts() != seen.GetAttempts()) {
			changed(t)
			seen = t
		}
		switch got.GetTask().GetState() {
		case "done":
			return got, nil
		case "failed":
			return got, fmt.Errorf("%w: %s", errTaskFailed, got.GetTask().GetError())
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "task %s is still %s after --timeout (ADMIN_TIMEOUT); see it with: master admin get %s",
				id, got.GetTask().GetState(), id)
		case <-tick.C:
		}
	}
}

// adminCall is one AdminService call of a subcommand.
type adminCall func(ctx context.Context, c tidemarkv1.AdminServiceClient, args []string) (proto.Message, error)

// run makes a subcommand's RunE: it connects, calls, and prints the answer in the
// chosen format. A failed call is an error with the status code and the master's
// message.
func (f *adminFlags) run(name string, call adminCall) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if f.output != outputTable && f.output != outputJSON {
			return fmt.Errorf("--output (ADMIN_OUTPUT) %q: want table or json", f.output)
		}
		cred, err := f.auth.Client()
		if err != nil {
			return err
		}
		conn, err := grpc.NewClient(f.addr, auth.DialOptions(cred.Token, cred.TLS)...)
		if err != nil {
			return fmt.Errorf("master at %s (--addr, MASTER_ADDR): %w", f.addr, err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
		defer cancel()
		resp, err := call(ctx, tidemarkv1.NewAdminServiceClient(conn), args)
		if errors.Is(err, errTaskFailed) {
			if perr := printResponse(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.output, resp); perr != nil {
				return perr
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		if err != nil {
			st := status.Convert(err)
			if st.Code() == codes.Unauthenticated {
				return fmt.Errorf("%s: master at %s refused the credential: %s (give the master's token with AUTH_TOKEN_FILE or --auth-token-file; with mutual TLS, a client certificate with --tls-cert, --tls-key and --tls-ca)",
					name, f.addr, st.Message())
			}
			return fmt.Errorf("%s: master at %s: %s: %s", name, f.addr, st.Code(), st.Message())
		}
		return printResponse(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.output, resp)
	}
}

// printResponse writes resp as JSON (protojson, field names as in the .proto,
// every field present so scripts see one shape) or as a table. In table mode a
// next page token goes to errOut, so the table itself stays clean.
func printResponse(out, errOut io.Writer, format string, resp proto.Message) error {
	if format == outputJSON {
		data, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", data)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	next := ""
	switch r := resp.(type) {
	case *tidemarkv1.EnqueueTaskResponse:
		writeTask(tw, r.GetTask(), &r.Deduplicated)
	case *tidemarkv1.RequeueMergeResponse:
		writeTask(tw, r.GetTask(), &r.Deduplicated)
	case *tidemarkv1.ForceAdoptResponse:
		m := r.GetShard()
		fmt.Fprintf(tw, "shard:\t%s\n", m.GetShard())
		fmt.Fprintf(tw, "missing_since:\t%s\n", when(m.GetMissingSince()))
		fmt.Fprintf(tw, "orphaned_at:\t%s\n", when(m.GetOrphanedAt()))
		writeTask(tw, r.GetTask(), &r.Deduplicated)
		if r.GetDeduplicated() && r.GetTask().GetState() == "running" {
			// Said here because the table alone reads as if this run adopts it.
			fmt.Fprintf(errOut, "note: a merge of %s was already running; if it had passed its adoptions, the next merge sweep enqueues another that adopts %s\n",
				r.GetTask().GetTarget(), m.GetShard())
		}
	case *tidemarkv1.GetTaskResponse:
		writeTask(tw, r.GetTask(), nil)
	case *tidemarkv1.CancelTaskResponse:
		writeTask(tw, r.GetTask(), nil)
	case *tidemarkv1.ListTasksResponse:
		writeTaskTable(tw, r.GetTasks())
		next = r.GetNextPageToken()
	case *tidemarkv1.ListStatsResponse:
		writeStatsTable(tw, r.GetStats())
		next = r.GetNextPageToken()
	case *tidemarkv1.RescanResponse:
		fmt.Fprintf(tw, "observed %s, wrote %s\n", count(r.GetObserved(), "store"), count(r.GetWritten(), "stats row"))
		if r.GetStats() != nil {
			fmt.Fprintln(tw)
			writeStatsTable(tw, []*tidemarkv1.StatsRow{r.GetStats()})
		}
	case *tidemarkv1.ListWorkersResponse:
		writeWorkerTable(tw, r.GetWorkers())
	default:
		return fmt.Errorf("no table format for %T", resp)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(errOut, "more: --page-token %s\n", next)
	}
	return nil
}

// writeTask writes one task as "field: value" lines; dedup, if set, adds
// whether the enqueue found a live task.
func writeTask(w io.Writer, t *tidemarkv1.Task, dedup *bool) {
	line := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, v) }
	line("id", t.GetId())
	line("kind", t.GetKind())
	line("target", t.GetTarget())
	line("state", t.GetState())
	if dedup != nil {
		line("deduplicated", strconv.FormatBool(*dedup))
	}
	line("enqueued_at", when(t.GetEnqueuedAt()))
	if t.GetDueAt() != nil {
		line("due_at", when(t.GetDueAt()))
	}
	line("started_at", when(t.GetStartedAt()))
	line("finished_at", when(t.GetFinishedAt()))
	line("attempts", strconv.Itoa(int(t.GetAttempts())))
	line("depends_on", orDash(strings.Join(t.GetDependsOn(), ", ")))
	if t.GetFencingToken() != 0 {
		line("fencing_token", strconv.FormatInt(t.GetFencingToken(), 10))
	}
	line("stats", taskStats(t.GetStats()))
	if e := t.GetExport(); e != nil {
		line("destination", e.GetDestination())
		if e.GetVersion() != 0 {
			line("version", strconv.FormatUint(e.GetVersion(), 10))
		}
		line("columns", orDash(strings.Join(e.GetColumns(), ",")))
		line("filter", orDash(e.GetFilter()))
	}
	if t.GetProgress() != nil {
		line("progress", progressText(t.GetProgress()))
	}
	if t.GetCancelRequested() {
		line("cancel_requested", "true")
	}
	if x := t.GetExported(); x != nil {
		line("manifest", x.GetManifest())
		line("feed_cursor", orDash(x.GetFeedCursor()))
	}
	line("detail", orDash(t.GetDetail()))
	line("error", orDash(t.GetError()))
}

// progressText is a run's progress in words: "1,200 of ~5,000 rows, 1 file,
// 3.1 MiB (on w1)".
func progressText(p *tidemarkv1.TaskProgress) string {
	rows := humanize.Comma(p.GetRows())
	if p.GetEstimate() > 0 {
		rows += " of ~" + humanize.Comma(p.GetEstimate())
	}
	text := fmt.Sprintf("%s rows, %s, %s", rows, count(p.GetFiles(), "file"), humanize.IBytes(uint64(max(p.GetBytes(), 0))))
	if p.GetWorker() != "" {
		text += " (on " + p.GetWorker() + ")"
	}
	return text
}

// progressLine is one line of a --wait: the task's state, attempt and progress.
func progressLine(t *tidemarkv1.Task) string {
	line := fmt.Sprintf("%s %s", t.GetId(), t.GetState())
	if t.GetAttempts() > 1 {
		line += fmt.Sprintf(" (attempt %d)", t.GetAttempts())
	}
	if t.GetProgress() != nil {
		line += ": " + progressText(t.GetProgress())
	}
	if t.GetState() == "queued" && t.GetDetail() != "" {
		line += ": " + oneLine(t.GetDetail())
	}
	return line
}

func writeTaskTable(w io.Writer, list []*tidemarkv1.Task) {
	fmt.Fprintln(w, "ID\tKIND\tTARGET\tSTATE\tATTEMPTS\tENQUEUED\tFINISHED\tSTATS\tRESULT")
	for _, t := range list {
		result := t.GetDetail()
		if t.GetError() != "" {
			result = t.GetError()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.GetId(), t.GetKind(), t.GetTarget(), t.GetState(),
			t.GetAttempts(), when(t.GetEnqueuedAt()), when(t.GetFinishedAt()), taskStats(t.GetStats()), orDash(oneLine(result)))
	}
}

// taskStats is a task's non-zero stats as name=value pairs, in the order and
// with the names of TaskStats (those of -o json and of the etcd record), "-"
// when it has none: "workers=3 workers_merged=3 generations_merged=12".
func taskStats(s *tidemarkv1.TaskStats) string {
	m := s.ProtoReflect()
	fields := m.Descriptor().Fields()
	var pairs []string
	for i := range fields.Len() {
		if fd := fields.Get(i); m.Has(fd) {
			pairs = append(pairs, fmt.Sprintf("%s=%v", fd.Name(), m.Get(fd).Interface()))
		}
	}
	return orDash(strings.Join(pairs, " "))
}

func writeStatsTable(w io.Writer, rows []*tidemarkv1.StatsRow) {
	fmt.Fprintln(w, "TARGET\tVERSION\tROWS\tFRAGMENTS\tPENDING_GENERATIONS\tPENDING_BY_SHARD\tACTIVE_SHARDS\tMISSING\tLAST_UPDATED\tSCANNED_AT")
	for _, r := range rows {
		shards := make([]string, 0, len(r.GetPendingByShard()))
		for s, n := range r.GetPendingByShard() {
			shards = append(shards, fmt.Sprintf("%s=%d", s, n))
		}
		sort.Strings(shards)
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.GetTarget(), r.GetVersion(), r.GetRowCount(),
			r.GetFragmentCount(), r.GetPendingWalGenerations(), orDash(strings.Join(shards, ",")),
			activeShards(r), missingShards(r.GetMissingShards()), when(r.GetLastUpdated()), when(r.GetScannedAt()))
	}
}

// activeShards is "w1,w2", and "+N retired" for the shards adopted and retired.
func activeShards(r *tidemarkv1.StatsRow) string {
	s := strings.Join(r.GetActiveShards(), ",")
	if retired := r.GetShards() - int64(len(r.GetActiveShards())); retired > 0 {
		s = strings.TrimSpace(s + fmt.Sprintf(" +%d retired", retired))
	}
	return orDash(s)
}

// missingShards is each missing shard with since when, and whether it is orphaned
// or from when it will be: "w3 since 2025-01-02T03:04:05Z, orphaned".
func missingShards(ms []*tidemarkv1.MissingShard) string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		state := "orphaned"
		if !m.GetOrphaned() {
			state = "orphaned at " + when(m.GetOrphanedAt())
		}
		out = append(out, fmt.Sprintf("%s since %s, %s", m.GetShard(), when(m.GetMissingSince()), state))
	}
	return orDash(strings.Join(out, "; "))
}

func writeWorkerTable(w io.Writer, ws []*tidemarkv1.WorkerInfo) {
	fmt.Fprintln(w, "INSTANCE\tGRPC_ADDR\tHTTP_ADDR\tVERSION\tSTARTED\tSOURCE")
	for _, x := range ws {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", x.GetInstanceId(), x.GetGrpcAddr(), orDash(x.GetHttpAddr()),
			orDash(x.GetVersion()), when(x.GetStartedAt()), x.GetSource())
	}
}

// when formats a timestamp in UTC to the second, "-" when unset.
func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// count is n and noun, plural unless n is 1: "1 store", "0 stats rows".
func count(n int64, noun string) string { return english.Plural(int(n), noun, noun+"s") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row on one line whatever a runner's error says.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
