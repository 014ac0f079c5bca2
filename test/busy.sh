#!/bin/sh
# bench/busy.sh, briefly: it refuses bad options by name (exit 2), a
# ferry_bench that fails is named with its error (exit 1), a starved
# rma_raw is a rate of 0, and one round on the busy machine it makes
# prints both tools' rates and their ratio.
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
exits 2 "-t 0: give the seconds of each run, from 0.1 to 60" bash "$busy" -t 0 -b "$bin"
exits 2 "no ferry_bench at $tmp/none" bash "$busy" -b "$tmp/none"
if [ "$(nproc)" -lt 2 ]; then
	echo "SKIP: busy.sh puts a busy loop on CPUs 0 and 1; this machine has $(nproc) CPU"
	exit 77
fi
# The runs are short (-t 0.2): the busy loops slow the tests that run
# beside this one.
# A ferry_bench that fails: the round says so with its error, and with no
# round complete the script exits 1.
mkdir "$tmp/fake"
printf '#!/bin/sh\necho "ferry_bench: no provider (a stand-in that fails)" >&2\nexit 1\n' \
	>"$tmp/fake/ferry_bench"
chmod +x "$tmp/fake/ferry_bench"
ln -s "$abs_top_builddir/bench/rma_raw" "$tmp/fake/rma_raw"
exits 1 "round 1: ferry_bench gave no result: ferry_bench: no provider (a stand-in that fails)" \
	bash "$busy" -n 1 -t 0.2 -b "$tmp/fake/ferry_bench"
# An rma_raw that moved nothing (starved) is a rate of 0 with no ratio.
mkdir "$tmp/starved"
printf '#!/bin/sh\necho '"'"'{"runs": [{"gb_per_s": 1.5}]}'"'"'\n' >"$tmp/starved/ferry_bench"
printf '#!/bin/sh\necho "4096 0 0.000 0"\n' >"$tmp/starved/rma_raw"
chmod +x "$tmp/starved/ferry_bench" "$tmp/starved/rma_raw"
exits 0 "ferry 1.5 GB/s (1.5-1.5), rma_raw 0 GB/s (0-0), ferry / rma_raw - (rma_raw moved nothing in any round)" \
	bash "$busy" -n 1 -t 0.2 -b "$tmp/starved/ferry_bench"
exits 0 "shm 4096 B, a busy loop on CPUs 0 and 1: ferry" bash "$busy" -n 1 -t 0.2 -b "$bin"
# A starved rma_raw is a result too (0 GB/s, no ratio), so either form.
if grep -E '^1 [0-9.e+-]+ [0-9.e+-]+ ([0-9.]+|x)$' "$tmp/out" >/dev/null &&
	grep -E 'ferry [0-9.e+-]+ GB/s \(.*\), rma_raw [0-9.e+-]+ GB/s \(.*\), ferry / rma_raw ([0-9.]+ \(median of 1 rounds\)|- \(rma_raw moved nothing in any round\))' "$tmp/out" >/dev/null; then
	pass "busy.sh reports the round and both tools' rates with their ratio"
else
	fail "busy.sh printed no round line or no summary with both rates and the ratio"
fi
exit $status
