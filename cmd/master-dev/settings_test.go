package main

import (
	"testing"

	"github.com/tidemark-io/tidemark/testutil/configdoc"
)

// docs/CONFIGURATION.md's section of `master dev` is this binary's flags (make docs
// writes it).
func TestConfigurationDoc(t *testing.T) { configdoc.CheckFlags(t, newRootCmd(), "master dev") }
