// Package cli is the wiring the Tidemark binaries share: settings that are both a flag
// and an environment variable, the JSON logger, the build version, the root command
// with its signal handling (Main), and the reference of every setting that
// docs/CONFIGURATION.md is generated from (FlagDoc, AliasDoc).
//
// Every setting is a flag and an environment variable. Precedence, highest first: a flag
// given on the command line, its environment variable, the flag's default. A malformed
// environment value is an error that names the variable, never silently ignored.
package cli
