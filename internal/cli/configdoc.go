package cli

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docs/CONFIGURATION.md is generated from the flags by FlagDoc and AliasDoc (`make
// docs`): each binary's test renders its part and fails when the file says anything
// else (testutil/configdoc), so the reference cannot fall behind a flag.

// FlagDoc is the markdown reference of the settings of root and its subcommands: a
// table of the commands, then, for each command with flags of its own, a table of
// them with their environment variable, default and help. name is how the document
// calls root: master-dev is documented as "master dev", which runs it.
func FlagDoc(root *cobra.Command, name string) string {
	var commands []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		commands = append(commands, c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	path := func(c *cobra.Command) string {
		return strings.Replace(c.CommandPath(), root.Name(), name, 1)
	}

	var b strings.Builder
	if len(commands) > 1 {
		b.WriteString("| command | what it does |\n|---|---|\n")
		for _, c := range commands {
			if c.HasAvailableSubCommands() {
				continue // a group: its commands are listed
			}
			use := strings.Replace(c.UseLine(), root.Name(), name, 1)
			fmt.Fprintf(&b, "| `%s` | %s |\n", strings.TrimSuffix(use, " [flags]"), docCell(c.Short))
		}
	}
	for _, c := range commands {
		// Flags of c itself: persistent ones it defines included, those it inherits
		// left to the command that defines them.
		flags := c.NonInheritedFlags()
		if !flags.HasAvailableFlags() {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### `%s`\n\n%s.\n\n", path(c), strings.TrimSuffix(c.Short, "."))
		if c.HasAvailableSubCommands() && c.HasAvailablePersistentFlags() {
			fmt.Fprintf(&b, "Every `%s` command takes these.\n\n", path(c))
		}
		b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
		flags.VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, code(FlagEnv(f)), defaultCell(f), docCell(flagHelp(f)))
		})
	}
	return b.String()
}

// AliasDoc is the markdown table of the reference system's variables Tidemark
// accepts (Aliases), then the list of those it has no equivalent of and ignores
// with a warning.
func AliasDoc() string {
	var b strings.Builder
	b.WriteString("| reference variable | binary | Tidemark variable | conversion |\n|---|---|---|---|\n")
	for _, a := range Aliases() {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", a.Name, a.Binary, a.Env, docCell(a.Conversion()))
	}
	ignored := slices.Sorted(slices.Values(referenceIgnored))
	for i, n := range ignored {
		ignored[i] = "`" + n + "`"
	}
	fmt.Fprintf(&b, "\nIgnored, with a warning (no Tidemark equivalent): %s.\n", strings.Join(ignored, ", "))
	folded := slices.Sorted(maps.Keys(referenceFolded))
	for i, n := range folded {
		folded[i] = fmt.Sprintf("`%s` (%s)", n, referenceFolded[n])
	}
	fmt.Fprintf(&b, "\nIgnored, with a warning (their Tidemark setting folded into another): %s.\n", strings.Join(folded, "; "))
	var renamed []string
	for _, a := range Renamed() {
		renamed = append(renamed, fmt.Sprintf("`%s` (%s): `%s`", a.Name, a.Binary, a.Env))
	}
	fmt.Fprintf(&b, "\nTidemark's former names, still applied (the new name wins) with a warning: %s.\n", strings.Join(renamed, "; "))
	// What replaced each removed Tidemark setting is OPERATIONS.md's table (an
	// upgrade note), not a second list here.
	fmt.Fprintf(&b, "\nTidemark settings removed (%d of them), each a startup warning that says what replaced it: "+
		"[OPERATIONS.md](OPERATIONS.md#settings-folded-in-issue-43).\n", len(retiredSettings))
	return b.String()
}

// FlagEnv is the environment variable bound to f (BindEnv), "" if none.
func FlagEnv(f *pflag.Flag) string {
	if envs := f.Annotations[envAnnotation]; len(envs) > 0 {
		return envs[0]
	}
	return ""
}

// flagHelp is f's usage without the " [env X]" BindEnv adds for --help: the
// reference has a column for it.
func flagHelp(f *pflag.Flag) string {
	if env := FlagEnv(f); env != "" {
		return strings.TrimSuffix(f.Usage, " [env "+env+"]")
	}
	return f.Usage
}

// flagDefault is f's default as the command line would spell it, "" for none.
func flagDefault(f *pflag.Flag) string {
	if f.DefValue == "[]" {
		return ""
	}
	return f.DefValue
}

// defaultCell is f's default as inline code, a byte count followed by its size in
// binary units when it is a whole number of them (`67108864` (64 MiB)).
func defaultCell(f *pflag.Flag) string {
	d := flagDefault(f)
	n, err := strconv.ParseInt(d, 10, 64)
	if err != nil || n < 1024 || !strings.Contains(f.Name, "bytes") && !strings.Contains(f.Name, "budget") {
		return code(d)
	}
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if n%1024 != 0 {
			break
		}
		n /= 1024
		if n < 1024 || n%1024 != 0 {
			return fmt.Sprintf("%s (%d %s)", code(d), n, unit)
		}
	}
	return code(d)
}

// code is s as inline code, or nothing when s is empty.
func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// docCell makes s safe in a markdown table cell: a | would end the cell (GitHub
// reads \| as | inside code spans too), and a < outside a code span could open an
// HTML tag (<dir> is one), so both are escaped.
func docCell(s string) string {
	var b strings.Builder
	inCode := false
	for _, r := range strings.ReplaceAll(s, "\n", " ") {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '|':
			b.WriteByte('\\')
		case r == '<' && !inCode:
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
