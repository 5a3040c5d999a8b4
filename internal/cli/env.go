package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envAnnotation is the pflag annotation key that records a flag's environment variable.
const envAnnotation = "tidemark_env"

// BindEnv makes the environment variable env a second way to set the flag name in fs
// (ApplyEnv does the setting) and mentions it in the flag's usage. Binding a flag that
// does not exist is a wiring bug and panics.
func BindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("cli: bind %s: no flag --%s", env, name))
	}
	if err := fs.SetAnnotation(name, envAnnotation, []string{env}); err != nil {
		panic(fmt.Sprintf("cli: bind %s to --%s: %v", env, name, err))
	}
	f.Usage += fmt.Sprintf(" [env %s]", env)
}

// ApplyEnv sets every flag of fs that was not given on the command line from its bound
// environment variable, if lookup finds one (os.LookupEnv in the binaries; tests pass
// their own). An empty value counts as set, so FOO= overrides a non-empty default.
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		envs := f.Annotations[envAnnotation]
		if err != nil || f.Changed || len(envs) == 0 {
			return
		}
		v, ok := lookup(envs[0])
		if !ok {
			return
		}
		if setErr := fs.Set(f.Name, v); setErr != nil {
			err = fmt.Errorf("environment %s=%q (for --%s): %w", envs[0], v, f.Name, setErr)
		}
	})
	return err
}

// LoadEnv is a cobra PersistentPreRunE that applies the process environment to the
// flags of the command being run, including those inherited from its parents,
// accepting the reference system's variables of the binary (the root command's
// name) as aliases (ApplyEnvAliases). What it has to warn about is kept in the
// command's context for the command to log once its logger exists
// (LogEnvWarnings).
func LoadEnv(cmd *cobra.Command, _ []string) error {
	warnings, err := ApplyEnvAliases(cmd.Flags(), cmd.Root().Name(), os.Environ(), os.LookupEnv)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	cmd.SetContext(context.WithValue(ctx, envWarningsKey{}, warnings))
	return nil
}
