package dashboard

import (
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// pageNames are the templates in assets/pages, each rendered inside
// assets/layout.html.
var pageNames = []string{"login", "error", "overview", "stores", "store", "tasks", "task"}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/pages/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		out[name] = t
	}
	if _, err := fs.Stat(assets, "assets/static/app.js"); err != nil {
		return nil, fmt.Errorf("dashboard: assets: %w", err)
	}
	return out, nil
}

// funcs are the formatting helpers of the templates. Each returns plain text;
// html/template escapes it.
var funcs = template.FuncMap{
	"num": func(v any) string {
		switch n := v.(type) {
		case int:
			return humanize.Comma(int64(n))
		case int64:
			return humanize.Comma(n)
		case uint64:
			return humanize.Comma(int64(n))
		case float64:
			return humanize.CommafWithDigits(n, 2)
		}
		return fmt.Sprint(v)
	},
	"bytes":  func(n int64) string { return humanize.IBytes(uint64(max(n, 0))) },
	"ago":    ago,
	"ts":     formatTime,
	"pts":    func(t *timestamppb.Timestamp) time.Time { return protoTime(t) },
	"trunc":  truncate,
	"short":  shortID,
	"lower":  strings.ToLower,
	"result": taskResult,
	"redact": exportfmt.Redact,
	// at pairs a time with a task for the "storetask" template.
	"at": func(now time.Time, t *tasks.Task) struct {
		Now time.Time
		T   *tasks.Task
	} {
		return struct {
			Now time.Time
			T   *tasks.Task
		}{now, t}
	},
}

func protoTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// formatTime is a UTC timestamp to the second, or "-" for none.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ago says how long before now t was, in the largest unit that fits.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// truncate shortens s to n runes, marking the cut.
func truncate(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// shortID abbreviates a task id (a UUIDv7, whose first digits are a time shared
// by tasks enqueued together) to its start and its random end.
func shortID(id string) string {
	if len(id) <= 14 {
		return id
	}
	return id[:8] + "…" + id[len(id)-4:]
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, for axis maxima.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
