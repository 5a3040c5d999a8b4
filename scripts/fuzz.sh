#!/usr/bin/env bash
# fuzz.sh is `make fuzz`: every Go fuzz target of the repository, one at a time (go
# refuses a -fuzz pattern that matches several targets, or several packages). Targets
# are found by grepping the test files for `func FuzzXxx(f *testing.F)`, so a new
# target runs without editing this script. It fails if any target fails; the failing
# input is then in <package>/testdata/fuzz/FuzzXxx/, which is where Go's corpus lives
# and what `go test` replays on every run: commit it with the fix, as a regression
# entry.
#
# Budgets are execution counts (`-fuzztime Nx`), not durations, on purpose. Go 1.26's
# coordinator races its own -fuzztime deadline (go.dev/issue/75804, fixed in 1.27): a
# worker still busy when a duration runs out fails the target with "context deadline
# exceeded" and no input. Workers are busiest exactly then because minimizing a new
# input costs a coverage snapshot of every instrumented package per execution (about
# 1 ms with arrow-go and the cloud SDKs linked in), so a 60 s default minimization
# stalled the execution count for most of a 10 s run and the race hit often. A count
# sets no deadline, so only a real finding fails CI; minimization is bounded by a count
# too (FUZZ_MINIMIZE) so a run's length stays predictable.
#
#   scripts/fuzz.sh                          every target, its budget below (~10 s each here)
#   FUZZTIME=200000x scripts/fuzz.sh FuzzDecodeEntry
#                                            some targets (names, exact), longer; a
#                                            duration (5m) works too, but may hit the race
#   FUZZ_KEEP=1 scripts/fuzz.sh              also copy the corpus the run grew (kept by
#                                            Go in its build cache) into testdata/fuzz,
#                                            to commit the entries worth keeping
#
# Environment: GO (go), FUZZTIME (every target's budget; unset: the table below),
# FUZZ_MINIMIZE (300x), FUZZ_PARALLEL (2 fuzzing workers), FUZZ_DIRS (the directories
# searched: pkg internal), FUZZ_KEEP (unset).
set -euo pipefail
cd "$(dirname "$0")/.."

go=${GO:-go}
fuzztime=${FUZZTIME:-}
minimize=${FUZZ_MINIMIZE:-300x}
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

# budget prints a target's execution count: about 10 s of fuzzing on the 2-core CI
# machine, measured with scripts/fuzz.sh (execs/s in its output). Targets whose inputs
# are cheap run more executions in the same time.
budget() {
  if [ -n "$fuzztime" ]; then echo "$fuzztime"; return; fi
  case $1 in
    FuzzCheck) echo 60000x ;;                            # ~3,900 execs/s; cheap inputs
    FuzzParseSpec | FuzzDecodeRows | FuzzStoreNames) echo 6000x ;; # slow start-up (seeds)
    FuzzFilter) echo 10000x ;;                           # ~1,100 execs/s (3 compiles each)
    FuzzArrowAdd) echo 8000x ;;                          # most inputs end at ipcguard; a small count
    *) echo 8000x ;;                                     # ~1,000-1,600 execs/s
  esac
}

started=$SECONDS
failed=()
while read -r dir name; do
  b=$(budget "$name")
  t0=$SECONDS
  printf '\n===== fuzz %s (%s, %s) =====\n' "$name" "./$dir" "$b"
  if ! "$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$b" -fuzzminimizetime "$minimize" \
    -parallel "$parallel" -timeout 10m "./$dir"; then
    failed+=("./$dir $name")
  fi
  echo "fuzz: $name took $((SECONDS - t0))s"
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
printf '\nfuzz: %d targets passed in %ds\n' "$n" "$((SECONDS - started))"
