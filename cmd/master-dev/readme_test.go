package main

import (
	"testing"

	"github.com/tidemark-io/tidemark/internal/cli"
)

// Every setting is a flag and an environment variable, and the README's
// configuration table (`master dev`) lists each of them.
func TestReadmeDocumentsEveryEnvironmentVariable(t *testing.T) {
	missing, err := cli.UndocumentedEnv(newRootCmd(), "../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("README.md does not mention %s", m)
	}
}
