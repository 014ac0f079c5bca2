#!/bin/sh
# bench/opcount.sh, briefly: it refuses bad options with a sentence (exit
# 2), and a short shm run prints the instructions per operation of ferry
# (some of them in libferry and in libfabric) and of rma_raw (none in
# libferry), and both tools' system calls.  Nothing is judged by its
# value: the numbers are docs/performance.md's business.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
opcount=$srcdir/bench/opcount.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-opcount.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

pass() { echo "PASS: $1"; }
fail() { cat "$tmp/out"; echo "FAIL: $1"; status=1; }

# expect CODE WORDS ARGS...: opcount ARGS exits CODE and prints WORDS.
expect() {
	code=$1 words=$2
	shift 2
	rc=0
	bash "$opcount" -B "$abs_top_builddir" "$@" > "$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -eq "$code" ] && grep -F -- "$words" "$tmp/out" > /dev/null; then
		pass "opcount.sh $* (exit $rc, \"$words\")"
	else
		fail "opcount.sh $* (exit $rc; expected $code and \"$words\")"
	fi
}

expect 2 'write or read, not "move"' -o move
expect 2 'positive whole number, not "0"' -n 0
expect 2 'positive whole number, not "4k"' -s 4k

if ! command -v valgrind > /dev/null || ! command -v strace > /dev/null; then
	echo "SKIP: the counting runs need valgrind and strace (apt-get install valgrind strace)"
	exit 77
fi
if grep -q -- -fsanitize "$abs_top_builddir/config.log" 2> /dev/null; then
	expect 1 "is a sanitizer build, which valgrind cannot run" -n 10
	echo "SKIP: the counting runs: valgrind cannot run a sanitizer build"
	exit 77
fi

rc=0
timeout 600 bash "$opcount" -B "$abs_top_builddir" -p shm -n 300 -d 4 > "$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
# A row: "  ferry  TOTAL LIBFERRY LIBFABRIC LIBC BENCH OTHER".
row() { awk -v t="$1" '$1 == t && NF == 7' "$tmp/out"; }
if [ "$rc" -ne 0 ]; then
	fail "opcount.sh -p shm -n 300 -d 4 exited $rc"
elif row ferry | awk '$2 > 0 && $3 > 0 && $4 > 0 { ok = 1 } END { exit !ok }'; then
	pass "ferry's instructions per operation, some in libferry and in libfabric"
else
	fail "no ferry row with instructions in libferry and libfabric"
fi
if row rma_raw | awk '$2 > 0 && $3 == "-" && $4 > 0 { ok = 1 } END { exit !ok }'; then
	pass "rma_raw's instructions per operation, none in libferry"
else
	fail "no rma_raw row with instructions in libfabric and none in libferry"
fi
if [ "$(grep -c -E '^  (ferry|rma_raw) .*\|' "$tmp/out")" -eq 2 ]; then
	pass "a line of system calls per tool"
else
	fail "no line of system calls for each of ferry and rma_raw"
fi
exit $status
