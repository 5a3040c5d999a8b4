#!/usr/bin/env bash
# fuzz.sh is `make fuzz`: every Go fuzz target of the repository, one at a time (go
# refuses a -fuzz pattern that matches several targets, or several packages), each
# for FUZZTIME. Targets are found by grepping the test files for `func FuzzXxx(f
# *testing.F)`, so a new target runs without editing this script. It fails if any
# target fails; the failing input is then in <package>/testdata/fuzz/FuzzXxx/, which
# is where Go's corpus lives and what `go test` replays on every run: commit it with
# the fix, as a regression entry.
#
#   scripts/fuzz.sh                          every target, 10s each
#   FUZZTIME=2m scripts/fuzz.sh FuzzDecodeEntry
#                                            some targets (names, exact), longer
#   FUZZ_KEEP=1 scripts/fuzz.sh              also copy the corpus the run grew (kept by
#                                            Go in its build cache) into testdata/fuzz,
#                                            to commit the entries worth keeping
#
# Environment: GO (go), FUZZTIME (10s per target), FUZZ_PARALLEL (2 fuzzing workers),
# FUZZ_DIRS (the directories searched: pkg internal), FUZZ_KEEP (unset).
set -euo pipefail
cd "$(dirname "$0")/.."

go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
parallel=${FUZZ_PARALLEL:-2}
read -r -a dirs <<<"${FUZZ_DIRS:-pkg internal}"
module=$("$go" list -m)

# "<package dir> <target>" per line, in a stable order.
targets=$(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' "${dirs[@]}" |
  sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)\(.*#\1 \2#' | sort -u)
if [ $# -gt 0 ]; then
  want=" $* "
  targets=$(while read -r dir name; do
    if [[ $want == *" $name "* ]]; then echo "$dir $name"; fi
  done <<<"$targets")
fi
if [ -z "$targets" ]; then
  echo "fuzz: no fuzz targets found${*:+ named $*}" >&2
  exit 1
fi

started=$SECONDS
failed=()
while read -r dir name; do
  printf '\n===== fuzz %s (%s, %s) =====\n' "$name" "./$dir" "$fuzztime"
  if ! "$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$parallel" \
    -timeout 10m "./$dir"; then
    failed+=("./$dir $name")
  fi
  if [ -n "${FUZZ_KEEP:-}" ]; then
    cache="$("$go" env GOCACHE)/fuzz/$module/$dir/$name"
    if [ -d "$cache" ]; then
      mkdir -p "$dir/testdata/fuzz/$name"
      cp -n "$cache"/* "$dir/testdata/fuzz/$name/" 2>/dev/null || true
      echo "fuzz: corpus of $name copied to $dir/testdata/fuzz/$name"
    fi
  fi
done <<<"$targets"

n=$(wc -l <<<"$targets")
if [ ${#failed[@]} -gt 0 ]; then
  printf '\nfuzz: %d of %d targets failed in %ds:\n' "${#failed[@]}" "$n" "$((SECONDS - started))"
  printf '  %s\n' "${failed[@]}"
  echo "fuzz: the failing inputs are in each package's testdata/fuzz/<target>/; fix the bug and commit them"
  exit 1
fi
printf '\nfuzz: %d targets passed, %s each, in %ds\n' "$n" "$fuzztime" "$((SECONDS - started))"
