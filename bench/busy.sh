#!/usr/bin/env bash
# busy.sh: small writes on a busy machine, ferry_bench against raw
# libfabric (rma_raw) in the same rounds.  A CPU-bound loop runs on each
# of CPUs 0 and 1 (where ferry_bench --pin puts its initiator and its
# target) while both tools stream one-way writes of one block, 16 in
# flight; the loops are stopped after every round.
#
#   bench/busy.sh [-n ROUNDS] [-p shm|tcp|rxm] [-s BYTES] [-t SECONDS]
#                 [-b FERRY_BENCH] [-L LIBDIR]
#
#   -n ROUNDS  rounds, the tools taking turns, the order reversed every
#              other round (5)
#   -p         the provider: shm, tcp (libfabric's native tcp, 1.18 and
#              later) or rxm (tcp;ofi_rxm, as libfabric 1.17 has it), over
#              lo for the last two (shm)
#   -s BYTES   block size (4096)
#   -t SECONDS measured time of each tool's run (1), after its warmup
#   -b PATH    ferry_bench (default: build/bench/ferry_bench beside this
#              script); rma_raw is taken from beside it
#   -L DIR     a libfabric to run both against (its lib/), e.g. a release
#              built into /opt; default: the system's
#
# Prints each round's GB/s and, at the end, each tool's median and the
# median of the rounds' ratios ferry / rma_raw.  rma_raw's two processes
# are not pinned (taskset -c 0,1), so the scheduler places them.
set -uo pipefail

me=busy.sh
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rounds=5 prov=shm size=4096 secs=1 libdir=''
bench=$src_dir/../build/bench/ferry_bench
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while getopts n:p:s:t:b:L:h opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	p) prov=$OPTARG ;;
	s) size=$OPTARG ;;
	t) secs=$OPTARG ;;
	b) bench=$OPTARG ;;
	L) libdir=$OPTARG ;;
	*) usage ;;
	esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$me: -n $rounds: give a whole number of rounds, e.g. 5" >&2; exit 2; }
[[ $size =~ ^[1-9][0-9]*$ ]] || { echo "$me: -s $size: give the block size in bytes, e.g. 4096" >&2; exit 2; }
[[ $secs =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk -v t="$secs" 'BEGIN { exit !(t >= 0.1 && t <= 60) }' ||
	{ echo "$me: -t $secs: give the seconds of each run, from 0.1 to 60, e.g. 1" >&2; exit 2; }
case $prov in
shm) FA=(--provider shm) RA=(-p shm) ;;
tcp) FA=(--provider tcp --domain lo) RA=(-p tcp -D lo) ;;
rxm) FA=(--provider "tcp;ofi_rxm" --domain lo) RA=(-p "tcp;ofi_rxm" -D lo) ;;
*) echo "$me: -p $prov: give shm, tcp or rxm" >&2; exit 2 ;;
esac
[[ -x $bench ]] || { echo "$me: no ferry_bench at $bench: build it (make bench/ferry_bench) or pass -b PATH" >&2; exit 2; }
raw=$(dirname "$(dirname "$bench")")/rma_raw
[[ $bench == */.libs/* ]] || raw=$(dirname "$bench")/rma_raw
[[ -x $raw ]] || { echo "$me: no rma_raw at $raw: build it (make bench/rma_raw)" >&2; exit 2; }
(($(nproc) >= 2)) || { echo "$me: needs 2 CPUs, this machine has $(nproc)" >&2; exit 2; }
lib_env=()
if [[ -n $libdir ]]; then
	[[ -d $libdir ]] || { echo "$me: -L $libdir: no such directory" >&2; exit 2; }
	lib_env=(env "LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
fi

loops=()
stop_loops() {
	((${#loops[@]})) && kill "${loops[@]}" 2> /dev/null
	wait "${loops[@]}" 2> /dev/null
	loops=()
}
trap 'stop_loops; rm -f "${err:-}"' EXIT
start_loops() {
	for c in 0 1; do
		taskset -c "$c" timeout 120 sh -c 'while :; do :; done' &
		loops+=($!)
	done
	sleep 0.3 # the loops own their CPUs before the tools start
}

err=$(mktemp) || exit 1
# ferry_bench's GB/s from its --json; its last line of error stays in $err.
ferry_run() {
	"${lib_env[@]}" timeout -k 5 60 "$bench" --loopback --pin "${FA[@]}" --op write \
		--inflight 16 --block-size "$size" --same-block --duration "$secs" --warmup 0.3 \
		--json 2> "$err" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["runs"][0]["gb_per_s"])' 2> /dev/null
}
# rma_raw's result line is "BYTES ITERATIONS GB/S OPS/S": GB/s from the
# first and last, since its own column's three decimals read 0.000 below
# 0.5 MB/s (a starved run, which is a result: 0 when it moved nothing).
raw_run() {
	"${lib_env[@]}" timeout -k 5 60 taskset -c 0,1 "$raw" "${RA[@]}" -s "$size" -b -d 16 \
		-B "$size" -T "$secs" -w 64 2> "$err" |
		awk 'NF == 4 { printf "%.6g\n", $1 * $4 / 1e9 }'
}
# VALUE TOOL ROUND: VALUE, or x with the tool's last line of error.
or_x() {
	[[ -n $1 ]] && { echo "$1"; return; }
	echo "$me: round $3: $2 gave no result: $(tail -n 1 "$err")" >&2
	echo x
}

f_all=() r_all=()
echo "round ferry_GB/s rma_raw_GB/s ratio"
for ((i = 1; i <= rounds; i++)); do
	start_loops
	if ((i % 2)); then
		f=$(or_x "$(ferry_run)" ferry_bench "$i") r=$(or_x "$(raw_run)" rma_raw "$i")
	else
		r=$(or_x "$(raw_run)" rma_raw "$i") f=$(or_x "$(ferry_run)" ferry_bench "$i")
	fi
	stop_loops
	ratio=$(awk -v f="$f" -v r="$r" 'BEGIN { if (f != "x" && r != "x" && r > 0) printf "%.3f", f / r; else print "x" }')
	echo "$i $f $r $ratio"
	f_all+=("$f") r_all+=("$r")
done
python3 - "${f_all[*]}" "${r_all[*]}" "$prov" "$size" <<'PY'
import statistics, sys
f = sys.argv[1].split(); r = sys.argv[2].split()
fv = [float(a) for a in f if a != "x"]
rv = [float(b) for b in r if b != "x"]
if not fv or not rv:
    sys.exit("busy.sh: no round gave a result of %s" % ("ferry_bench" if not fv else "rma_raw"))
ratios = [float(a) / float(b) for a, b in zip(f, r) if a != "x" and b != "x" and float(b) > 0]
rate = lambda v: "%.3g GB/s (%.3g-%.3g)" % (statistics.median(v), min(v), max(v))
print("%s %s B, a busy loop on CPUs 0 and 1: ferry %s, rma_raw %s, ferry / rma_raw %s" % (
    sys.argv[3], sys.argv[4], rate(fv), rate(rv),
    "%.2f (median of %d rounds)" % (statistics.median(ratios), len(ratios)) if ratios
    else "- (rma_raw moved nothing in any round)"))
PY
