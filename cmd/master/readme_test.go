package main

import (
	"testing"

	"github.com/tidemark-io/tidemark/internal/cli"
)

// Every setting is a flag and an environment variable, and the README's
// configuration table lists each of them.
func TestReadmeDocumentsEveryEnvironmentVariable(t *testing.T) {
	missing, err := cli.UndocumentedEnv(newRootCmd(), "../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("README.md does not mention %s", m)
	}
}

// The list of every binary's variables, which keeps a setting of the other
// binary in a shared environment from being warned about as unknown, has each of
// this binary's.
func TestSettingsListHasEveryEnvironmentVariable(t *testing.T) {
	for _, m := range cli.UnlistedEnv(newRootCmd()) {
		t.Errorf("internal/cli's tidemarkSettings lacks %s", m)
	}
}
