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
. "$srcdir/test/runs.sh"
scratch ab

# The real binary and the library beside libtool's wrapper, as a user
# passes them; a build without shared libraries has them in place.
bin=$abs_top_builddir/bench/.libs/ferry_bench
[ -x "$bin" ] || bin=$abs_top_builddir/bench/ferry_bench
lib=$abs_top_builddir/lib/.libs
[ -d "$lib" ] || lib=$abs_top_builddir/lib

exits 2 "-a DIR" bash "$ab" -b "$lib" -x "$bin" -- --provider shm
exits 2 "-n RUNS" bash "$ab" -a "$lib" -b "$lib" -x "$bin" -n 0 -- --provider shm
exits 1 "a run before failed: ferry_bench: --pingpong does not go with --inflight" \
	bash "$ab" -a "$lib" -b "$lib" -x "$bin" -n 1 -- --provider shm --pingpong --inflight 4
exits 1 "no run gave a result" \
	bash "$ab" -a "$lib" -b "$lib" -x "$bin" -n 1 -- --provider shm --pingpong --inflight 4

# Two rounds of real runs: every stream figure has both sides and a ratio,
# the rounds' range, how they split and the sign test's p.  Two rounds
# split 2-0 (p = 2 x 1/4) or 1-1 (p = 1), unless one is exactly even.
exits 0 "after/before" bash "$ab" -a "$lib" -b "$lib" -x "$bin" -n 2 -- \
	--provider shm --block-size 64K --duration 0.2 --warmup 0.05
split='(2 higher and 0 lower, sign test p 0.5|0 higher and 2 lower, sign test p 0.5|1 higher and 1 lower, sign test p 1|[01] higher and [01] lower, sign test p 1)'
for figure in "GB/s" "ops/s" "mean us" "CPU s/GB here" "CPU s/GB target"; do
	if grep -E "^$figure +before [0-9.e+]+ .* after [0-9.e+]+ .* after/before [0-9.]+ \(2 rounds: [0-9.]+-[0-9.]+, $split\)" \
		"$tmp/out" > /dev/null; then
		pass "ab.sh reports $figure for both sides, with the ratio of 2 rounds and their sign test"
	else
		fail "ab.sh reports no \"$figure\" line with both sides, 2 rounds and their sign test"
	fi
done
exit $status
