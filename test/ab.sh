#!/bin/sh
# bench/ab.sh, briefly: it refuses missing options with its usage (exit
# 2); when ferry_bench refuses a run it says why and, with no result at
# all, exits 1 instead of printing an empty table; two short rounds of the
# same library against itself print every figure with its ratio.  The
# ratios' values are docs/performance.md's business, not this test's.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
ab=$srcdir/bench/ab.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

# The real binary and the library beside libtool's wrapper, as a user
# passes them; a build without shared libraries has them in place.
bin=$abs_top_builddir/bench/.libs/ferry_bench
[ -x "$bin" ] || bin=$abs_top_builddir/bench/ferry_bench
lib=$abs_top_builddir/lib/.libs
[ -d "$lib" ] || lib=$abs_top_builddir/lib

pass() { echo "PASS: $1"; }
fail() { cat "$tmp/out"; echo "FAIL: $1"; status=1; }

# expect CODE WORDS ARGS...: ab.sh ARGS exits CODE and prints WORDS.
expect() {
	code=$1 words=$2
	shift 2
	rc=0
	timeout 300 bash "$ab" "$@" > "$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -eq "$code" ] && grep -F -- "$words" "$tmp/out" > /dev/null; then
		pass "ab.sh $* (exit $rc, \"$words\")"
	else
		fail "ab.sh $* (exit $rc; expected $code and \"$words\")"
	fi
}

expect 2 "-a DIR" -b "$lib" -x "$bin" -- --provider shm
expect 2 "-n RUNS" -a "$lib" -b "$lib" -x "$bin" -n 0 -- --provider shm
expect 1 "a run before failed: ferry_bench: --pingpong does not go with --inflight" \
	-a "$lib" -b "$lib" -x "$bin" -n 1 -- --provider shm --pingpong --inflight 4
expect 1 "no run gave a result" \
	-a "$lib" -b "$lib" -x "$bin" -n 1 -- --provider shm --pingpong --inflight 4

# Two rounds of real runs: every stream figure has both sides and a ratio.
expect 0 "after/before" -a "$lib" -b "$lib" -x "$bin" -n 2 -- \
	--provider shm --block-size 64K --duration 0.2 --warmup 0.05
for figure in "GB/s" "ops/s" "mean us" "CPU s/GB here" "CPU s/GB target"; do
	if grep -E "^$figure +before [0-9.e+]+ .* after [0-9.e+]+ .* after/before [0-9.]+ \(2 rounds\)" \
		"$tmp/out" > /dev/null; then
		pass "ab.sh reports $figure for both sides, with the ratio of 2 rounds"
	else
		fail "ab.sh reports no \"$figure\" line with both sides and 2 rounds"
	fi
done
exit $status
