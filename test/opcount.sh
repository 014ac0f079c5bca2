#!/bin/sh
# bench/opcount.sh, briefly: it refuses bad options with a sentence (exit
# 2), and a short shm run prints the instructions of ferry's runs (some of
# them in libferry and in libfabric) and of rma_raw's (none in libferry),
# per operation for each, and both tools' system calls.  Nothing is judged
# by its value: the numbers are docs/performance.md's business.  Under
# make check's other tests the machine is busy, the loops wait longer in
# one run than in another, and the script may call its counts unsteady
# (exit 3, with a sentence): that is its right answer then, not a failure.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
opcount=$srcdir/bench/opcount.sh
. "$srcdir/test/runs.sh"
scratch opcount

# expect CODE WORDS ARGS...: opcount ARGS exits CODE and prints WORDS.
expect() {
	code=$1 words=$2
	shift 2
	exits "$code" "$words" bash "$opcount" -B "$abs_top_builddir" "$@"
}

expect 2 'write or read, not "move"' -o move
expect 2 'positive whole number, not "0"' -n 0
expect 2 'positive whole number, not "4k"' -s 4k
expect 2 '-r wants a positive whole number, not "0"' -r 0

if ! command -v valgrind > /dev/null || ! command -v strace > /dev/null; then
	echo "SKIP: the counting runs need valgrind and strace (apt-get install valgrind strace)"
	exit 77
fi
if grep -q -- -fsanitize "$abs_top_builddir/config.log" 2> /dev/null; then
	expect 1 "is a sanitizer build, which valgrind cannot run" -n 10
	echo "SKIP: the counting runs: valgrind cannot run a sanitizer build"
	exit 77
fi
if LD_LIBRARY_PATH=$abs_top_builddir/lib/.libs valgrind -q --tool=none \
	"$abs_top_builddir/bench/.libs/ferry_bench" --help 2>&1 > /dev/null | grep -q "debuginfo reader"; then
	expect 1 "cannot read the debug information" -n 10
	echo "SKIP: the counting runs: this valgrind cannot read the build's debug information (clang's DWARF 5 needs valgrind 3.20)"
	exit 77
fi

rc=0
timeout 600 bash "$opcount" -B "$abs_top_builddir" -p shm -n 300 -d 4 -r 1 -v > "$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
# A kept run: "  TOOL OPS TOTAL LIBFERRY LIBFABRIC LIBC BENCH OTHER"; per
# operation: "  TOOL TOTAL LIBFERRY LIBFABRIC LIBC BENCH OTHER".
kept_runs() { awk -v t="$1" '$1 == t && NF == 8' "$tmp/out"; }
per_op() { awk -v t="$1" '$1 == t && NF == 7 && $2 ~ /^-?[0-9]+$/' "$tmp/out"; }
if [ "$rc" -eq 3 ] && grep -q "counts are unsteady: its least run of 600 operations" "$tmp/out"; then
	pass "opcount.sh -p shm -n 300 -d 4 -r 1 -v called its counts unsteady, with a sentence"
elif [ "$rc" -ne 0 ]; then
	fail "opcount.sh -p shm -n 300 -d 4 -r 1 -v exited $rc"
fi
if [ "$(kept_runs ferry | awk '$2 ~ /^(300|600)$/ && $4 > 0 && $5 > 0' | wc -l)" -eq 2 ]; then
	pass "ferry's two runs, each with instructions in libferry and in libfabric"
else
	fail "not two ferry runs with instructions in libferry and libfabric"
fi
if [ "$(kept_runs rma_raw | awk '$2 ~ /^(300|600)$/ && $4 == "-" && $5 > 0' | wc -l)" -eq 2 ]; then
	pass "rma_raw's two runs, each with instructions in libfabric and none in libferry"
else
	fail "not two rma_raw runs with instructions in libfabric and none in libferry"
fi
if [ "$(per_op ferry | wc -l)" -eq 1 ] && [ "$(per_op rma_raw | wc -l)" -eq 1 ]; then
	pass "a row of instructions per operation for each tool"
else
	fail "not one row of instructions per operation for each of ferry and rma_raw"
fi
if [ "$(grep -c -E '^  (ferry|rma_raw) .*\|' "$tmp/out")" -eq 2 ]; then
	pass "a line of system calls per tool"
else
	fail "no line of system calls for each of ferry and rma_raw"
fi
exit $status
