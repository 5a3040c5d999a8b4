package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW, chartH = 640.0, 200.0
	padL, padR     = 64.0, 16.0
	padT, padB     = 14.0, 30.0
)

// chart draws time series over [start, end] as an SVG with a labelled y axis
// (unit) and clock times on the x axis.
type chart struct {
	unit       string
	start, end time.Time
	ymax       float64
	b          strings.Builder
}

func newChart(unit string, start, end time.Time, ymax float64) *chart {
	step := niceCeil(ymax / 4)
	c := &chart{unit: unit, start: start, end: end, ymax: 4 * step}
	fmt.Fprintf(&c.b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, template.HTMLEscapeString(unit))
	c.axes()
	return c
}

func (c *chart) x(t time.Time) float64 {
	span := c.end.Sub(c.start).Seconds()
	f := t.Sub(c.start).Seconds() / span
	return padL + min(max(f, 0), 1)*(chartW-padL-padR)
}

func (c *chart) y(v float64) float64 {
	return chartH - padB - min(max(v/c.ymax, 0), 1)*(chartH-padT-padB)
}

// xTickSteps are the clock intervals the x axis is labelled at: the smallest
// that gives at most six labels.
var xTickSteps = []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour}

// axes draws the grid, the y ticks (0 to ymax in quarters) with the unit, and x
// ticks at whole clock minutes with their UTC time.
func (c *chart) axes() {
	for i := 0; i <= 4; i++ {
		v := c.ymax * float64(i) / 4
		y := c.y(v)
		fmt.Fprintf(&c.b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, padL, y, chartW-padR, y)
		fmt.Fprintf(&c.b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, template.HTMLEscapeString(tickLabel(v)))
	}
	step := xTickSteps[len(xTickSteps)-1]
	for _, s := range xTickSteps {
		if c.end.Sub(c.start)/s <= 6 {
			step = s
			break
		}
	}
	for t := c.start.Truncate(step); !t.After(c.end); t = t.Add(step) {
		if t.Before(c.start) {
			continue
		}
		x := c.x(t)
		fmt.Fprintf(&c.b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x, chartH-padB, x, chartH-padB+4)
		fmt.Fprintf(&c.b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x, chartH-padB+17, t.UTC().Format("15:04"))
	}
	fmt.Fprintf(&c.b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, padL, chartH-padB, chartW-padR, chartH-padB)
	fmt.Fprintf(&c.b, `<text class="unit" x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`,
		(chartH-padB+padT)/2, (chartH-padB+padT)/2, template.HTMLEscapeString(c.unit))
	fmt.Fprintf(&c.b, `<text class="unit" x="%.1f" y="%.1f" text-anchor="end">UTC</text>`, chartW-padR, chartH-2)
}

// steps draws pts as a step line (a value holds until the next sample) up to end.
func (c *chart) steps(class string, pts []point) {
	if len(pts) == 0 {
		fmt.Fprintf(&c.b, `<text class="empty" x="%.1f" y="%.1f" text-anchor="middle">no samples yet</text>`, (chartW+padL)/2, chartH/2)
		return
	}
	var d strings.Builder
	fmt.Fprintf(&d, "M%.1f %.1f", c.x(pts[0].at), c.y(pts[0].v))
	for _, p := range pts[1:] {
		fmt.Fprintf(&d, "H%.1fV%.1f", c.x(p.at), c.y(p.v))
	}
	fmt.Fprintf(&d, "H%.1f", c.x(c.end))
	fmt.Fprintf(&c.b, `<path class="%s" d="%s"/>`, class, d.String())
}

// bars draws one bar per bucket of width step starting at start.
func (c *chart) bars(class string, values []float64, step time.Duration) {
	for i, v := range values {
		if v <= 0 {
			continue
		}
		t0 := c.start.Add(time.Duration(i) * step)
		x0, x1 := c.x(t0), c.x(t0.Add(step))
		y := c.y(v)
		fmt.Fprintf(&c.b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
			class, x0+0.5, y, max(x1-x0-1, 0.5), chartH-padB-y,
			template.HTMLEscapeString(fmt.Sprintf("%s: %s", t0.UTC().Format("15:04"), tickLabel(v))))
	}
}

func (c *chart) html() template.HTML {
	c.b.WriteString(`</svg>`)
	return template.HTML(c.b.String()) // built only from numbers and escaped text above
}

// tickLabel formats an axis value compactly: 1,200 / 3.5k / 0.25.
func tickLabel(v float64) string {
	switch {
	case v >= 10000:
		s, unit := humanize.ComputeSI(v)
		return humanize.FtoaWithDigits(s, 1) + unit
	case v == float64(int64(v)):
		return humanize.Comma(int64(v))
	}
	return humanize.FtoaWithDigits(v, 2)
}

// Chart window bounds: a chart spans from when the history starts (this master's
// start) to now, at least minWindow so a young history is not a sliver, at most
// HistoryWindow.
const minWindow = 10 * time.Minute

// window is the span a chart shows at now for a history kept since since, and
// how the page names it.
type window struct {
	Start, End time.Time
	Label      string
}

func chartWindow(now, since time.Time) window {
	span := min(max(now.Sub(since), minWindow), HistoryWindow).Round(time.Minute)
	label := "last hour"
	if span < HistoryWindow {
		label = fmt.Sprintf("last %d min", int(span.Minutes()))
	}
	return window{Start: now.Add(-span), End: now, Label: label}
}

// lineChart is a step chart of pts over w.
func lineChart(unit string, w window, pts []point) template.HTML {
	ymax := 0.0
	for _, p := range pts {
		ymax = max(ymax, p.v)
	}
	c := newChart(unit, w.Start, w.End, ymax)
	c.steps("line", pts)
	return c.html()
}

// barChart is a bar per step-long bucket of w (values[0] starts at w.Start).
func barChart(unit string, w window, values []float64, step time.Duration) template.HTML {
	ymax := 0.0
	for _, v := range values {
		ymax = max(ymax, v)
	}
	c := newChart(unit, w.Start, w.End, ymax)
	c.bars("bar", values, step)
	return c.html()
}
