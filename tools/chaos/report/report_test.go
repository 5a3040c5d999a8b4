package report

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var run = Run{Command: "make chaos", Machine: "linux amd64, 2 CPUs", Commit: "abc1234", Date: time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)}

func doc(inner string) string {
	return "# Reliability\n\nhand-written intro\n\n" + BeginMarker + "\n" + inner + "\n" + EndMarker + "\n\nhand-written footer\n"
}

func TestParseReadsTheLinesTheCampaignsAppend(t *testing.T) {
	recs, err := Parse([]byte(`{"campaign":"stuck worker","test":"TestA","figures":[{"name":"timeout","value":"5s"}],"passed":true,"duration":"1m9s"}

{"campaign":"faults","test":"TestB","figures":[],"passed":false,"duration":"2m"}
`))
	if err != nil || len(recs) != 2 || recs[0].Figures[0].Value != "5s" || recs[1].Passed {
		t.Fatalf("Parse = %+v, %v", recs, err)
	}
	if _, err := Parse([]byte(`{"campaign":`)); err == nil {
		t.Error("Parse accepted a cut-off line")
	}
	if _, err := Parse([]byte(`{"test":"T"}`)); err == nil {
		t.Error("Parse accepted a record without a campaign")
	}
}

// A partial run (CHAOS_RUN choosing one campaign) must not erase the figures of
// the campaigns it skipped, nor anything written by hand around the markers.
func TestUpdateReplacesOnlyTheCampaignsOfTheRun(t *testing.T) {
	first := []Record{
		{Campaign: "faults", Test: "TestFaults", Passed: true, Duration: "2m", Figures: []Figure{{"lost", "0"}, {"errors", "503 A | B: 3"}}},
		{Campaign: "stuck worker", Test: "TestStuck", Passed: true, Duration: "1m", Figures: []Figure{{"timeout", "5s"}}},
	}
	out, err := Update([]byte(doc("")), first, run)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"hand-written intro", "hand-written footer", "### faults: passed", "| lost | 0 |", `| errors | 503 A \| B: 3 |`, "### stuck worker: passed", "`make chaos` on 2026-11-29 20:00 UTC, linux amd64, 2 CPUs, commit abc1234."} {
		if !strings.Contains(s, want) {
			t.Errorf("rendered section lacks %q:\n%s", want, s)
		}
	}

	later := run
	later.Date = later.Date.Add(time.Hour)
	again, err := Update(out, []Record{{Campaign: "stuck worker", Test: "TestStuck", Passed: false, Duration: "3m", Figures: []Figure{{"timeout", "7s"}}}}, later)
	if err != nil {
		t.Fatal(err)
	}
	s = string(again)
	if !strings.Contains(s, "| lost | 0 |") || !strings.Contains(s, "2026-11-29 20:00 UTC") {
		t.Errorf("the faults block of the earlier run was not kept:\n%s", s)
	}
	if strings.Contains(s, "| timeout | 5s |") || !strings.Contains(s, "### stuck worker: FAILED") || !strings.Contains(s, "21:00 UTC") {
		t.Errorf("the stuck worker block was not replaced:\n%s", s)
	}
	if strings.Index(s, "### faults") > strings.Index(s, "### stuck worker") {
		t.Error("blocks changed order")
	}
	if strings.Count(s, "\n### ") != 2 {
		t.Errorf("want 2 blocks:\n%s", s)
	}
	if twice, _ := Update(again, nil, later); string(twice) != s {
		t.Errorf("an update without records changed the document:\n%s", twice)
	}
}

func TestUpdateRefusesADocumentWithoutMarkers(t *testing.T) {
	if _, err := Update([]byte("# Reliability\n"), nil, run); !errors.Is(err, ErrNoMarkers) {
		t.Errorf("Update = %v, want ErrNoMarkers", err)
	}
}
