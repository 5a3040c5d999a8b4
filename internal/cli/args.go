package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// ErrUnknownCommand is the error of a command line that names a subcommand a group
// does not have, an argument a command takes none of, or a help topic that does not
// exist. The message names the word and the command it was given to.
var ErrUnknownCommand = errors.New("unknown command")

// refuseStrayArgs makes every command under root refuse what it does not know,
// because cobra's defaults do not: a group other than the root (master admin,
// completion) that is given an unknown subcommand prints its help and succeeds, a
// command that declares no Args takes any, and "help <unknown>" succeeds too. A
// script that mistypes a command must see it fail.
//
// A group without a Run of its own prints its help when given no argument, as the
// root does; given any argument that is not one of its subcommands, it fails naming
// it. The help and completion commands cobra adds are made here, before the walk, so
// the walk covers them (Execute keeps the ones it finds); made this early, the
// completion scripts go to the process's stdout whatever SetOut says later.
func refuseStrayArgs(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.Name() == "help" && c.Parent() == root:
			c.Args = helpTopic
		case c.HasSubCommands():
			c.Args = subcommandOnly
			if !c.Runnable() {
				// Without a Run cobra shows help before it checks the arguments.
				c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
			}
			// "worker lod --rate 5" fails parsing --rate, a flag of the load command
			// the group does not know: the mistyped word is the news, not the flag.
			c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
				if unknownErr := subcommandOnly(cmd, cmd.Flags().Args()); unknownErr != nil {
					return unknownErr
				}
				return err
			})
		case c.Args == nil:
			c.Args = noArgs
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// subcommandOnly is the Args of a group: cobra only gets here with arguments when
// the first one is none of the group's subcommands.
func subcommandOnly(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default, which it sets only for the root
	}
	return unknown(cmd, args[0], cmd.SuggestionsFor(args[0]))
}

// noArgs is the Args of a command that declared none: it takes no argument.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return unknown(cmd, args[0], nil)
}

// helpTopic is the Args of "help": every argument must name a command, so
// "help admin verify" fails instead of printing the help of admin.
func helpTopic(cmd *cobra.Command, args []string) error {
	topic, rest, err := cmd.Root().Find(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w %q for %q: no such help topic (run '%s --help')",
			ErrUnknownCommand, rest[0], topic.CommandPath(), topic.CommandPath())
	}
	return nil
}

func unknown(cmd *cobra.Command, arg string, suggestions []string) error {
	hint := ""
	if len(suggestions) > 0 {
		hint = "; did you mean " + strings.Join(suggestions, " or ") + "?"
	}
	return fmt.Errorf("%w %q for %q%s (run '%s --help')", ErrUnknownCommand, arg, cmd.CommandPath(), hint, cmd.CommandPath())
}
