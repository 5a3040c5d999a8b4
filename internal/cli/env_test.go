package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func newFlags(t *testing.T) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("data-url", "file://./data", "bucket URL")
	fs.Duration("shutdown-timeout", 20*time.Second, "grace period")
	fs.String("unbound", "x", "no env")
	BindEnv(fs, "data-url", "DATA_URL")
	BindEnv(fs, "shutdown-timeout", "SHUTDOWN_TIMEOUT")
	return fs
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFlagBeatsEnvironmentBeatsDefault(t *testing.T) {
	fs := newFlags(t)
	if err := fs.Parse([]string{"--data-url", "mem://"}); err != nil {
		t.Fatal(err)
	}
	err := ApplyEnv(fs, env(map[string]string{
		"DATA_URL":         "s3://ignored",
		"SHUTDOWN_TIMEOUT": "3s",
		"UNBOUND":          "ignored",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := fs.GetString("data-url"); got != "mem://" {
		t.Errorf("data-url = %q, want the command-line value mem://", got)
	}
	if got, _ := fs.GetDuration("shutdown-timeout"); got != 3*time.Second {
		t.Errorf("shutdown-timeout = %v, want 3s from SHUTDOWN_TIMEOUT", got)
	}
	if got, _ := fs.GetString("unbound"); got != "x" {
		t.Errorf("unbound = %q, want its default", got)
	}
}

func TestMalformedEnvironmentValueNamesTheVariable(t *testing.T) {
	fs := newFlags(t)
	err := ApplyEnv(fs, env(map[string]string{"SHUTDOWN_TIMEOUT": "soon"}))
	if err == nil || !strings.Contains(err.Error(), "SHUTDOWN_TIMEOUT") {
		t.Fatalf("err = %v, want one naming SHUTDOWN_TIMEOUT", err)
	}
}

func TestBoundFlagUsageMentionsVariable(t *testing.T) {
	fs := newFlags(t)
	if u := fs.Lookup("data-url").Usage; !strings.Contains(u, "DATA_URL") {
		t.Errorf("usage %q does not mention DATA_URL", u)
	}
}

func TestNewLoggerRejectsUnknownLevel(t *testing.T) {
	if _, err := NewLogger(nil, "loud"); err == nil {
		t.Fatal("want an error for level \"loud\"")
	}
	if _, err := NewLogger(nil, "debug"); err != nil {
		t.Fatal(err)
	}
}
