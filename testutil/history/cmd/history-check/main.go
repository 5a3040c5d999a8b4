// Command history-check runs the linearizability check of a recorded history
// (history.Linearizable) in a process of its own, for the end-to-end history
// campaigns: CI runs their test process under the race detector, which makes
// porcupine's search, pure CPU, several times slower, and a rare long search then
// outran its timeout with nothing wrong in the history. It reads the operations
// (JSON, as the campaign keeps them) on standard input and writes what it found
// (history.Report, JSON) on standard output.
//
//	history-check --staleness 1s --timeout 5m [--visualize-dir DIR] < history.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/tidemark-io/tidemark/testutil/history"
)

func main() {
	staleness := flag.Duration("staleness", 0, "how old a read's snapshot may be for the writes its causal token does not cover (history.Config.Staleness)")
	timeout := flag.Duration("timeout", 0, "bound on the search per id, 0 for none (history.Config.Timeout)")
	visualize := flag.String("visualize-dir", "", "directory for porcupine's visualization of each id that is not linearizable")
	flag.Parse()
	var ops []history.Op
	if err := json.NewDecoder(os.Stdin).Decode(&ops); err != nil {
		fmt.Fprintln(os.Stderr, "history-check: read the operations:", err)
		os.Exit(2)
	}
	res := history.Linearizable(ops, history.Config{Staleness: *staleness, Timeout: *timeout, VisualizeDir: *visualize})
	if err := json.NewEncoder(os.Stdout).Encode(res.Report()); err != nil {
		fmt.Fprintln(os.Stderr, "history-check:", err)
		os.Exit(2)
	}
}
