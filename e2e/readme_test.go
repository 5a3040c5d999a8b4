package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documents whose links TestMarkdownLinksResolve follows: every Markdown file at the
// module root and in docs/.
var markdownGlobs = []string{"*.md", "docs/*.md"}

// packageMapEntry is one line of the package map (docs/PACKAGES.md): "- `path`: what it is".
var packageMapEntry = regexp.MustCompile("(?m)^- `([^`]+)`: ")

// The package map (docs/PACKAGES.md, linked from the README) is the one place a
// newcomer learns the tree: it names every package `go list ./...` prints, one line
// each, and nothing that is not a package.
func TestReadmePackageMapListsEveryPackage(t *testing.T) {
	root := moduleRoot(t)
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	module := readModulePath(t, root)
	var packages []string
	for _, p := range strings.Fields(string(out)) {
		packages = append(packages, strings.TrimPrefix(strings.TrimPrefix(p, module), "/"))
	}
	doc := readFile(t, filepath.Join(root, "docs", "PACKAGES.md"))
	section := markdownSection(doc, "## Packages")
	if section == "" {
		t.Fatal("docs/PACKAGES.md has no \"## Packages\" section")
	}
	var mapped []string
	for _, m := range packageMapEntry.FindAllStringSubmatch(section, -1) {
		mapped = append(mapped, m[1])
	}
	for _, p := range packages {
		if !slices.Contains(mapped, p) {
			t.Errorf("docs/PACKAGES.md lacks %s: add a line \"- `%s`: what it is\" under its plane", p, p)
		}
	}
	for _, m := range mapped {
		if !slices.Contains(packages, m) {
			t.Errorf("docs/PACKAGES.md names %s, which go list ./... does not print", m)
		}
	}
	if d := duplicates(mapped); len(d) > 0 {
		t.Errorf("docs/PACKAGES.md names %v more than once", d)
	}
}

// readmeMaxLines is the README's budget: it is the front door (what Tidemark is, the
// two commands, the quickstart, the operator's paths), and it grew back past it once
// when reference material piled up in it; that material belongs in docs/.
const readmeMaxLines = 250

func TestReadmeStaysAFrontDoor(t *testing.T) {
	readme := readFile(t, filepath.Join(moduleRoot(t), "README.md"))
	if n := strings.Count(readme, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move reference material to docs/ and link it", n, readmeMaxLines)
	}
	for _, want := range []string{"etcdctl", "get --prefix", "/tasks/", "master admin requeue-merge"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not show %q: an operator's two paths (tasks in etcd, a requeued merge) start there", want)
		}
	}
}

// markdownLink is an inline link or image: [text](target) or ![alt](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// A link in the documentation leads somewhere: the file it names exists, and so does the
// heading its #anchor names. Sections move between files; a link left behind is caught
// here rather than by a reader.
func TestMarkdownLinksResolve(t *testing.T) {
	root := moduleRoot(t)
	var docs []string
	for _, g := range markdownGlobs {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	anchors := map[string][]string{} // document path -> its heading anchors
	anchorsOf := func(path string) []string {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingAnchors(readFile(t, path))
		anchors[path] = a
		return a
	}
	for _, doc := range docs {
		rel, _ := filepath.Rel(root, doc)
		for _, m := range markdownLink.FindAllStringSubmatch(proseOf(readFile(t, doc)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s links %s, which does not exist", rel, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchorsOf(file), anchor) {
				t.Errorf("%s links %s: no heading of %s has the anchor #%s", rel, target, filepath.Base(file), anchor)
			}
		}
	}
}

// moduleRoot is the directory of the module these tests belong to.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readModulePath is the module path go.mod declares.
func readModulePath(t *testing.T, root string) string {
	t.Helper()
	for _, line := range strings.Split(readFile(t, filepath.Join(root, "go.mod")), "\n") {
		if p, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(p)
		}
	}
	t.Fatal("go.mod declares no module")
	return ""
}

// markdownSection is the text of the section that starts with the heading line, up
// to the next heading of the same level ("" if there is no such heading).
func markdownSection(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+len(heading)+2:]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if j := strings.Index(rest, "\n"+level); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// proseOf is doc without its fenced code blocks and inline code spans, where
// brackets and parentheses are code, not links.
func proseOf(doc string) string {
	var b strings.Builder
	for _, line := range linesOutsideFences(doc) {
		b.WriteString(inlineCode.ReplaceAllString(line, "``"))
		b.WriteByte('\n')
	}
	return b.String()
}

// linesOutsideFences are doc's lines but those of fenced code blocks (whose "# ..."
// lines are shell comments, not headings).
func linesOutsideFences(doc string) []string {
	var lines []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	return lines
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// headingAnchors are the anchors GitHub gives doc's headings: the text lowercased,
// without punctuation, spaces made hyphens, and -1, -2, ... after a repeated one.
func headingAnchors(doc string) []string {
	var anchors []string
	seen := map[string]int{}
	for _, line := range linesOutsideFences(doc) {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		text = strings.TrimLeft(text, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		text = linkText.ReplaceAllString(strings.TrimSpace(text), "$1")
		var slug strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				slug.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		a := slug.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors = append(anchors, a)
	}
	return anchors
}

// linkText matches a link in a heading, whose anchor keeps only its text.
var linkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// duplicates are the values that occur more than once in s.
func duplicates(s []string) []string {
	count := map[string]int{}
	var d []string
	for _, v := range s {
		if count[v]++; count[v] == 2 {
			d = append(d, v)
		}
	}
	return d
}
