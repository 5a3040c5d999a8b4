package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
