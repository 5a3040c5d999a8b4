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

host=${AZURITE_HOST:-127.0.0.1}
port=${AZURITE_PORT:-10000}
dir=${AZURITE_DIR:-${TMPDIR:-/tmp}/tidemark-azurite}
version=${AZURITE_VERSION:-3.37.0}
wait_seconds=${AZURITE_WAIT_SECONDS:-30}
pidfile=$dir/azurite.pid
logfile=$dir/azurite.log

# listening reports whether a TCP connect to host:port succeeds (bash's /dev/tcp, so no
# curl or nc is needed).
listening() {
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

stop() {
	if [[ -f $pidfile ]]; then
		pid=$(cat "$pidfile")
		# Only signal the pid if it is still Azurite: a stale pid file may name a
		# process that reused the number.
		if kill -0 "$pid" 2>/dev/null && ps -o args= -p "$pid" | grep -q azurite; then
			kill "$pid"
			for _ in $(seq 1 50); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
		fi
		rm -f "$pidfile"
		echo "azurite stopped (pid $pid)" >&2
	else
		echo "azurite: no pid file at $pidfile; nothing to stop" >&2
	fi
}

start() {
	if listening; then
		echo "azurite: something already listens on $host:$port; not starting another" >&2
		echo "export TIDEMARK_AZURITE_ADDR=$host:$port"
		return 0
	fi
	if ! command -v azurite-blob >/dev/null 2>&1; then
		echo "azurite: installing azurite@$version with npm" >&2
		npm install -g --no-audit --no-fund "azurite@$version" >&2
	fi
	mkdir -p "$dir/data"
	rm -f "$pidfile"
	# setsid detaches Azurite from this shell's process group, so a CI step that ends
	# the script's group does not take the server down with it. The inner shell
	# records its own pid and execs Azurite, so the pid file names Azurite whether or
	# not setsid had to fork.
	# shellcheck disable=SC2016 # $$, $1 and $@ belong to the inner shell
	setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pidfile" \
		azurite-blob --blobHost "$host" --blobPort "$port" --location "$dir/data" \
		--loose --skipApiVersionCheck >"$logfile" 2>&1 </dev/null &
	for _ in $(seq 1 50); do
		[[ -s $pidfile ]] && break
		sleep 0.1
	done
	deadline=$((SECONDS + wait_seconds))
	until listening; do
		if ! kill -0 "$(cat "$pidfile" 2>/dev/null || echo 0)" 2>/dev/null; then
			echo "azurite: exited during start-up; log $logfile:" >&2
			tail -n 50 "$logfile" >&2 || true
			rm -f "$pidfile"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			echo "azurite: not listening on $host:$port after ${wait_seconds}s; log $logfile:" >&2
			tail -n 50 "$logfile" >&2 || true
			stop
			return 1
		fi
		sleep 0.2
	done
	echo "azurite: listening on $host:$port (pid $(cat "$pidfile"), log $logfile)" >&2
	echo "export TIDEMARK_AZURITE_ADDR=$host:$port"
}

case ${1:-start} in
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 [start|stop]" >&2
	exit 2
	;;
esac
