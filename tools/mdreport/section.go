// Package mdreport rewrites the generated parts of Tidemark's Markdown documents:
// the benchmark sections of BENCHMARKS.md (bench/) and the chaos campaign results
// of RELIABILITY.md (tools/chaos). It is the one writer both use.
//
// A section is the text from its heading line up to the next heading of the same
// or a higher level (fewer "#"), or the end of the region searched; lines inside
// fenced code blocks are never headings. Invariants: a rewrite replaces only the
// sections a run produced and keeps every other byte, so a partial run leaves the
// figures of what it skipped and every word written by hand; files are replaced
// atomically, so an interrupted run leaves the old document, never half of one.
package mdreport

import (
	"os"
	"path/filepath"
	"strings"
)

// Span is a byte range [Start, End) of a document.
type Span struct{ Start, End int }

// Find returns the first section of doc[within] whose heading line starts with
// heading (e.g. "## Incident reproductions", or "### stuck worker:"; a heading
// ending in "\n" must be the whole line), which also gives its level. The span runs to the next heading of that level or higher, or
// to within.End.
func Find(doc string, within Span, heading string) (Span, bool) {
	level := headingLevel(heading)
	if level == 0 {
		return Span{}, false
	}
	start := -1
	fenced := false
	for i := within.Start; i < within.End; {
		j := strings.IndexByte(doc[i:within.End], '\n')
		next := within.End
		if j >= 0 {
			next = i + j + 1
		}
		line := strings.TrimRight(doc[i:next], "\n")
		switch {
		case strings.HasPrefix(line, "```"):
			fenced = !fenced
		case fenced:
		case start < 0 && strings.HasPrefix(line+"\n", heading):
			start = i
		case start >= 0:
			if l := headingLevel(line); l > 0 && l <= level {
				return Span{start, i}, true
			}
		}
		i = next
	}
	if start < 0 {
		return Span{}, false
	}
	return Span{start, within.End}, true
}

// All is the whole of doc, for Find.
func All(doc string) Span { return Span{0, len(doc)} }

// Replace returns doc with the span replaced by text, keeping one blank line
// between text and what follows.
func Replace(doc string, s Span, text string) string {
	text = strings.TrimRight(text, "\n") + "\n"
	rest := doc[s.End:]
	if strings.TrimSpace(rest) != "" && !strings.HasPrefix(rest, "\n") {
		text += "\n"
	}
	return doc[:s.Start] + text + rest
}

// Append returns doc with text added at its end after one blank line.
func Append(doc, text string) string {
	return strings.TrimRight(doc, "\n") + "\n\n" + strings.TrimRight(text, "\n") + "\n"
}

// headingLevel is the number of leading "#" of an ATX heading line, 0 if line is
// not one.
func headingLevel(line string) int {
	n := 0
	for n < len(line) && line[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || n == len(line) || line[n] != ' ' {
		return 0
	}
	return n
}

// Cell keeps a value inside its Markdown table cell.
func Cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
}

// WriteFile replaces the file at path with doc atomically (a temporary file in
// the same directory, renamed over it), keeping the file's permissions.
func WriteFile(path, doc string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mdreport-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(doc); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), info.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
