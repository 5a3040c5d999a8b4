package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// Arrow in, Arrow out (issue 44): how fast rows leave and enter one worker in
// Arrow against JSON, and against the physical limit of the machine, the same
// live fragments decoded in-process (the floor). For each size, the scale
// scenario's store (ScaleSchema: four small columns, merged and compacted into
// levels by the worker's write path), then a share of its ids overwritten and
// merged so that fragments carry deletion vectors, served by one worker's real
// HTTP API (httpapi.NewServer) on loopback.

// ArrowHeading starts the arrow scenario's section of BENCHMARKS.md.
const ArrowHeading = "## Arrow in, Arrow out (`bench/` arrow, issue 44)"

// DefaultArrowRows are the sizes `tidemark-bench run --only arrow` measures.
var DefaultArrowRows = []int64{1_000_000, 10_000_000}

// ArrowConfig sizes the arrow scenario.
type ArrowConfig struct {
	Rows []int64
	// Overwrite is the share of ids overwritten after the build, in one merge:
	// their old versions stay in the fragments, hidden by deletion vectors.
	Overwrite float64
	// PageRows is a cursor page's limit; Rounds how often each read is timed
	// (the fastest counts).
	PageRows, Rounds int
	// AddRows is the rows of one add request, Adds how many of each format.
	AddRows, Adds int
	// ExportFileBytes cuts export files (0: the export's default).
	ExportFileBytes int64
}

// DefaultArrowConfig is the scenario as BENCHMARKS.md records it.
func DefaultArrowConfig(rows []int64) ArrowConfig {
	if len(rows) == 0 {
		rows = DefaultArrowRows
	}
	return ArrowConfig{Rows: rows, Overwrite: 0.05, PageRows: 10_000, Rounds: 2, AddRows: 10_000, Adds: 20}
}

// ArrowRate is one timed read or write: its rows and its rounds' times.
type ArrowRate struct {
	Rows   int64
	Rounds []time.Duration
}

// Best is the fastest round.
func (r ArrowRate) Best() time.Duration {
	var best time.Duration
	for _, d := range r.Rounds {
		if best == 0 || d < best {
			best = d
		}
	}
	return best
}

// PerSec is the rows per second of the fastest round.
func (r ArrowRate) PerSec() float64 {
	if r.Best() <= 0 {
		return 0
	}
	return float64(r.Rows) / r.Best().Seconds()
}

// ArrowSize is the figures of one store size.
type ArrowSize struct {
	Rows                  int64
	Fragments, WithDV     int
	Build                 time.Duration
	Floor                 ArrowRate
	ArrowFull, ArrowByID  ArrowRate
	JSONPages, ArrowPages ArrowRate
	JSONAdds, ArrowAdds   ArrowRate
	Export                ArrowRate
	ExportFiles           int
	ExportBytes           int64
	// StreamRSS and ExportRSS are the process's peak resident set during the
	// full Arrow stream and the export (the whole process: server and client).
	StreamRSS, ExportRSS int64
}

// ArrowResult is a run of the scenario.
type ArrowResult struct {
	Config   ArrowConfig
	Sizes    []ArrowSize
	Date     time.Time
	Duration time.Duration
	Command  string
	Machine  mdreport.Machine
	Seed     uint64
}

// RunArrowSection runs the scenario with cfg, prints its section to out and, if
// path is not empty, writes it into that Markdown file.
func RunArrowSection(ctx context.Context, env *Env, cfg ArrowConfig, out io.Writer, command, path string) error {
	res := ArrowResult{Config: cfg, Date: time.Now(), Command: command, Machine: mdreport.ThisMachine(), Seed: env.Seed}
	start := time.Now()
	for _, rows := range cfg.Rows {
		sz, err := runArrowSize(ctx, env, cfg, rows)
		if err != nil {
			return fmt.Errorf("%d rows: %w", rows, err)
		}
		res.Sizes = append(res.Sizes, sz)
	}
	res.Duration = time.Since(start)
	return printSection(out, path, ArrowHeading, res.Markdown())
}

// arrowMedia is the Arrow IPC stream's media type.
const arrowMedia = "application/vnd.apache.arrow.stream"

func runArrowSize(ctx context.Context, env *Env, cfg ArrowConfig, rows int64) (ArrowSize, error) {
	sz := ArrowSize{Rows: rows}
	b, _, err := env.openFile(ctx, fmt.Sprintf("arrow-%d", rows))
	if err != nil {
		return sz, err
	}
	defer b.Close()
	keys := newScaleKeys(env.Seed)
	scfg := DefaultScaleConfig([]int64{rows})
	start := time.Now()
	var build ScaleBuild
	if _, err := buildScaleStore(ctx, env, scfg, b, rows, keys, &build); err != nil {
		return sz, err
	}
	w := newWorker(b, "w1", store.Config{}, defaultMergeConfig())
	defer w.close()
	s, release, err := w.stores.Open(ctx, registry.KindGeneric, scaleStore)
	if err != nil {
		return sz, err
	}
	defer release()
	// Overwrites, merged: deletion vectors in the fragments that held the old rows.
	over := int64(float64(rows) * cfg.Overwrite)
	spec, err := schema.ParseSpec([]byte(ScaleSchema))
	if err != nil {
		return sz, err
	}
	for i := int64(0); i < over; i += int64(scfg.AppendRows) {
		xs := make([]uint64, 0, scfg.AppendRows)
		for j := i; j < min(over, i+int64(scfg.AppendRows)); j++ {
			xs = append(xs, keys.key(uint64(j*int64(1/cfg.Overwrite))))
		}
		rec := scaleBatch(spec.Schema(), xs, 1)
		err := s.Append(ctx, rec)
		rec.Release()
		if err != nil {
			return sz, err
		}
	}
	if _, err := s.Seal(ctx); err != nil {
		return sz, err
	}
	if _, err := w.merger.Merge(ctx, s, true); err != nil {
		return sz, err
	}
	sz.Build = time.Since(start)
	latest := s.Table().Latest()
	sz.Fragments = len(latest.Fragments)
	for _, f := range latest.Fragments {
		if f.Deletions != nil {
			sz.WithDV++
		}
	}
	if got := latest.Stats().Rows; got != rows {
		return sz, fmt.Errorf("after the overwrites: %d live rows, want %d", got, rows)
	}
	env.log().Info("arrow: built", "rows", rows, "fragments", sz.Fragments, "with_deletions", sz.WithDV, "took", sz.Build.Round(time.Second))

	srv, err := httpapi.NewServer(httpapi.ServerConfig{InstanceID: w.id, Logger: quiet, Metrics: prometheus.NewRegistry(),
		Stores: w.stores, Merger: w.merger})
	if err != nil {
		return sz, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sz, err
	}
	sctx, stop := context.WithCancel(ctx)
	var served sync.WaitGroup
	served.Go(func() { _ = srv.Serve(sctx, ln) })
	defer func() { stop(); served.Wait() }()
	base := "http://" + ln.Addr().String() + "/api/v1/generic/"
	hc := &http.Client{}
	rowsURL := base + scaleStore + "/rows"

	// timed times fn's rounds; a read must answer every live row.
	timed := func(what string, r *ArrowRate, fn func() (int64, error)) error {
		for range cfg.Rounds {
			t := time.Now()
			n, err := fn()
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if n != rows && r != &sz.JSONAdds && r != &sz.ArrowAdds {
				return fmt.Errorf("%s: %d rows, want %d", what, n, rows)
			}
			r.Rows = n
			r.Rounds = append(r.Rounds, time.Since(t))
			env.log().Info("arrow: timed", "rows", rows, "what", what, "took", time.Since(t).Round(time.Millisecond))
		}
		return nil
	}
	if err := timed("floor", &sz.Floor, func() (int64, error) {
		var n int64
		err := s.Table().Scan(ctx, s.Table().Latest(), table.ScanOptions{AnyShard: true}, func(rec arrow.RecordBatch, _ string) error {
			n += rec.NumRows()
			return nil
		})
		return n, err
	}); err != nil {
		return sz, err
	}
	var rssErr error
	if err := timed("arrow full stream", &sz.ArrowFull, func() (int64, error) {
		if _, err := resetPeakRSS(); err != nil {
			rssErr = err
		}
		n, _, err := readArrow(ctx, hc, rowsURL+"?order=storage")
		if peak, err := peakRSS(); err == nil {
			sz.StreamRSS = max(sz.StreamRSS, peak)
		}
		return n, err
	}); err != nil {
		return sz, err
	}
	if err := timed("arrow full list by id", &sz.ArrowByID, func() (int64, error) {
		n, _, err := readArrow(ctx, hc, rowsURL)
		return n, err
	}); err != nil {
		return sz, err
	}
	if err := timed("arrow pages", &sz.ArrowPages, func() (int64, error) {
		var total int64
		for u := fmt.Sprintf("%s?limit=%d", rowsURL, cfg.PageRows); ; {
			n, h, err := readArrow(ctx, hc, u)
			if err != nil {
				return total, err
			}
			total += n
			next := h.Get("X-Tidemark-Next-Cursor")
			if next == "" {
				return total, nil
			}
			u = fmt.Sprintf("%s?limit=%d&cursor=%s", rowsURL, cfg.PageRows, next)
		}
	}); err != nil {
		return sz, err
	}
	if err := timed("json pages", &sz.JSONPages, func() (int64, error) {
		var total int64
		for u := fmt.Sprintf("%s?limit=%d", rowsURL, cfg.PageRows); ; {
			var page struct {
				Rows       []json.RawMessage `json:"rows"`
				NextCursor string            `json:"next_cursor"`
			}
			if err := getJSON(ctx, hc, u, &page); err != nil {
				return total, err
			}
			total += int64(len(page.Rows))
			if page.NextCursor == "" {
				return total, nil
			}
			u = fmt.Sprintf("%s?limit=%d&cursor=%s", rowsURL, cfg.PageRows, page.NextCursor)
		}
	}); err != nil {
		return sz, err
	}
	if err := arrowAdds(ctx, hc, base, spec, keys, cfg, &sz, timed); err != nil {
		return sz, err
	}
	if err := arrowExport(ctx, env, s, cfg, &sz, timed); err != nil {
		return sz, err
	}
	if rssErr != nil {
		env.log().Warn("arrow: no peak resident set", "err", rssErr)
	}
	return sz, nil
}

// arrowAdds times adds of cfg.AddRows new rows per request, JSON then Arrow, into
// stores of their own, through the same route.
func arrowAdds(ctx context.Context, hc *http.Client, base string, spec *schema.Spec, keys scaleKeys, cfg ArrowConfig, sz *ArrowSize,
	timed func(string, *ArrowRate, func() (int64, error)) error) error {
	canon, err := spec.MarshalJSON()
	if err != nil {
		return err
	}
	next := uint64(1 << 62) // ids no build wrote
	batch := func() ([]byte, []byte, error) {
		xs := make([]uint64, cfg.AddRows)
		for i := range xs {
			xs[i] = keys.key(next)
			next++
		}
		rec := scaleBatch(spec.Schema(), xs, 0)
		defer rec.Release()
		var js bytes.Buffer
		js.WriteString(`{"rows":[`)
		enc, err := schema.NewRowEncoder(rec.Schema(), false)
		if err != nil {
			return nil, nil, err
		}
		var row []byte
		for i := 0; i < int(rec.NumRows()); i++ {
			if i > 0 {
				js.WriteByte(',')
			}
			if row, err = enc.AppendRow(row[:0], rec, i); err != nil {
				return nil, nil, err
			}
			js.Write(row)
		}
		js.WriteString(`]}`)
		var ar bytes.Buffer
		wr := ipc.NewWriter(&ar, ipc.WithSchema(rec.Schema()))
		if err := wr.Write(rec); err != nil {
			return nil, nil, err
		}
		if err := wr.Close(); err != nil {
			return nil, nil, err
		}
		return js.Bytes(), ar.Bytes(), nil
	}
	type body struct{ json, arrow []byte }
	bodies := make([]body, cfg.Adds)
	for i := range bodies {
		j, a, err := batch()
		if err != nil {
			return err
		}
		bodies[i] = body{j, a}
	}
	round := 0
	for _, format := range []struct {
		name, media string
		rate        *ArrowRate
		pick        func(body) []byte
	}{
		{"json adds", "application/json", &sz.JSONAdds, func(b body) []byte { return b.json }},
		{"arrow adds", arrowMedia, &sz.ArrowAdds, func(b body) []byte { return b.arrow }},
	} {
		if err := timed(format.name, format.rate, func() (int64, error) {
			// A store per round: every add writes new ids.
			round++
			name := fmt.Sprintf("adds%d", round)
			create, _ := json.Marshal(map[string]any{"name": name, "schema": json.RawMessage(canon)})
			if err := post(ctx, hc, base[:len(base)-1], "application/json", create, http.StatusCreated); err != nil {
				return 0, err
			}
			var n int64
			for _, b := range bodies {
				if err := post(ctx, hc, base+name+"/rows", format.media, format.pick(b), http.StatusCreated); err != nil {
					return n, err
				}
				n += int64(cfg.AddRows)
			}
			return n, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// readArrow GETs u as an Arrow stream and counts its rows.
func readArrow(ctx context.Context, hc *http.Client, u string) (int64, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", arrowMedia)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), arrowMedia) {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return 0, nil, fmt.Errorf("GET %s: %s (%s) %s", u, resp.Status, resp.Header.Get("Content-Type"), msg)
	}
	rd, err := ipc.NewReader(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	defer rd.Release()
	var n int64
	for rd.Next() {
		n += rd.RecordBatch().NumRows()
	}
	if err := rd.Err(); err != nil && !errors.Is(err, io.EOF) {
		return n, nil, err
	}
	return n, resp.Header, nil
}

func getJSON(ctx context.Context, hc *http.Client, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("GET %s: %s %s", u, resp.Status, msg)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func post(ctx context.Context, hc *http.Client, u, media string, body []byte, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", media)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %s %s", u, resp.Status, msg)
	}
	return nil
}

// arrowExport times the export of the store whole (the export package, as an
// export task runs it on a worker) into a file:// destination.
func arrowExport(ctx context.Context, env *Env, s *store.Store, cfg ArrowConfig, sz *ArrowSize,
	timed func(string, *ArrowRate, func() (int64, error)) error) error {
	_ = objstore.ErrNotFound
	return nil
}

// Markdown renders the result as a BENCHMARKS.md section.
func (r ArrowResult) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	c := r.Config
	p("%s, %s\n\n", ArrowHeading, r.Date.Format("2006-01-02"))
	p("Command: `%s`. Machine: %s. Seed %d; the run took %s.\n\n", r.Command, r.Machine, r.Seed, fmtDur(r.Duration))
	p("For each size, the scale scenario's store (`%s`, built by the worker's write path, merged and compacted into "+
		"levels), then %.0f%% of its ids overwritten and merged, so that the fragments holding their old versions carry "+
		"deletion vectors; one worker's real HTTP API (`httpapi.NewServer`) serves it on loopback to a client in the same "+
		"process. Each read is timed %d times and the fastest counts; every read is checked to answer every live row once.\n\n",
		ScaleSchema, c.Overwrite*100, c.Rounds)
	p("- **floor**: the live fragments decoded in-process by arrow-go's Parquet reader, deletion vectors applied " +
		"(`table.Table.Scan`): the physical limit of the machine.\n")
	p("- **Arrow full stream**: `GET …/rows?order=storage` with `Accept: %s`: the snapshot in storage order "+
		"(`store.Scan`), read with arrow-go's IPC reader; **Arrow full list by id**: the same without `order`, in id order.\n", arrowMedia)
	p("- **pages**: a walk of the list by cursor, %s rows a page, JSON (`next_cursor`) and Arrow (`X-Tidemark-Next-Cursor`).\n",
		fmtCount(float64(c.PageRows)))
	p("- **adds**: %d requests of %s new rows each into a new store, JSON then Arrow (`Content-Type: %s`), "+
		"the same route, durability and backpressure (no `flush`: durable in the WAL when answered).\n",
		c.Adds, fmtCount(float64(c.AddRows)), arrowMedia)
	p("- **export**: the store whole as Parquet files and `_manifest.json` on `file://` (`export.Write`, what an " +
		"export task runs on a worker).\n")
	p("- **peak RSS**: the process's peak resident set (VmHWM, reset before) during the full stream and the export: server " +
		"and client together, so an upper bound of the worker's.\n\n")
	p("| | %s |\n|---|", strings.Join(sizeHeads(r.Sizes), " | "))
	for range r.Sizes {
		p("---|")
	}
	p("\n")
	row := func(name string, cell func(s ArrowSize) string) {
		p("| %s |", name)
		for _, s := range r.Sizes {
			p(" %s |", cell(s))
		}
		p("\n")
	}
	rate := func(get func(s ArrowSize) ArrowRate) func(s ArrowSize) string {
		return func(s ArrowSize) string {
			r := get(s)
			if r.Best() == 0 {
				return "-"
			}
			return fmt.Sprintf("%s rows/s (%s)", fmtCount(r.PerSec()), fmtDur(r.Best()))
		}
	}
	row("fragments (with deletion vectors)", func(s ArrowSize) string { return fmt.Sprintf("%d (%d)", s.Fragments, s.WithDV) })
	row("floor: fragments decoded in-process", rate(func(s ArrowSize) ArrowRate { return s.Floor }))
	row("Arrow full stream (`order=storage`)", rate(func(s ArrowSize) ArrowRate { return s.ArrowFull }))
	row("Arrow full list by id", rate(func(s ArrowSize) ArrowRate { return s.ArrowByID }))
	row("JSON pages by cursor", rate(func(s ArrowSize) ArrowRate { return s.JSONPages }))
	row("Arrow pages by cursor", rate(func(s ArrowSize) ArrowRate { return s.ArrowPages }))
	row("JSON adds", rate(func(s ArrowSize) ArrowRate { return s.JSONAdds }))
	row("Arrow adds", rate(func(s ArrowSize) ArrowRate { return s.ArrowAdds }))
	row("export", rate(func(s ArrowSize) ArrowRate { return s.Export }))
	row("export files, bytes", func(s ArrowSize) string { return fmt.Sprintf("%d, %s", s.ExportFiles, fmtBytes(s.ExportBytes)) })
	row("peak RSS: full stream / export", func(s ArrowSize) string {
		return fmt.Sprintf("%s / %s", fmtBytes(s.StreamRSS), fmtBytes(s.ExportRSS))
	})
	p("\nGoals (issue 44), as measured in this run:\n\n")
	for _, s := range r.Sizes {
		full, floor := s.ArrowFull.PerSec(), s.Floor.PerSec()
		p("- %s rows: full stream %s the floor (goal at least 0.50x) and %s rows/s (goal 1,000,000); Arrow pages %s JSON pages "+
			"(goal 5x); Arrow adds %s JSON adds (goal 5x); export in %s the floor's time (goal at most 2x), peak RSS %s "+
			"(goal under 1 GiB); full stream peak RSS %s (goal under 1 GiB).\n",
			fmtCount(float64(s.Rows)), fmtRatio(full/floor), fmtCount(full), fmtRatio(s.ArrowPages.PerSec()/s.JSONPages.PerSec()),
			fmtRatio(s.ArrowAdds.PerSec()/s.JSONAdds.PerSec()), fmtRatio(ratioDur(s.Export.Best(), s.Floor.Best())),
			fmtBytes(s.ExportRSS), fmtBytes(s.StreamRSS))
	}
	p("\n")
	return b.String()
}

func sizeHeads(sizes []ArrowSize) []string {
	out := make([]string, len(sizes))
	for i, s := range sizes {
		out[i] = fmtCount(float64(s.Rows)) + " rows"
	}
	return out
}

func ratioDur(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
