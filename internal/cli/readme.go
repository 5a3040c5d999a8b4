package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// UndocumentedEnv returns the environment variables bound to the flags of cmd and
// its subcommands that the document at path does not mention as `NAME`. Each binary
// has a test calling it on README.md, so the configuration table cannot fall behind
// the flags.
func UndocumentedEnv(cmd *cobra.Command, path string) ([]string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var missing []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			for _, env := range f.Annotations[envAnnotation] {
				if !strings.Contains(string(doc), "`"+env+"`") {
					missing = append(missing, env+" (--"+f.Name+" of "+c.CommandPath()+")")
				}
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd)
	return missing, nil
}
