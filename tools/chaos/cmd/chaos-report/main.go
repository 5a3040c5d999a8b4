// Command chaos-report writes the records of a chaos run into the results section
// of RELIABILITY.md. scripts/chaos.sh (`make chaos`) runs it after the campaigns.
//
//	chaos-report --records run.jsonl [--doc RELIABILITY.md] [--command 'make chaos'] [--commit abc1234]
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tidemark-io/tidemark/tools/chaos/report"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

func main() {
	records := flag.String("records", "", "JSON lines the campaigns appended (TIDEMARK_CHAOS_REPORT)")
	doc := flag.String("doc", "RELIABILITY.md", "document whose results section is rewritten")
	command := flag.String("command", "make chaos", "command that produced the records, as shown in the document")
	commit := flag.String("commit", "", "commit the campaigns ran at")
	flag.Parse()
	if err := run(*records, *doc, report.Run{Command: *command, Commit: *commit, Machine: mdreport.ThisMachine().String(), Date: time.Now()}); err != nil {
		fmt.Fprintln(os.Stderr, "chaos-report:", err)
		os.Exit(1)
	}
}

func run(records, doc string, r report.Run) error {
	if records == "" {
		return fmt.Errorf("--records is required")
	}
	data, err := os.ReadFile(records)
	if err != nil {
		return err
	}
	recs, err := report.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", records, err)
	}
	if len(recs) == 0 {
		return fmt.Errorf("%s: no campaign records (did any campaign run?)", records)
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	out, err := report.Update(old, recs, r)
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	if err := mdreport.WriteFile(doc, string(out)); err != nil {
		return err
	}
	for _, rec := range recs {
		fmt.Printf("%s (%s): passed=%v in %s\n", rec.Campaign, rec.Test, rec.Passed, rec.Duration)
	}
	return nil
}
