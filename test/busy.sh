#!/bin/sh
# bench/busy.sh, briefly: it refuses bad options by name (exit 2), a
# ferry_bench that fails is named with its error (exit 1), and one round
# on the busy machine it makes prints both tools' rates and their ratio.
# The rates' values are docs/performance.md's business (a benchmark, not
# a timed test), not this test's.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
busy=$srcdir/bench/busy.sh
. "$srcdir/test/runs.sh"
scratch busy

bin=$abs_top_builddir/bench/ferry_bench
exits 2 "-n 0: give a whole number of rounds" bash "$busy" -n 0 -b "$bin"
exits 2 "-p verbs: give shm, tcp or rxm" bash "$busy" -p verbs -b "$bin"
exits 2 "no ferry_bench at $tmp/none" bash "$busy" -b "$tmp/none"
if [ "$(nproc)" -lt 2 ]; then
	echo "SKIP: busy.sh puts a busy loop on CPUs 0 and 1; this machine has $(nproc) CPU"
	exit 77
fi
# A ferry_bench that fails: the round says so with its error, and with no
# round complete the script exits 1.
mkdir "$tmp/fake"
printf '#!/bin/sh\necho "ferry_bench: no provider (a stand-in that fails)" >&2\nexit 1\n' \
	>"$tmp/fake/ferry_bench"
chmod +x "$tmp/fake/ferry_bench"
ln -s "$abs_top_builddir/bench/rma_raw" "$tmp/fake/rma_raw"
exits 1 "round 1: ferry_bench gave no result: ferry_bench: no provider (a stand-in that fails)" \
	bash "$busy" -n 1 -b "$tmp/fake/ferry_bench"
exits 0 "shm 4096 B, a busy loop on CPUs 0 and 1: ferry" bash "$busy" -n 1 -b "$bin"
if grep -E '^1 [0-9.]+ [0-9.]+ [0-9.]+$' "$tmp/out" >/dev/null &&
	grep -E 'ferry [0-9.e+-]+ GB/s \(.*\), rma_raw [0-9.e+-]+ \(.*\), ferry / rma_raw [0-9.]+ \(median of 1 rounds\)' "$tmp/out" >/dev/null; then
	pass "busy.sh reports the round and both tools' rates with their ratio"
else
	fail "busy.sh printed no round line or no summary with both rates and the ratio"
fi
exit $status
