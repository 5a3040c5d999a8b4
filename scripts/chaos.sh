#!/usr/bin/env bash
# chaos.sh is `make chaos`: the reliability campaigns of e2e/ (files chaos_*_test.go,
# build tag chaos) against real processes whose binaries carry the fault hook of
# tools/chaos, then their figures written into the results section of
# RELIABILITY.md. Not part of `make test` or CI: a full run takes about 10 minutes on 2 cores.
#
#   scripts/chaos.sh                       every campaign
#   CHAOS_RUN='StuckWorker|Faults' scripts/chaos.sh
#                                          the campaigns whose test names match (the
#                                          others keep their earlier figures)
#   CHAOS_WRITE= scripts/chaos.sh          print only, leave RELIABILITY.md alone
#   TIDEMARK_CHAOS_DATA=minio CHAOS_RUN=TestChaosHistory scripts/chaos.sh
#                                          the history campaign on MinIO (started with
#                                          scripts/minio.sh unless TIDEMARK_MINIO_ADDR is
#                                          set), its figures a block of their own
#
# Environment: GO (go), CHAOS_RUN (-run regexp, default ^TestChaos), CHAOS_TIMEOUT
# (go test -timeout, default 40m), CHAOS_WRITE (RELIABILITY.md), and the campaigns'
# own knobs, e.g. TIDEMARK_CHAOS_DURATION (the object-store fault phase, 1m),
# TIDEMARK_CHAOS_DATA (file or minio: the history campaign's object storage).
# Everything printed goes to chaos.out as well.
set -euo pipefail
cd "$(dirname "$0")/.."

go=${GO:-go}
run=${CHAOS_RUN:-^TestChaos}
timeout=${CHAOS_TIMEOUT:-40m}
write=${CHAOS_WRITE-RELIABILITY.md}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
records=$tmp/records.jsonl
: >"$records"
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)

# The history campaign on MinIO needs one: started here unless the caller has one.
if [ "${TIDEMARK_CHAOS_DATA:-}" = minio ] && [ -z "${TIDEMARK_MINIO_ADDR:-}" ]; then
	if ! line=$(bash scripts/minio.sh | grep -m1 '^export TIDEMARK_MINIO_ADDR='); then
		echo "chaos: TIDEMARK_CHAOS_DATA=minio, but scripts/minio.sh could not start MinIO" >&2
		exit 1
	fi
	eval "$line"
	echo "chaos: MinIO at $TIDEMARK_MINIO_ADDR (scripts/minio.sh stop stops it)"
fi

status=0
# -race=false: the campaigns measure the system, not the race detector's overhead.
TIDEMARK_CHAOS_REPORT=$records "$go" test -tags chaos -race=false -count=1 -v -timeout "$timeout" \
	-run "$run" ./e2e 2>&1 | tee chaos.out || status=$?

if [ ! -s "$records" ]; then
	echo "chaos: no campaign recorded figures (CHAOS_RUN=$run matched none, or the build failed)" >&2
	exit 1
fi
echo "chaos: figures recorded:"
jq -c '{campaign, test, passed, duration}' "$records" 2>/dev/null || cat "$records"
if [ -n "$write" ]; then
	cmd="make chaos"
	if [ -n "${CHAOS_RUN:-}" ]; then cmd="CHAOS_RUN='$CHAOS_RUN' make chaos"; fi
	if [ -n "${TIDEMARK_CHAOS_DATA:-}" ]; then cmd="TIDEMARK_CHAOS_DATA=$TIDEMARK_CHAOS_DATA $cmd"; fi
	"$go" run ./tools/chaos/cmd/chaos-report --records "$records" --doc "$write" --command "$cmd" --commit "$commit"
	echo "chaos: results written to $write"
fi
exit "$status"
