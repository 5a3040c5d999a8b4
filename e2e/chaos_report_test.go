//go:build chaos

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/tools/chaos/report"
)

// chaosBuildTags makes build() compile the binaries with -tags chaos, so the
// processes under test carry the fault hook of tools/chaos.
const chaosBuildTags = true

// chaosReportEnv names the file a chaos run appends its campaign figures to (one
// JSON line per campaign, a report.Record); scripts/chaos.sh sets it and renders
// the lines into RELIABILITY.md. Unset, nothing is written.
const chaosReportEnv = "TIDEMARK_CHAOS_REPORT"

// chaosCampaign collects a campaign's figures while its test runs; the record is
// written when the test ends (t.Cleanup), so it says whether the test passed and
// how long it took, even when the test stopped with t.Fatal.
type chaosCampaign struct {
	mu      sync.Mutex
	figures []report.Figure
}

// startChaosReport begins the record of campaign for t. Call it at the start of
// the test: the duration is measured from here to the end of the test.
func startChaosReport(t *testing.T, campaign string) *chaosCampaign {
	t.Helper()
	cc := &chaosCampaign{}
	started := time.Now()
	t.Cleanup(func() {
		path := os.Getenv(chaosReportEnv)
		cc.mu.Lock()
		rec := report.Record{
			Campaign: campaign, Test: t.Name(), Figures: append([]report.Figure{}, cc.figures...),
			Passed: !t.Failed(), Started: started.UTC(), Duration: time.Since(started).Round(time.Second).String(),
		}
		cc.mu.Unlock()
		for _, f := range rec.Figures {
			t.Logf("chaos figure %s: %s = %s", campaign, f.Name, f.Value)
		}
		if path == "" {
			return
		}
		if err := appendChaosRecord(path, rec); err != nil {
			t.Errorf("chaos report %s: %v", path, err)
		}
	})
	return cc
}

// add records a figure; a name added twice keeps its latest value in its first place.
func (cc *chaosCampaign) add(name string, value any) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	v := fmt.Sprint(value)
	for i := range cc.figures {
		if cc.figures[i].Name == name {
			cc.figures[i].Value = v
			return
		}
	}
	cc.figures = append(cc.figures, report.Figure{Name: name, Value: v})
}

// addf records a formatted figure.
func (cc *chaosCampaign) addf(name, format string, args ...any) {
	cc.add(name, fmt.Sprintf(format, args...))
}

// appendChaosRecord appends rec as one line with a single write, so records of
// tests running in parallel never interleave.
func appendChaosRecord(path string, rec report.Record) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
