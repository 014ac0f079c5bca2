#!/usr/bin/env bash
# ab.sh: one ferry_bench binary against two builds of libferry, runs
# alternating, to measure a library change on a noisy machine.
#
#   bench/ab.sh -a OLD_LIBDIR -b NEW_LIBDIR [-n RUNS] [-x BIN] -- ARGS...
#
#   -a DIR   directory holding the "before" libferry.so* (e.g. a copy of
#            build/lib/.libs taken before the change)
#   -b DIR   the "after" one (default: build/lib/.libs next to this script)
#   -n RUNS  pairs of runs (default 5); the two sides alternate
#   -x BIN   the real ferry_bench binary, not libtool's wrapper (default
#            build/bench/.libs/ferry_bench)
#   -X BIN   the binary of the "before" runs, where the change touched the
#            public header (a binary runs only against the library it was
#            built with); default: the -x one
#   -A VARS  environment of the "before" runs ("NAME=VALUE ..."), e.g.
#            -A FERRY_LIVENESS_MS=0 with -a and -b the same directory to
#            measure a setting instead of a change
#   -B VARS  environment of the "after" runs
#   ARGS     ferry_bench options; --json is added
#
# Prints one line per run (GB/s, ops/s, mean latency, CPU s per GB on
# each side, load average), then the median and min-max of each side and
# the ratio after / before of GB/s, ops/s and mean latency: the median of
# the rounds' ratios, each round one run of each side, seconds apart,
# with their range, how many rounds had the after side higher, and the
# sign test's two-sided p of that count: the chance that a change which
# moves nothing would split the rounds at least as unevenly.  On a VM
# whose runs jump between modes, a median that a p above 0.1 comes with
# is noise until more rounds say otherwise.
# A run that fails shows as x, with ferry_bench's last line of error on
# stderr, as does a figure a run has not (a ping-pong's target CPU); when
# no run gave a result the script exits 1.
set -uo pipefail

me=ab.sh
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
old='' new=$src_dir/../build/lib/.libs runs=5 bin=$src_dir/../build/bench/.libs/ferry_bench
env_before='' env_after='' bin_before=''
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while getopts a:b:n:x:X:A:B:h opt; do
	case $opt in
	X) bin_before=$OPTARG ;;
	A) env_before=$OPTARG ;;
	B) env_after=$OPTARG ;;
	a) old=$OPTARG ;;
	b) new=$OPTARG ;;
	n) runs=$OPTARG ;;
	x) bin=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
bin_before=${bin_before:-$bin}
[[ -n $old && -d $old && -d $new && -x $bin && -x $bin_before ]] || usage
[[ $runs =~ ^[1-9][0-9]*$ ]] || usage
command -v python3 > /dev/null || { echo "$me: needs python3" >&2; exit 2; }

tmp=$(mktemp) && err=$(mktemp) || exit 1
trap 'rm -f "$tmp" "$err"' EXIT
one() { # SIDE LIBDIR ENV BIN ARGS...
	local side=$1 dir=$2 vars=$3 exe=$4 line
	shift 4
	# $vars is split on purpose: one NAME=VALUE per word.
	# shellcheck disable=SC2086
	line=$(env LD_LIBRARY_PATH="$dir" $vars timeout -k 5 600 "$exe" "$@" --json 2> "$err" |
		python3 -c '
import json, sys
r = json.load(sys.stdin)["runs"][0]
c = r["cpu_s_per_gb"]
f = lambda v: "x" if v is None else "%.3f" % v  # x: no such figure
print("%.4f %.1f %.2f %s %s" % (r["gb_per_s"], r["ops_per_s"],
      r["latency_us"]["mean"], f(c["initiator"]), f(c["target"])))' 2> /dev/null)
	if [[ -z $line ]]; then
		line="x x x x x"
		echo "$me: a run $side failed: $(tail -n 1 "$err")" >&2
	fi
	echo "$side $line $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$tmp"
}
echo "side GB/s ops/s mean_us cpu_s/GB_here cpu_s/GB_target load"
for ((i = 1; i <= runs; i++)); do
	if ((i % 2)); then
		one before "$old" "$env_before" "$bin_before" "$@"
		one after "$new" "$env_after" "$bin" "$@"
	else
		one after "$new" "$env_after" "$bin" "$@"
		one before "$old" "$env_before" "$bin_before" "$@"
	fi
done
python3 - "$tmp" <<'PY'
import math, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]


def sign_test(higher, lower):
    """Two-sided p of rounds split `higher` above 1 and `lower` below
    when either side is as likely as the other (rounds at exactly 1 tell
    nothing and are left out)."""
    n, tail = higher + lower, max(higher, lower)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(tail, n + 1)) / 2 ** n)


def ratio_summary(per):
    if not per:
        return "-"
    higher, lower = sum(r > 1 for r in per), sum(r < 1 for r in per)
    return "%.2f (%d rounds: %.2f-%.2f, %d higher and %d lower, sign test p %.2g)" % (
        statistics.median(per), len(per), min(per), max(per), higher, lower,
        sign_test(higher, lower))


names = ["GB/s", "ops/s", "mean us", "CPU s/GB here", "CPU s/GB target"]
if not any(r[1] != "x" for r in rows):
    sys.exit("ab.sh: no run gave a result (the reasons are above)")
for k, name in enumerate(names):
    v = {s: [float(r[k + 1]) for r in rows if r[0] == s and r[k + 1] != "x"]
         for s in ("before", "after")}
    if not v["before"] or not v["after"]:
        continue
    b, a = statistics.median(v["before"]), statistics.median(v["after"])
    # The ratio is the median of the rounds' ratios: the two runs of a
    # round are seconds apart, where the machine's mode rarely changes
    # (docs/performance.md, Method); the runs of a round are rows 2i, 2i+1.
    rounds = [rows[i:i + 2] for i in range(0, len(rows) - 1, 2)]
    per = [float(d["after"]) / float(d["before"])
           for d in ({r[0]: r[k + 1] for r in pair} for pair in rounds)
           if "x" not in (d.get("before", "x"), d.get("after", "x"))
           and float(d["before"]) > 0 and float(d["after"]) > 0]
    print("%-16s before %.4g (%.4g-%.4g)  after %.4g (%.4g-%.4g)  after/before %s"
          % (name, b, min(v["before"]), max(v["before"]), a, min(v["after"]),
             max(v["after"]), ratio_summary(per)))
PY
