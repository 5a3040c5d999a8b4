package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

func TestVersionPrintsBinaryNameAndVersion(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "master ") || strings.TrimSpace(got) == "master" {
		t.Errorf("version printed %q, want \"master <version>\"", got)
	}
}

// `master admin verifyy demo` and `master admin requeue-merg demo` printed the help of
// admin and exited 0, so a script that mistyped a command believed it had succeeded.
// Each command group refuses a word it does not know, naming it.
func TestEveryCommandGroupRefusesAnUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		group string
		args  []string
		word  string
	}{
		{"master", []string{"bogus"}, "bogus"},
		{"master admin", []string{"admin", "verifyy", "demo"}, "verifyy"},
		{"master admin", []string{"admin", "requeue-merg", "demo"}, "requeue-merg"},
		{"master completion", []string{"completion", "tcsh"}, "tcsh"},
		{"master admin", []string{"help", "admin", "verifyy"}, "verifyy"}, // help of no such command
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, err := run(t, tc.args...)
			if !errors.Is(err, cli.ErrUnknownCommand) || !strings.Contains(err.Error(), `"`+tc.word+`" for "`+tc.group+`"`) {
				t.Fatalf("err = %v, want unknown command %q for %q", err, tc.word, tc.group)
			}
			if !strings.Contains(stderr, tc.word) {
				t.Errorf("stderr %q does not name %q", stderr, tc.word)
			}
		})
	}
	if _, stderr, err := run(t, "admin", "requeue-merg", "demo"); err == nil || !strings.Contains(err.Error(), "did you mean requeue-merge?") {
		t.Errorf("err = %v (stderr %q), want requeue-merge suggested", err, stderr)
	}
}

// Whatever groups and commands are added later: every group fails on an unknown
// word, and every command on a stray argument after the ones it takes.
func TestEveryCommandRefusesAStrayArgument(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		args := append(path, "no-such-word")
		if !c.HasSubCommands() {
			// One more argument than the most it accepts.
			for c.ValidateArgs(args[len(path):]) == nil && len(args) < len(path)+8 {
				args = append(args, "no-such-word")
			}
		}
		if _, _, err := run(t, args...); err == nil {
			t.Errorf("%s succeeded", strings.Join(args, " "))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}
