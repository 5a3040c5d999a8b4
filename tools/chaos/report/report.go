// Package report turns the records of a chaos run (one JSON line per campaign, as
// the e2e campaigns append them to TIDEMARK_CHAOS_REPORT) into the results section
// of RELIABILITY.md.
//
// Invariants: only the text between BeginMarker and EndMarker is ever rewritten
// (through tools/mdreport, as bench/ rewrites BENCHMARKS.md); inside it, each
// campaign has its own "### campaign: outcome" block, and a run replaces the blocks
// of the campaigns it ran and keeps the others, so `CHAOS_RUN=stuck make chaos` does not
// erase the figures of the campaigns it skipped.
package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// The markers around the generated section.
const (
	BeginMarker = "<!-- chaos-results:begin (written by scripts/chaos.sh; edit outside the markers) -->"
	EndMarker   = "<!-- chaos-results:end -->"
)

// ErrNoMarkers is returned when a document has no (or broken) result markers.
var ErrNoMarkers = errors.New("no chaos results markers")

// Record is one campaign's outcome in one test.
type Record struct {
	Campaign string    `json:"campaign"`
	Test     string    `json:"test"`
	Figures  []Figure  `json:"figures"`
	Passed   bool      `json:"passed"`
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
}

// Figure is one measured value, in the order the campaign added it.
type Figure struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Run says where the records came from: it heads each campaign block.
type Run struct {
	Command string // e.g. `make chaos`
	Machine string // e.g. "linux amd64, 2 CPUs, go1.26.8"
	Commit  string
	Date    time.Time
}

// Parse reads JSON lines; blank lines are skipped.
func Parse(data []byte) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("record line %d: %w", n, err)
		}
		if r.Campaign == "" {
			return nil, fmt.Errorf("record line %d: no campaign", n)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// Update returns doc with the blocks of recs' campaigns (each a "### campaign:"
// section between the markers) replaced, or added in the order of recs, and every
// other block kept.
func Update(doc []byte, recs []Record, run Run) ([]byte, error) {
	s := string(doc)
	if b, e := strings.Index(s, BeginMarker), strings.Index(s, EndMarker); b < 0 || e < b {
		return nil, fmt.Errorf("%w: want %q ... %q", ErrNoMarkers, BeginMarker, EndMarker)
	}
	for _, name := range campaigns(recs) {
		b, e := strings.Index(s, BeginMarker), strings.Index(s, EndMarker)
		var mine []Record
		for _, r := range recs {
			if r.Campaign == name {
				mine = append(mine, r)
			}
		}
		block := renderBlock(name, mine, run)
		if at, ok := mdreport.Find(s, mdreport.Span{Start: b, End: e}, blockHeading(name)); ok {
			s = mdreport.Replace(s, at, block)
		} else {
			s = s[:e] + block + "\n" + s[e:]
		}
	}
	return []byte(s), nil
}

// blockHeading starts a campaign's block; the outcome follows it.
func blockHeading(campaign string) string { return "### " + campaign + ": " }

func campaigns(recs []Record) []string {
	var names []string
	seen := map[string]bool{}
	for _, r := range recs {
		if !seen[r.Campaign] {
			seen[r.Campaign] = true
			names = append(names, r.Campaign)
		}
	}
	return names
}

// renderBlock writes one campaign's results: a heading with the outcome, the run's
// provenance, and a table of figures per test.
func renderBlock(name string, recs []Record, run Run) string {
	var b strings.Builder
	outcome := "passed"
	for _, r := range recs {
		if !r.Passed {
			outcome = "FAILED"
		}
	}
	fmt.Fprintf(&b, "%s%s\n\n", blockHeading(name), outcome)
	fmt.Fprintf(&b, "`%s` on %s, %s", run.Command, run.Date.UTC().Format("2006-01-02 15:04 UTC"), run.Machine)
	if run.Commit != "" {
		fmt.Fprintf(&b, ", commit %s", run.Commit)
	}
	b.WriteString(".\n")
	for _, r := range recs {
		result := "passed"
		if !r.Passed {
			result = "failed"
		}
		fmt.Fprintf(&b, "\n%s: %s in %s.\n\n| figure | value |\n|---|---|\n", r.Test, result, r.Duration)
		for _, f := range r.Figures {
			fmt.Fprintf(&b, "| %s | %s |\n", mdreport.Cell(f.Name), mdreport.Cell(f.Value))
		}
	}
	return b.String()
}
