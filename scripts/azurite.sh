#!/usr/bin/env bash
# azurite.sh starts a local Azurite blob service for tests of the production store
# (azblob://). Tests read TIDEMARK_AZURITE_ADDR; in CI they fail rather than skip when it
# is unset, so CI never silently stops testing the store production uses.
#
#   scripts/azurite.sh          install (npm) if needed, start, wait, print the export line
#   scripts/azurite.sh stop     stop the instance this script started
#
# Idempotent: if something already answers on the port, nothing is started.
# Environment: AZURITE_HOST (127.0.0.1), AZURITE_PORT (10000), AZURITE_DIR
# (${TMPDIR:-/tmp}/tidemark-azurite: data, azurite.log, azurite.pid),
# AZURITE_VERSION (3.37.0), AZURITE_WAIT_SECONDS (30).
set -euo pipefail
# shellcheck source=scripts/lib/server.sh
source "$(dirname "$0")/lib/server.sh"

host=${AZURITE_HOST:-127.0.0.1}
port=${AZURITE_PORT:-10000}
dir=${AZURITE_DIR:-${TMPDIR:-/tmp}/tidemark-azurite}
version=${AZURITE_VERSION:-3.37.0}
wait_seconds=${AZURITE_WAIT_SECONDS:-30}
pidfile=$dir/azurite.pid

start() {
	if server_listening "$host" "$port"; then
		echo "azurite: something already listens on $host:$port; not starting another" >&2
		echo "export TIDEMARK_AZURITE_ADDR=$host:$port"
		return 0
	fi
	if ! command -v azurite-blob >/dev/null 2>&1; then
		if ! command -v npm >/dev/null 2>&1; then
			echo "azurite: azurite-blob is not installed and npm is not there to install it" >&2
			return 1
		fi
		echo "azurite: installing azurite@$version with npm" >&2
		npm install -g --no-audit --no-fund "azurite@$version" >&2
	fi
	mkdir -p "$dir/data"
	server_start azurite "$host" "$port" "$pidfile" "$dir/azurite.log" "$wait_seconds" \
		azurite-blob --blobHost "$host" --blobPort "$port" --location "$dir/data" \
		--loose --skipApiVersionCheck
	echo "export TIDEMARK_AZURITE_ADDR=$host:$port"
}

case ${1:-start} in
start) start ;;
stop) server_stop azurite "$pidfile" ;;
*)
	echo "usage: $0 [start|stop]" >&2
	exit 2
	;;
esac
