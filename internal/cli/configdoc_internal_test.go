package cli

import (
	"testing"

	"github.com/spf13/pflag"
)

// A help text is one table cell: a | would split it, and a < outside code could
// open an HTML tag (<dir> is one) and hide the text.
func TestDocCellEscapesWhatEndsACellOrOpensATag(t *testing.T) {
	for in, want := range map[string]string{
		"a|b":                   `a\|b`,
		"in <dir>/logs/":        `in \<dir>/logs/`,
		"`<dir>` stays in code": "`<dir>` stays in code",
		"`a|b` in code":         "`a\\|b` in code",
		"two\nlines":            "two lines",
	} {
		if got := docCell(in); got != want {
			t.Errorf("docCell(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultOfAByteSizeSaysItsUnit(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int64("max-body-bytes", 64<<20, "")
	fs.Int64("merge-memory-budget", 3<<29, "")
	fs.Int("rows", 64<<20, "")
	fs.Int64("odd-bytes", 1000, "")
	for name, want := range map[string]string{
		"max-body-bytes":      "`67108864` (64 MiB)",
		"merge-memory-budget": "`1610612736` (1536 MiB)",
		"rows":                "`67108864`",
		"odd-bytes":           "`1000`",
	} {
		if got := defaultCell(fs.Lookup(name)); got != want {
			t.Errorf("--%s: %q, want %q", name, got, want)
		}
	}
}
