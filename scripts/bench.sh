#!/usr/bin/env bash
# bench.sh is `make bench`: the incident reproductions of bench/ (old shape next to
# new, one run), written as the "Incident reproductions" section at the end of
# BENCHMARKS.md, then every Go benchmark of the repository. Everything printed goes
# to bench.out as well.
#
#   scripts/bench.sh                     everything (the scenarios alone: 7-11 minutes on 2 shared cores)
#   BENCH_FLAGS='--only storm,lock' scripts/bench.sh
#                                        some scenarios (the section then holds only those)
#   BENCH_FLAGS='--only scale' BENCH_GO=0 scripts/bench.sh
#                                        stores of 1M and 10M rows (not in the default:
#                                        tens of minutes; --scale-rows for other sizes)
#   BENCH_GO=0 scripts/bench.sh          skip the Go benchmarks
#
# Environment: GO (go), BENCHTIME (2s) and BENCHCOUNT (1) for the Go benchmarks,
# BENCH_FLAGS (extra flags of `tidemark-bench run`, see --help), BENCH_WRITE
# (BENCHMARKS.md; empty: print only).
set -euo pipefail
cd "$(dirname "$0")/.."

go=${GO:-go}
benchtime=${BENCHTIME:-2s}
benchcount=${BENCHCOUNT:-1}
write=${BENCH_WRITE-BENCHMARKS.md}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$go" build -o "$tmp/tidemark-bench" ./bench/cmd/tidemark-bench

{
	# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
	"$tmp/tidemark-bench" run ${write:+--write "$write"} --command "make bench" ${BENCH_FLAGS:-}
	if [ "${BENCH_GO:-1}" != 0 ]; then
		"$go" test -run '^$' -bench . -benchmem -benchtime "$benchtime" -count "$benchcount" -timeout 60m ./...
	fi
} 2>&1 | tee bench.out
