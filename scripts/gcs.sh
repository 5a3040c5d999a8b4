#!/usr/bin/env bash
# gcs.sh starts fake-gcs-server, the Cloud Storage emulator the gs:// tests run against
# (gocloud's gcsblob reaches it through STORAGE_EMULATOR_HOST), with their bucket.
# Tests read TIDEMARK_GCS_ADDR; in CI they fail rather than skip when it is unset.
#
#   scripts/gcs.sh          build (go install) if needed, start, wait, print the export line
#   scripts/gcs.sh stop     stop the instance this script started
#
# Idempotent: if something already answers on the port, nothing is started. Objects
# are kept in memory (they live as long as the server); the bucket is preloaded from
# an empty directory of its name, so no request is needed to create it.
# Environment: GCS_HOST (127.0.0.1), GCS_PORT (4443), GCS_DIR
# (${TMPDIR:-/tmp}/tidemark-gcs: gcs.log, gcs.pid, the preload directory),
# GCS_VERSION (v1.56.1), GCS_WAIT_SECONDS (30), TIDEMARK_TOOLS_BIN (where the binary
# is built).
set -euo pipefail
# shellcheck source=scripts/lib/server.sh
source "$(dirname "$0")/lib/server.sh"

host=${GCS_HOST:-127.0.0.1}
port=${GCS_PORT:-4443}
dir=${GCS_DIR:-${TMPDIR:-/tmp}/tidemark-gcs}
version=${GCS_VERSION:-v1.56.1}
wait_seconds=${GCS_WAIT_SECONDS:-30}
pidfile=$dir/gcs.pid
# Kept in step with objstoretest's TestBucket.
bucket=tidemark-test

start() {
	if server_listening "$host" "$port"; then
		echo "gcs: something already listens on $host:$port; not starting another" >&2
		echo "export TIDEMARK_GCS_ADDR=$host:$port"
		return 0
	fi
	local bin
	bin=$(go_tool fake-gcs-server github.com/fsouza/fake-gcs-server "$version")
	mkdir -p "$dir/preload/$bucket"
	# -public-host and -external-url make the upload URLs the server hands out (a
	# resumable upload's Location) point back at this address.
	server_start fake-gcs-server "$host" "$port" "$pidfile" "$dir/gcs.log" "$wait_seconds" \
		"$bin" -scheme http -host "$host" -port "$port" -backend memory \
		-public-host "$host:$port" -external-url "http://$host:$port" \
		-data "$dir/preload" -log-level warn
	echo "export TIDEMARK_GCS_ADDR=$host:$port"
}

case ${1:-start} in
start) start ;;
stop) server_stop fake-gcs-server "$pidfile" ;;
*)
	echo "usage: $0 [start|stop]" >&2
	exit 2
	;;
esac
