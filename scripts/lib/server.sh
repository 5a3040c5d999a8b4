# shellcheck shell=bash
# server.sh: what scripts/azurite.sh, minio.sh and gcs.sh share (start a server
# detached, record its pid, wait until it listens, stop it), and test_servers, which
# `make test` and .ci/run call to bring all three up for the tests. Source it; it only
# defines functions.
#
# A started server is detached with setsid and its pid written to a pid file, so a
# CI step that ends the script's process group does not take the server down, and
# `stop` signals the server itself and nothing that reused its pid.

# tools_bin is where the Go-built servers live, shared by every checkout of the
# project (TIDEMARK_TOOLS_BIN overrides).
tools_bin() {
	echo "${TIDEMARK_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark/bin}"
}

# server_listening HOST PORT: whether a TCP connect succeeds (bash's /dev/tcp, so no
# curl or nc is needed).
server_listening() {
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# go_tool BINARY MODULE VERSION: print the path of BINARY built from MODULE@VERSION
# in tools_bin, building it with `go install` only when it is missing or was built
# from another version (go version -m reads the module version from the binary).
go_tool() {
	local name=$1 module=$2 version=$3 dir path
	dir=$(tools_bin)
	path=$dir/$name
	if [[ -x $path ]]; then
		if ! command -v go >/dev/null 2>&1 ||
			go version -m "$path" 2>/dev/null | awk '$1 == "mod" { print $3 }' | grep -qx -- "$version"; then
			echo "$path"
			return 0
		fi
		echo "$name: $path is not $module@$version; rebuilding" >&2
	fi
	if ! command -v go >/dev/null 2>&1; then
		echo "$name: $path is missing and go is not installed to build it" >&2
		return 1
	fi
	echo "$name: building $module@$version into $dir (a few minutes the first time)" >&2
	mkdir -p "$dir"
	local started=$SECONDS
	GOBIN=$dir go install "$module@$version" >&2 || return 1
	echo "$name: built in $((SECONDS - started))s" >&2
	echo "$path"
}

# server_stop NAME PIDFILE: stop the server whose pid PIDFILE holds, if it is still
# a process whose command line names NAME (a stale pid file may name a process that
# reused the number).
server_stop() {
	local name=$1 pidfile=$2 pid
	if [[ ! -f $pidfile ]]; then
		echo "$name: no pid file at $pidfile; nothing to stop" >&2
		return 0
	fi
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null && ps -o args= -p "$pid" | grep -q -- "$name"; then
		kill "$pid"
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
	fi
	rm -f "$pidfile"
	echo "$name stopped (pid $pid)" >&2
}

# server_start NAME HOST PORT PIDFILE LOGFILE WAIT_SECONDS COMMAND...: start COMMAND
# detached, logging to LOGFILE, and wait until HOST:PORT accepts connections. On a
# server that exits or does not listen within WAIT_SECONDS it prints the log's tail,
# stops what it started and fails.
server_start() {
	local name=$1 host=$2 port=$3 pidfile=$4 logfile=$5 wait_seconds=$6
	shift 6
	rm -f "$pidfile"
	# The inner shell records its own pid and execs the server, so the pid file names
	# the server whether or not setsid had to fork.
	# shellcheck disable=SC2016 # $$, $1 and $@ belong to the inner shell
	setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pidfile" "$@" >"$logfile" 2>&1 </dev/null &
	for _ in $(seq 1 50); do
		[[ -s $pidfile ]] && break
		sleep 0.1
	done
	local deadline=$((SECONDS + wait_seconds))
	until server_listening "$host" "$port"; do
		if ! kill -0 "$(cat "$pidfile" 2>/dev/null || echo 0)" 2>/dev/null; then
			echo "$name: exited during start-up; log $logfile:" >&2
			tail -n 50 "$logfile" >&2 || true
			rm -f "$pidfile"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			echo "$name: not listening on $host:$port after ${wait_seconds}s; log $logfile:" >&2
			tail -n 50 "$logfile" >&2 || true
			server_stop "$name" "$pidfile"
			return 1
		fi
		sleep 0.2
	done
	echo "$name: listening on $host:$port (pid $(cat "$pidfile"), log $logfile)" >&2
}

# test_servers [NAME...]: start scripts/NAME.sh for each NAME (default: azurite minio
# gcs) unless its TIDEMARK_<NAME>_ADDR is already set, and export the variable it
# prints. A server that cannot be built or started is reported and its tests skip;
# with CI set (as the tests' helpers read it) that fails instead, so CI never
# silently stops testing a store.
# Run from the repository's root.
test_servers() {
	local name var line log failed=0
	(($# > 0)) || set -- azurite minio gcs
	for name in "$@"; do
		var=TIDEMARK_${name^^}_ADDR
		if [[ -n ${!var:-} ]]; then
			echo "$name: using $var=${!var}"
			continue
		fi
		log=$(mktemp)
		if bash "scripts/$name.sh" >"$log" && line=$(grep -m1 "^export $var=" "$log"); then
			eval "$line"
			echo "$name: running, $var=${!var}"
		else
			cat "$log"
			echo "$name: scripts/$name.sh failed: its tests will be skipped (or fail under CI=true)"
			failed=1
		fi
		rm -f "$log"
	done
	if ((failed)) && [[ -n ${CI:-} ]]; then
		return 1
	fi
	return 0
}
