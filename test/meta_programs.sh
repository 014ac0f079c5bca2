#!/bin/bash
# The programs over a metadata service, run as a person would: an etcd
# started here on loopback ports (data in a temp dir), then hello_write,
# kv_transfer and ferry_bench meeting through it by name (--metadata, and
# FERRY_METADATA), and hello_write through the bootstrap hub
# (bootstrap://).  Exits 77 when etcd is not installed.  Run by make check.

# Make check runs scripts with $(SHELL), which may be a plain sh.
if test -z "${BASH_VERSION:-}"; then
	exec bash "$0" "$@"
fi
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

ex=$abs_top_builddir/examples
fb=$abs_top_builddir/bench/ferry_bench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-meta-programs.XXXXXX")
etcd_pid=
cleanup() {
	if test -n "$etcd_pid"; then
		kill -9 "$etcd_pid" 2>/dev/null || true
		wait "$etcd_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
status=0

if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
	echo "SKIP: etcd or etcdctl is not installed (apt-get install etcd-server etcd-client)"
	exit 77
fi

# Two free loopback ports, from the kernel.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
client_port=$(free_port)
peer_port=$(free_port)
etcd --name m0 --data-dir "$tmp/etcd" \
	--listen-client-urls "http://127.0.0.1:$client_port" \
	--advertise-client-urls "http://127.0.0.1:$client_port" \
	--listen-peer-urls "http://127.0.0.1:$peer_port" \
	--initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
	--initial-cluster "m0=http://127.0.0.1:$peer_port" >"$tmp/etcd.log" 2>&1 &
etcd_pid=$!
healthy=no
for _ in $(seq 100); do
	if ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$client_port" endpoint health >/dev/null 2>&1; then
		healthy=yes
		break
	fi
	sleep 0.2
done
if test "$healthy" != yes; then
	cat "$tmp/etcd.log"
	echo "FAIL: etcd did not become healthy on 127.0.0.1:$client_port within 20 s"
	exit 1
fi
url="etcd://127.0.0.1:$client_port/programs"

# pair NAME WORDS SERVER... -- CLIENT...: both exit 0 within 120 s, and
# the server's output says WORDS.
pair() {
	name=$1
	words=$2
	shift 2
	server=()
	while test "$1" != --; do
		server+=("$1")
		shift
	done
	shift
	timeout 120 "${server[@]}" >"$tmp/server" 2>&1 &
	spid=$!
	code=0
	timeout 120 "$@" >"$tmp/client" 2>&1 || code=$?
	scode=0
	wait "$spid" || scode=$?
	if test "$code" -eq 0 && test "$scode" -eq 0 && grep -F -- "$words" "$tmp/server" >/dev/null; then
		echo "PASS: $name"
	else
		cat "$tmp/server" "$tmp/client"
		echo "FAIL: $name (client exit $code, server exit $scode, expected \"$words\")"
		status=1
	fi
}

. "$(dirname "$0")/runs.sh"

pair "hello_write over etcd" "bytes verified: OK" \
	"$ex/hello_write" server --metadata "$url" --name hello --size 1M -- \
	"$ex/hello_write" client hello --metadata "$url" --size 1M
FERRY_METADATA=$url runs "demo: OK" "$ex/hello_write" demo --size 1M --iterations 2
FERRY_METADATA=$url runs "kv_transfer (push): OK" "$ex/kv_transfer" demo --mode push
FERRY_METADATA=$url runs "kv_transfer (pull): OK" "$ex/kv_transfer" demo --mode pull
pair "ferry_bench over etcd" "OK" \
	"$fb" --target --metadata "$url" --name fb --block-size 64K --duration 0.5 -- \
	"$fb" --initiator fb --metadata "$url" --block-size 64K --duration 0.5
hub="bootstrap://127.0.0.1:$(free_port)"
pair "hello_write over the bootstrap hub" "bytes verified: OK" \
	"$ex/hello_write" server --metadata "$hub" --name hello --size 1M -- \
	"$ex/hello_write" client hello --metadata "$hub" --size 1M
# Everything closed cleanly: nothing is left under the prefix.
left=$(ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$client_port" get --prefix --keys-only programs/ | grep -c . || true)
if test "$left" -eq 0; then
	echo "PASS: no entries left under programs/"
else
	ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$client_port" get --prefix --keys-only programs/
	echo "FAIL: $left entries left under programs/ after every program closed"
	status=1
fi
exit $status
