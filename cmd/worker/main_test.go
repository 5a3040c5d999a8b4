package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tidemark-io/tidemark/internal/cli"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestServeFailsAtStartupOnBadDataURL(t *testing.T) {
	_, err := run(t, "serve", "--data-url", "nosuchscheme://bucket", "--instance-id", "w1", "--http-addr", "127.0.0.1:0", "--auth-disabled")
	if err == nil || !strings.Contains(err.Error(), "DATA_URL") || !strings.Contains(err.Error(), "nosuchscheme") {
		t.Fatalf("err = %v, want a startup error naming DATA_URL and the URL", err)
	}
}

func TestServeTakesSettingsFromEnvironment(t *testing.T) {
	t.Setenv("DATA_URL", "nosuchscheme://from-env")
	t.Setenv("AUTH_TOKEN", testToken)
	_, err := run(t, "serve", "--instance-id", "w1", "--http-addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "from-env") {
		t.Fatalf("err = %v, want the DATA_URL from the environment to be used", err)
	}
}

func TestServeRejectsMalformedEnvironment(t *testing.T) {
	t.Setenv("SHUTDOWN_TIMEOUT", "soon")
	_, err := run(t, "serve", "--data-url", "mem://")
	if err == nil || !strings.Contains(err.Error(), "SHUTDOWN_TIMEOUT") {
		t.Fatalf("err = %v, want one naming SHUTDOWN_TIMEOUT", err)
	}
}

func TestServeHelpListsEnvironmentVariables(t *testing.T) {
	out, err := run(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"DATA_URL", "HTTP_ADDR", "INSTANCE_ID", "LOG_LEVEL", "SHUTDOWN_TIMEOUT"} {
		if !strings.Contains(out, env) {
			t.Errorf("serve --help does not mention %s", env)
		}
	}
}

// Each command group refuses a word it does not know, naming it: `master admin
// <typo>` printed the group's help and exited 0 (see cmd/master); the worker's
// groups are held to the same.
func TestEveryCommandGroupRefusesAnUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		group string
		args  []string
		word  string
	}{
		{"worker", []string{"bogus"}, "bogus"},
		{"worker", []string{"lod", "--rate", "5"}, "lod"},
		{"worker completion", []string{"completion", "tcsh"}, "tcsh"},
		{"worker", []string{"help", "bogus"}, "bogus"}, // help of no such command
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := run(t, tc.args...)
			if !errors.Is(err, cli.ErrUnknownCommand) || !strings.Contains(err.Error(), `"`+tc.word+`" for "`+tc.group+`"`) {
				t.Fatalf("err = %v, want unknown command %q for %q", err, tc.word, tc.group)
			}
			if !strings.Contains(out, tc.word) {
				t.Errorf("output %q does not name %q", out, tc.word)
			}
		})
	}
}

// Whatever commands are added later: every group fails on an unknown word, and
// every command on a stray argument after the ones it takes.
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
		if _, err := run(t, args...); err == nil {
			t.Errorf("%s succeeded", strings.Join(args, " "))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}

// A deployment written for the reference system keeps its settings: its
// variable, in its unit, sets the Tidemark setting (here to a value the worker
// refuses, which shows it was applied), with a warning naming the variable to
// use.
func TestServeAppliesTheReferenceSystemsVariables(t *testing.T) {
	t.Setenv("ROLLOUT_MERGE_MAX_GENERATIONS", "-1")
	_, err := run(t, "serve", "--data-url", "mem://", "--instance-id", "w1", "--http-addr", "127.0.0.1:0", "--auth-disabled")
	if err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Fatalf("err = %v, want ROLLOUT_MERGE_MAX_GENERATIONS=-1 applied as --merge-max-generations and refused", err)
	}
	t.Setenv("ROLLOUT_MERGE_MAX_GENERATIONS", "8")
	t.Setenv("ROLLOUT_FLUSH_INTERVAL_SECS", "x")
	_, err = run(t, "serve", "--data-url", "mem://", "--instance-id", "w1", "--auth-disabled")
	if err == nil || !strings.Contains(err.Error(), "ROLLOUT_FLUSH_INTERVAL_SECS") || !strings.Contains(err.Error(), "FLUSH_INTERVAL") {
		t.Fatalf("err = %v, want a bad reference value refused naming it and FLUSH_INTERVAL", err)
	}
}
