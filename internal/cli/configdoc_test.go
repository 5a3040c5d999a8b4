package cli_test

import (
	"testing"

	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/testutil/configdoc"
)

// docs/CONFIGURATION.md's table of the reference system's variables is Aliases'
// (make docs writes it).
func TestConfigurationDoc(t *testing.T) { configdoc.Check(t, "reference aliases", cli.AliasDoc()) }
