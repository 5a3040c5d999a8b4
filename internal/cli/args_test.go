package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// tree is a root with a group (admin: get, list) and a leaf that declares no Args.
func tree() *cobra.Command {
	noop := func(*cobra.Command, []string) error { return nil }
	admin := &cobra.Command{Use: "admin", Short: "group"}
	admin.AddCommand(
		&cobra.Command{Use: "get <id>", Args: cobra.ExactArgs(1), RunE: noop},
		&cobra.Command{Use: "list", RunE: noop},
	)
	return NewRootCmd("tool", "test tool", admin, &cobra.Command{Use: "serve", RunE: noop})
}

func execute(args ...string) (string, error) {
	root := tree()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// A mistyped admin command used to print the group's help and exit 0, so a script
// that ran it believed it had succeeded.
func TestUnknownSubcommandOrStrayArgumentFailsNamingIt(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"admin", "verify", "demo"},
		{"admin", "lst"},
		{"admin", "list", "extra"},
		{"serve", "extra"},
		{"completion", "tcsh"},
		{"help", "bogus"},
		{"help", "admin", "verify"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, err := execute(args...)
			if !errors.Is(err, ErrUnknownCommand) {
				t.Fatalf("err = %v, want ErrUnknownCommand", err)
			}
			word := args[len(args)-1]
			if args[0] == "admin" && args[1] == "verify" {
				word = "verify"
			}
			if !strings.Contains(err.Error(), `"`+word+`"`) || !strings.Contains(out, word) {
				t.Fatalf("err %q, printed %q: want both to name %q", err, out, word)
			}
		})
	}
}

func TestSuggestsTheSubcommandMeant(t *testing.T) {
	_, err := execute("admin", "lis")
	if err == nil || !strings.Contains(err.Error(), "did you mean list?") {
		t.Fatalf("err = %v, want a suggestion of list", err)
	}
}

func TestGroupsWithoutArgumentsAndKnownCommandsStillWork(t *testing.T) {
	for _, args := range [][]string{{}, {"admin"}, {"admin", "get", "x"}, {"admin", "list"}, {"serve"},
		{"help", "admin", "get"}, {"completion"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if out, err := execute(args...); err != nil {
				t.Fatalf("err = %v (printed %q)", err, out)
			}
		})
	}
	if out, _ := execute("admin"); !strings.Contains(out, "list") {
		t.Errorf("a group without arguments printed %q, want its help", out)
	}
}
