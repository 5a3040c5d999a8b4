// Package report turns the records of a chaos run (one JSON line per campaign, as
// the e2e campaigns append them to TIDEMARK_CHAOS_REPORT) into the results section
// of RELIABILITY.md.
//
// Invariants: only the text between BeginMarker and EndMarker is ever rewritten;
// inside it, each campaign has its own block, and a run replaces the blocks of the
// campaigns it ran and keeps the others, so `CHAOS_RUN=stuck make chaos` does not
// erase the figures of the campaigns it skipped.
package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
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

// blockStart opens one campaign's block inside the section.
var blockStart = regexp.MustCompile(`(?m)^<!-- chaos-campaign: (.+) -->$`)

// Update returns doc with the blocks of recs' campaigns replaced (or added, in
// the order of recs) and every other block kept.
func Update(doc []byte, recs []Record, run Run) ([]byte, error) {
	s := string(doc)
	b := strings.Index(s, BeginMarker)
	e := strings.Index(s, EndMarker)
	if b < 0 || e < b {
		return nil, fmt.Errorf("%w: want %q ... %q", ErrNoMarkers, BeginMarker, EndMarker)
	}
	inner := s[b+len(BeginMarker) : e]
	names, blocks := splitBlocks(inner)
	for _, name := range campaigns(recs) {
		var mine []Record
		for _, r := range recs {
			if r.Campaign == name {
				mine = append(mine, r)
			}
		}
		if _, ok := blocks[name]; !ok {
			names = append(names, name)
		}
		blocks[name] = renderBlock(name, mine, run)
	}
	var out strings.Builder
	out.WriteString(s[:b+len(BeginMarker)])
	out.WriteString("\n")
	for _, name := range names {
		out.WriteString("\n")
		out.WriteString(strings.TrimSpace(blocks[name]))
		out.WriteString("\n")
	}
	out.WriteString("\n")
	out.WriteString(s[e:])
	return []byte(out.String()), nil
}

// splitBlocks cuts the section into campaign blocks, in order.
func splitBlocks(inner string) (names []string, blocks map[string]string) {
	blocks = map[string]string{}
	locs := blockStart.FindAllStringSubmatchIndex(inner, -1)
	for i, loc := range locs {
		end := len(inner)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := inner[loc[2]:loc[3]]
		if _, dup := blocks[name]; !dup {
			names = append(names, name)
		}
		blocks[name] = inner[loc[0]:end]
	}
	return names, blocks
}

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
	fmt.Fprintf(&b, "<!-- chaos-campaign: %s -->\n", name)
	outcome := "passed"
	for _, r := range recs {
		if !r.Passed {
			outcome = "FAILED"
		}
	}
	fmt.Fprintf(&b, "### %s: %s\n\n", name, outcome)
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
			fmt.Fprintf(&b, "| %s | %s |\n", cell(f.Name), cell(f.Value))
		}
	}
	return b.String()
}

// cell keeps a value inside its table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
}
