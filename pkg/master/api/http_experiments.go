package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Experiment list paging of GET /api/v1/experiments: the reference's default
// page, and the largest page one answer holds (a larger limit is lowered, and the
// answer's limit says so).
const (
	DefaultExperimentPage = 50
	MaxExperimentPage     = stats.MaxPageLimit
)

// RescanTimeout bounds POST /api/v1/rescan, an observation of every store, under
// the HTTP server's one-minute write timeout. Stores it leaves unobserved keep
// their previous rows until the next scan.
const RescanTimeout = 50 * time.Second

// entryReads is how many registry entries an experiment list reads at once.
const entryReads = 8

// ExperimentSummary is one store as GET /api/v1/experiments lists it: the
// reference's ExperimentSummary, from the store's stats row (timestamps in Unix
// milliseconds), followed by Tidemark's own fields of the row. Name is the
// store's target: "<name>" for a rollout store, "generic:<name>" for a generic one.
type ExperimentSummary struct {
	Name                  string `json:"name"`
	URI                   string `json:"uri"`
	RowCount              int64  `json:"row_count"`
	FragmentCount         int64  `json:"fragment_count"`
	LastUpdated           int64  `json:"last_updated"`
	PendingWALGenerations int64  `json:"pending_wal_generations"`
	// LastCompaction is when the newest compact task the task history holds for
	// the store finished (Unix ms); left out when it holds none. TotalCompactions
	// counts those tasks: both reach as far back as TASK_HISTORY_* keeps tasks.
	LastCompaction   *int64 `json:"last_compaction,omitempty"`
	TotalCompactions int64  `json:"total_compactions"`
	ScannedAt        int64  `json:"scanned_at"`

	Kind            registry.Kind  `json:"kind"`
	Version         uint64         `json:"version"`
	Bytes           int64          `json:"bytes"`
	DeletedRows     int64          `json:"deleted_rows"`
	Shards          int            `json:"shards"`
	PendingWALRows  int64          `json:"pending_wal_rows"`
	PendingWALBytes int64          `json:"pending_wal_bytes"`
	PendingByShard  map[string]int `json:"pending_by_shard,omitempty"`
	ActiveShards    []string       `json:"active_shards,omitempty"`
}

// ExperimentList is the body of GET /api/v1/experiments (the reference's
// ExperimentListResponse): a page of stores and how many match the search.
type ExperimentList struct {
	Experiments []ExperimentSummary `json:"experiments"`
	Total       int64               `json:"total"`
	Limit       int                 `json:"limit"`
	Offset      int                 `json:"offset"`
}

// RescanAnswer is the body of POST /api/v1/rescan: the reference's scanned (the
// stores observed) and what the scan did besides.
type RescanAnswer struct {
	Scanned int `json:"scanned"`
	// Stores is how many stores are registered; Errors how many of them could
	// not be observed (their rows keep their previous values).
	Stores  int   `json:"stores"`
	Changed int   `json:"changed"`
	Deleted int   `json:"deleted"`
	Errors  int   `json:"errors"`
	TookMS  int64 `json:"took_ms"`
}

// errScanElsewhere refuses a rescan while another master replica scans: the
// coordination lock lets one replica scan at a time.
var errScanElsewhere = errclass.New(errclass.Precondition, "another master replica is scanning")

// listExperiments answers one page of stores, in name order, whose name contains
// ?search (case-sensitive, as in the reference).
func (a *httpAPI) listExperiments(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	if err := onlyParams(q, "search", "limit", "offset"); err != nil {
		return nil, err
	}
	limit, err := pageParam(q.Get("limit"), "limit", DefaultExperimentPage)
	if err != nil {
		return nil, err
	}
	limit = min(limit, MaxExperimentPage)
	offset, err := pageParam(q.Get("offset"), "offset", 0)
	if err != nil {
		return nil, err
	}
	search := q.Get("search")
	out := ExperimentList{Experiments: []ExperimentSummary{}, Limit: limit, Offset: offset}
	var rows []stats.Row
	// One stats page at a time: memory is a page and the answer.
	for p := (scanner.Page{Limit: stats.MaxPageLimit}); ; {
		page, next, err := a.cfg.Scanner.Stats(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, row := range page {
			if !strings.Contains(row.Target.String(), search) {
				continue
			}
			if out.Total >= int64(offset) && len(rows) < limit {
				rows = append(rows, row)
			}
			out.Total++
		}
		if next == "" {
			break
		}
		p.PageToken = next
	}
	sums, err := a.summaries(ctx, rows)
	if err != nil {
		return nil, err
	}
	out.Experiments = append(out.Experiments, sums...)
	return out, nil
}

// getExperiment answers one store's summary from its stats row; ?fresh=true
// observes the store first.
func (a *httpAPI) getExperiment(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	if err := onlyParams(q, "fresh"); err != nil {
		return nil, err
	}
	fresh := false
	if v := q.Get("fresh"); v != "" {
		var err error
		if fresh, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: fresh %q is not a boolean", tasks.ErrInvalidArgument, v)
		}
	}
	name := r.PathValue("name")
	target, err := registry.ParseTarget(name)
	if err != nil {
		if fresh {
			return nil, fmt.Errorf("rescan: %w: %w", tasks.ErrInvalidArgument, err)
		}
		return nil, fmt.Errorf("%w: %w", tasks.ErrInvalidArgument, err)
	}
	var row stats.Row
	if fresh {
		row, err = a.cfg.Scanner.Rescan(ctx, target)
		if errors.Is(err, registry.ErrNotFound) {
			return nil, reworded{fmt.Sprintf("experiment '%s' does not exist", name), err}
		}
	} else {
		row, err = a.cfg.Scanner.Row(ctx, target)
		if errors.Is(err, stats.ErrRowNotFound) {
			return nil, reworded{fmt.Sprintf("experiment '%s' not found in stats", name), err}
		}
	}
	if err != nil {
		return nil, err
	}
	sums, err := a.summaries(ctx, []stats.Row{row})
	if err != nil {
		return nil, err
	}
	return sums[0], nil
}

// rescan observes every store now and answers how many it observed. Only
// RescanTimeout bounds it: observing takes as long as the stores make it.
func (a *httpAPI) rescan(ctx context.Context, r *http.Request) (any, error) {
	if err := onlyParams(r.URL.Query()); err != nil {
		return nil, err
	}
	sum, err := a.cfg.Scanner.Scan(ctx)
	if err != nil {
		return nil, err
	}
	if sum.Skipped {
		return nil, fmt.Errorf("rescan: %w (%s); send the rescan to that replica, or wait for its scan", errScanElsewhere, sum.SkipReason)
	}
	if sum.Errors > 0 {
		a.cfg.Logger.Warn("rescan left stores unobserved; their rows keep their previous values", "errors", sum.Errors)
	}
	return RescanAnswer{
		Scanned: sum.Probed + sum.Observed, Stores: sum.Stores, Changed: sum.Changed, Deleted: sum.Deleted,
		Errors: sum.Errors, TookMS: sum.Duration.Milliseconds(),
	}, nil
}

// summaries converts stats rows, with each store's URI from its registry entry
// and its compactions from the task history.
func (a *httpAPI) summaries(ctx context.Context, rows []stats.Row) ([]ExperimentSummary, error) {
	out := make([]ExperimentSummary, len(rows))
	index := make(map[registry.Target]int, len(rows))
	for i, row := range rows {
		out[i] = ExperimentSummary{
			Name: row.Target.String(), RowCount: row.RowCount, FragmentCount: int64(row.FragmentCount),
			LastUpdated: row.LastUpdated.UnixMilli(), PendingWALGenerations: int64(row.PendingWALGenerations),
			ScannedAt: row.ScannedAt.UnixMilli(), Kind: row.Kind, Version: row.Version, Bytes: row.Bytes,
			DeletedRows: row.DeletedRows, Shards: row.Shards, PendingWALRows: row.PendingWALRows,
			PendingWALBytes: row.PendingWALBytes, PendingByShard: row.PendingByShard, ActiveShards: row.ActiveShards,
		}
		index[row.Target] = i
	}
	if len(rows) == 0 {
		return out, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(entryReads)
	for i, row := range rows {
		g.Go(func() error {
			e, err := a.cfg.Admin.cfg.Registry.Get(gctx, row.Kind, row.Name)
			switch {
			case errors.Is(err, registry.ErrNotFound):
				// Deleted since the last scan, which drops its row: where it lived.
				out[i].URI = storeURI(a.cfg.DataURL, registry.Dir(row.Kind, row.Name))
			case err != nil:
				return fmt.Errorf("experiment %s: %w", row.Target, err)
			default:
				out[i].URI = storeURI(a.cfg.DataURL, e.URI)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// One walk over the finished compactions (memory: a store page).
	f := tasks.ListFilter{Kind: tasks.KindCompact, State: tasks.StateDone, Limit: tasks.MaxListLimit}
	for {
		list, next, err := a.cfg.Tasks.List(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("compactions: %w", err)
		}
		for _, t := range list {
			i, ok := index[t.Target]
			if !ok {
				continue
			}
			out[i].TotalCompactions++
			if ms := t.FinishedAt.UnixMilli(); out[i].LastCompaction == nil || ms > *out[i].LastCompaction {
				out[i].LastCompaction = &ms
			}
		}
		if next == "" {
			return out, nil
		}
		f.PageToken = next
	}
}

// storeURI is the URL of a store's table directory dir: the bucket's URL
// (credentials removed) joined with dir, or dir alone when the URL is not known.
func storeURI(base, dir string) string {
	u, err := url.Parse(base)
	if base == "" || err != nil || u.Scheme == "" {
		return dir
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + dir
	u.RawPath = ""
	return u.String()
}
