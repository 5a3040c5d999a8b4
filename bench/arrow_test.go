package bench

import (
	"context"
	"strings"
	"testing"
)

// TestArrowSmall runs the arrow scenario on a small store: every read answers
// every live row (the scenario checks it) and every figure of the table is
// measured, so the scenario BENCHMARKS.md records keeps running.
func TestArrowSmall(t *testing.T) {
	env := testEnv(t)
	cfg := DefaultArrowConfig([]int64{30_000})
	cfg.Rounds, cfg.PageRows, cfg.AddRows, cfg.Adds = 1, 7_000, 1_000, 3
	var out strings.Builder
	if err := RunArrowSection(context.Background(), env, cfg, &out, "test", ""); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	if !strings.Contains(md, ArrowHeading) || !strings.Contains(md, "30,000 rows") {
		t.Fatalf("section:\n%s", md)
	}
	for _, row := range []string{"| floor", "| Arrow full stream", "| Arrow full list", "| JSON pages", "| Arrow pages", "| JSON adds", "| Arrow adds", "| export |"} {
		line := md[strings.Index(md, row):]
		line = line[:strings.Index(line, "\n")]
		if strings.Contains(line, "| - |") || !strings.Contains(line, "rows/s") {
			t.Errorf("%s not measured: %s", row, line)
		}
	}
}
