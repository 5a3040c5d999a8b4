package mdreport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const doc = "# Title\n\nintro\n\n## A\n\na text\n\n### A1\n\none\n\n```\n# not a heading\n## nor this\n```\n\n### A2\n\ntwo\n\n## B\n\nb text\n"

// A section runs to the next heading of its level or higher, never to a line of
// a fenced code block, and a heading ending in a newline matches a whole line only.
func TestFindStopsAtTheNextHeadingOfItsLevel(t *testing.T) {
	for _, c := range []struct {
		heading string
		within  Span
		want    string
	}{
		{"## A", All(doc), "## A\n\na text\n\n### A1\n\none\n\n```\n# not a heading\n## nor this\n```\n\n### A2\n\ntwo\n\n"},
		{"### A1", All(doc), "### A1\n\none\n\n```\n# not a heading\n## nor this\n```\n\n"},
		{"### A2", All(doc), "### A2\n\ntwo\n\n"},
		{"## B", All(doc), "## B\n\nb text\n"},
		{"### A", All(doc), "### A1\n\none\n\n```\n# not a heading\n## nor this\n```\n\n"},
		{"### A2", Span{0, strings.Index(doc, "two")}, "### A2\n\n"},
	} {
		s, ok := Find(doc, c.within, c.heading)
		if !ok || doc[s.Start:s.End] != c.want {
			t.Errorf("Find(%q) = %q, %v; want %q", c.heading, doc[s.Start:s.End], ok, c.want)
		}
	}
	for _, h := range []string{"### A\n", "## nor this", "not a heading", "", "##B"} {
		if s, ok := Find(doc, All(doc), h); ok {
			t.Errorf("Find(%q) found %q", h, doc[s.Start:s.End])
		}
	}
	if _, ok := Find(doc, Span{strings.Index(doc, "## B"), len(doc)}, "## A"); ok {
		t.Error("Find looked outside its region")
	}
}

// Replacing a section keeps every other byte and one blank line before what
// follows; a section replaced by its own text leaves the document as it was. The
// repository's generated documents are checked too: every one of their sections
// is a fixed point, so a rerun changes only figures.
func TestReplaceKeepsEverythingElse(t *testing.T) {
	s, _ := Find(doc, All(doc), "### A1")
	got := Replace(doc, s, "### A1\n\nnew\n\n\n")
	if want := strings.Replace(doc, "one\n\n```\n# not a heading\n## nor this\n```\n", "new\n", 1); got != want {
		t.Fatalf("Replace:\n%s\nwant:\n%s", got, want)
	}
	if got := Append("x\n\n\n", "## C\n"); got != "x\n\n## C\n" {
		t.Fatalf("Append = %q", got)
	}
	for _, path := range []string{"../../BENCHMARKS.md", "../../RELIABILITY.md"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		d := string(data)
		n := 0
		for _, line := range strings.Split(d, "\n") {
			if headingLevel(line) >= 2 {
				s, ok := Find(d, All(d), line+"\n")
				if !ok {
					continue // inside a code block
				}
				n++
				if Replace(d, s, d[s.Start:s.End]) != d {
					t.Errorf("%s: section %q is not a fixed point of Replace", path, line)
				}
			}
		}
		if n < 3 {
			t.Errorf("%s: only %d sections found", path, n)
		}
	}
}

// WriteFile replaces the file whole and keeps its permissions.
func TestWriteFileReplacesAtomicallyKeepingPermissions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, "new"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	info, _ := os.Stat(path)
	if string(data) != "new" || info.Mode().Perm() != 0o640 {
		t.Fatalf("got %q %v", data, info.Mode().Perm())
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("left %d files behind", len(entries)-1)
	}
	if err := WriteFile(filepath.Join(t.TempDir(), "missing.md"), "x"); err == nil {
		t.Fatal("WriteFile created a document that did not exist")
	}
}

func TestCellKeepsAValueInItsCell(t *testing.T) {
	if got := Cell(" a | b\nc "); got != `a \| b c` {
		t.Fatalf("Cell = %q", got)
	}
}
