#!/bin/sh
# bench/rma_pingpong, the raw-libfabric floor compare.sh sets beside
# ferry_bench --pingpong, briefly: it refuses bad options (exit 2) and
# answers with one "BYTES ITERATIONS USEC" line on tcp and shm (and on shm
# with -t, transmit completion), so that compare.sh's latency cases cannot
# lose their reference unnoticed.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

rp=$abs_top_builddir/bench/rma_pingpong
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-rma.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

# expect CODE PATTERN ARGS...: rma_pingpong ARGS exits CODE, and its output
# matches the extended regular expression PATTERN.
expect() {
	code=$1 pattern=$2
	shift 2
	rc=0
	timeout 60 "$rp" "$@" >"$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -eq "$code" ] && grep -E -- "$pattern" "$tmp/out" >/dev/null; then
		echo "PASS: rma_pingpong $* (exit $rc)"
	else
		cat "$tmp/out"
		echo "FAIL: rma_pingpong $* (exit $rc; expected $code and /$pattern/)"
		status=1
	fi
}

expect 2 "usage: rma_pingpong -p PROVIDER" -s 8
expect 2 "-s 0 is not a whole number in range" -p shm -s 0
expect 2 "-n x is not a whole number in range" -p shm -n x
expect 0 "^8 2000 [0-9]+\.[0-9]{3}$" -p "tcp;ofi_rxm" -n 2000 -w 100
expect 0 "^4096 2000 [0-9]+\.[0-9]{3}$" -p shm -s 4096 -n 2000 -w 100
expect 0 "^8 2000 [0-9]+\.[0-9]{3}$" -p shm -t -n 2000 -w 100
expect 1 "fi_getinfo failed" -p no-such-provider -n 10
exit $status
