// Package configdoc keeps docs/CONFIGURATION.md the reference of the binaries' flags.
// The file is prose around generated sections, each between two marker lines:
//
//	<!-- generated: worker (make docs) -->
//	...
//	<!-- end generated: worker -->
//
// Each binary's test renders its own section from its cobra commands (CheckFlags)
// and fails, naming the command that regenerates it, when the file says anything
// else. With TIDEMARK_UPDATE_DOCS=1 (what `make docs` sets) the test writes the
// section instead. The sections of different binaries are written by different test
// processes, so `make docs` runs them one at a time (go test -p 1).
package configdoc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

// Path is the document, relative to the module root.
const Path = "docs/CONFIGURATION.md"

// UpdateEnv set to 1 makes Check write its section instead of comparing it.
const UpdateEnv = "TIDEMARK_UPDATE_DOCS"

// regenerate is the command a failure tells the reader to run.
const regenerate = "make docs"

// CheckFlags checks the section called name against root's flags (cli.FlagDoc).
func CheckFlags(t *testing.T, root *cobra.Command, name string) {
	t.Helper()
	Check(t, name, cli.FlagDoc(root, name))
}

// Check checks that the section called name of docs/CONFIGURATION.md is body, or
// writes body there when UpdateEnv is 1.
func Check(t *testing.T, name, body string) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, Path)
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	before, current, after, err := section(string(doc), name)
	if err != nil {
		t.Fatalf("%s: %v", Path, err)
	}
	want := "\n" + body + "\n"
	if current == want {
		return
	}
	if os.Getenv(UpdateEnv) == "1" {
		if err := os.WriteFile(file, []byte(before+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: wrote the section %q", Path, name)
		return
	}
	t.Errorf("%s: the section %q differs from what the flags say (%s); regenerate it with `%s`",
		Path, name, firstDifference(current, want), regenerate)
}

// section splits doc around the generated section name: the text up to its begin
// marker line (included), the section, and the text from its end marker line on.
func section(doc, name string) (before, body, after string, err error) {
	begin := fmt.Sprintf("<!-- generated: %s (%s) -->\n", name, regenerate)
	end := fmt.Sprintf("<!-- end generated: %s -->\n", name)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", "", "", fmt.Errorf("no section %q: put the lines %q and %q where it belongs, then run `%s`",
			name, strings.TrimSpace(begin), strings.TrimSpace(end), regenerate)
	}
	i += len(begin)
	return doc[:i], doc[i:j], doc[j:], nil
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for n := 0; n < len(g) || n < len(w); n++ {
		var gl, wl string
		if n < len(g) {
			gl = g[n]
		}
		if n < len(w) {
			wl = w[n]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the section is %q, the flags make it %q", n+1, gl, wl)
		}
	}
	return "they differ"
}

// moduleRoot is the directory of the go.mod above the working directory (a test's
// package directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Settings returns the settings docs/CONFIGURATION.md lists for command (as the
// heading names it, e.g. "worker serve"): the environment variable of each flag
// of its table, or the flag for one without a variable. A binary's test checks
// its own section against its flags (CheckFlags), so another binary's test can
// count them from here without building it.
func Settings(t *testing.T, command string) []string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, Path))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n### `"+command+"`\n")
	if !ok {
		t.Fatalf("%s has no section for %s", Path, command)
	}
	var settings []string
	started := false
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, " | ")
		switch {
		case strings.HasPrefix(line, "| `--") && len(cells) > 2:
			started = true
			name := strings.Trim(cells[1], "` ")
			if name == "" {
				name = strings.Trim(cells[0], "|` ")
			}
			settings = append(settings, name)
		case started && !strings.HasPrefix(line, "|"):
			return settings
		}
	}
	return settings
}
