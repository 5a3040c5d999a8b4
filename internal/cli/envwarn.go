package cli

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// EnvWarning is something about the environment an operator should hear of at
// startup: a reference variable used as an alias, or ignored, or a variable
// that looks like a setting but is none.
type EnvWarning struct {
	// Variable is the environment variable concerned.
	Variable string
	// Use is the Tidemark variable to set instead ("" when there is none).
	Use string
	// Message says what happened, for the log line.
	Message string
}

// envWarningsKey keys the warnings LoadEnv leaves in a command's context.
type envWarningsKey struct{}

// LogEnvWarnings logs, at warn level, each warning LoadEnv found for the command
// whose context is ctx; a binary calls it once its logger exists.
func LogEnvWarnings(ctx context.Context, log *slog.Logger) {
	warnings, _ := ctx.Value(envWarningsKey{}).([]EnvWarning)
	for _, w := range warnings {
		attrs := []any{"variable", w.Variable}
		if w.Use != "" {
			attrs = append(attrs, "use", w.Use)
		}
		log.Warn(w.Message, attrs...)
	}
}

// ApplyEnvAliases is ApplyEnv that also accepts the reference system's
// variables of binary ("worker" or "master": Aliases) for flags whose own
// variable is not set, converted from the reference's units, and reports in its
// warnings every alias used, every alias ignored because the Tidemark variable
// is set too, every reference variable Tidemark has no equivalent of, and every
// variable of environ (KEY=value lines) that looks like a setting of either
// system but is none, with the nearest known name when one is close.
func ApplyEnvAliases(fs *pflag.FlagSet, binary string, environ []string, lookup func(string) (string, bool)) ([]EnvWarning, error) {
	if err := ApplyEnv(fs, lookup); err != nil {
		return nil, err
	}
	var warnings []EnvWarning
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		envs := f.Annotations[envAnnotation]
		if err != nil || len(envs) == 0 {
			return
		}
		env := envs[0]
		_, own := lookup(env)
		applied := false
		for _, a := range append(Aliases(), Renamed()...) {
			if a.Env != env || a.Binary != binary {
				continue
			}
			v, set := lookup(a.Name)
			if !set {
				continue
			}
			whose := "the reference system's name"
			if a.renamed {
				whose = "Tidemark's former name"
			}
			switch {
			case own || f.Changed:
				warnings = append(warnings, EnvWarning{Variable: a.Name, Use: env,
					Message: fmt.Sprintf("environment: %s (%s) is ignored: %s or --%s is set", a.Name, whose, env, f.Name)})
				continue
			case !applied:
				tv, cerr := a.Convert(v, lookup)
				if cerr == nil {
					cerr = fs.Set(f.Name, tv)
				}
				if cerr != nil {
					err = fmt.Errorf("environment %s=%q (%s for %s, --%s): %w", a.Name, v, whose, env, f.Name, cerr)
					return
				}
				applied = true
			}
			warnings = append(warnings, EnvWarning{Variable: a.Name, Use: env,
				Message: fmt.Sprintf("environment: %s is %s; it sets %s, set %s instead", a.Name, whose, env, env)})
		}
	})
	if err != nil {
		return nil, err
	}
	return append(warnings, unknownSettings(fs, environ)...), nil
}

// unknownSettings warns about each variable of environ with a setting prefix
// that is no setting of either system, and each reference setting Tidemark has
// no equivalent of.
func unknownSettings(fs *pflag.FlagSet, environ []string) []EnvWarning {
	known := map[string]bool{}
	for _, n := range tidemarkSettings {
		known[n] = true
	}
	fs.VisitAll(func(f *pflag.Flag) {
		for _, env := range f.Annotations[envAnnotation] {
			known[env] = true
		}
	})
	for _, a := range Aliases() {
		known[a.Name] = true
	}
	renamedTo := map[string]string{}
	for _, a := range Renamed() {
		known[a.Name] = true
		renamedTo[a.Name] = a.Env
	}
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	sort.Strings(names)
	var warnings []EnvWarning
	for _, name := range slices.Compact(names) {
		switch {
		case slices.Contains(referenceIgnored, name):
			warnings = append(warnings, EnvWarning{Variable: name,
				Message: fmt.Sprintf("environment: %s is a setting of the reference system that Tidemark has no equivalent of; it is ignored", name)})
		case referenceFolded[name] != "":
			warnings = append(warnings, EnvWarning{Variable: name,
				Message: fmt.Sprintf("environment: %s is a setting of the reference system that is ignored: %s", name, referenceFolded[name])})
		case retiredSettings[name] != "":
			warnings = append(warnings, EnvWarning{Variable: name,
				Message: fmt.Sprintf("environment: %s is no longer a setting of Tidemark (%s); it is ignored", name, retiredSettings[name])})
		case known[name] || !looksLikeSetting(name):
		default:
			w := EnvWarning{Variable: name, Message: fmt.Sprintf("environment: %s is not a setting of Tidemark or of the reference system; it is ignored", name)}
			if near := nearest(name, known); near != "" {
				if to := renamedTo[near]; to != "" {
					near = to
				}
				w.Use = near
				w.Message += fmt.Sprintf(" (did you mean %s?)", near)
			}
			warnings = append(warnings, w)
		}
	}
	return warnings
}

// nearest is the known name closest to name, if one is close: name without a
// _SECS suffix (the reference's unit) is known, or within a few edits of it.
func nearest(name string, known map[string]bool) string {
	if base, ok := strings.CutSuffix(name, "_SECS"); ok && known[base] {
		return base
	}
	best, bestDist := "", len(name)/5+1
	for k := range known {
		if d := editDistance(name, k); d < bestDist || (d == bestDist && best != "" && k < best) {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (ASCII names).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
