#!/usr/bin/env bash
# minio.sh starts a local MinIO, the S3-compatible server the s3:// tests run against,
# and creates their bucket. Tests read TIDEMARK_MINIO_ADDR; in CI they fail rather than
# skip when it is unset.
#
#   scripts/minio.sh          build (go install) if needed, start, wait, create the
#                             bucket, print the export line
#   scripts/minio.sh stop     stop the instance this script started
#
# Idempotent: if something already answers on the port, nothing is started (the bucket
# is still created if missing). The credentials are public test credentials, like
# Azurite's: MinIO only listens on loopback.
# Environment: MINIO_HOST (127.0.0.1), MINIO_PORT (9100; the console takes the next
# port), MINIO_DIR (${TMPDIR:-/tmp}/tidemark-minio: data, minio.log, minio.pid; the
# data is emptied at each start), MINIO_VERSION (the pinned module version),
# MINIO_WAIT_SECONDS (60), TIDEMARK_TOOLS_BIN (where the binary is built).
set -euo pipefail
# shellcheck source=scripts/lib/server.sh
source "$(dirname "$0")/lib/server.sh"

host=${MINIO_HOST:-127.0.0.1}
port=${MINIO_PORT:-9100}
dir=${MINIO_DIR:-${TMPDIR:-/tmp}/tidemark-minio}
version=${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}
wait_seconds=${MINIO_WAIT_SECONDS:-60}
pidfile=$dir/minio.pid
# Kept in step with objstoretest's MinIOUser, MinIOPassword and TestBucket.
user=tidemark
password=tidemark-secret-key
bucket=tidemark-test

# create_bucket makes the tests' bucket through S3's CreateBucket, signed with curl's
# SigV4. MinIO accepts connections a moment before it serves requests (503 until its
# drive is initialised), so it retries until the deadline. A bucket we already own
# (409 BucketAlreadyOwnedByYou) is fine.
create_bucket() {
	if ! command -v curl >/dev/null 2>&1; then
		echo "minio: curl is needed to create bucket $bucket (apt-get install curl)" >&2
		return 1
	fi
	local deadline=$((SECONDS + wait_seconds)) code
	while :; do
		code=$(curl -s -o "$dir/create-bucket.out" -w '%{http_code}' --max-time 10 -X PUT \
			--aws-sigv4 aws:amz:us-east-1:s3 --user "$user:$password" \
			"http://$host:$port/$bucket") || code=000
		case $code in
		200) echo "minio: created bucket $bucket" >&2 && return 0 ;;
		409) return 0 ;;
		esac
		if ((SECONDS >= deadline)); then
			echo "minio: creating bucket $bucket answered $code after ${wait_seconds}s:" >&2
			cat "$dir/create-bucket.out" >&2 || true
			return 1
		fi
		sleep 0.2
	done
}

start() {
	mkdir -p "$dir"
	if server_listening "$host" "$port"; then
		echo "minio: something already listens on $host:$port; not starting another" >&2
	else
		local bin
		bin=$(go_tool minio github.com/minio/minio "$version")
		rm -rf "$dir/data"
		mkdir -p "$dir/data"
		# MINIO_CI_CD: no refusal of a data directory on the root disk.
		MINIO_ROOT_USER=$user MINIO_ROOT_PASSWORD=$password MINIO_CI_CD=1 MINIO_UPDATE=off \
			server_start minio "$host" "$port" "$pidfile" "$dir/minio.log" "$wait_seconds" \
			"$bin" server --quiet --address "$host:$port" --console-address "$host:$((port + 1))" "$dir/data"
	fi
	create_bucket
	echo "export TIDEMARK_MINIO_ADDR=$host:$port"
}

case ${1:-start} in
start) start ;;
stop) server_stop minio "$pidfile" ;;
*)
	echo "usage: $0 [start|stop]" >&2
	exit 2
	;;
esac
