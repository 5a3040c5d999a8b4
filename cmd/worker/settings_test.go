package main

import (
	"testing"

	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/testutil/configdoc"
)

// docs/CONFIGURATION.md's section of this binary is its flags' (make docs writes it).
func TestConfigurationDoc(t *testing.T) { configdoc.CheckFlags(t, newRootCmd(), "worker") }

// The list of every binary's variables, which keeps a setting of the other
// binary in a shared environment from being warned about as unknown, has each of
// this binary's.
func TestSettingsListHasEveryEnvironmentVariable(t *testing.T) {
	for _, m := range cli.UnlistedEnv(newRootCmd()) {
		t.Errorf("internal/cli's tidemarkSettings lacks %s", m)
	}
}
