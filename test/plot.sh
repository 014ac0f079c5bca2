#!/bin/sh
# The plots: bench/plot-sweep.sh given small fixed CSV files, bench/
# compare.sh -g given raw runs this test writes (-R: nothing measured),
# and a short ferry_bench --sweep --plot must each write an SVG whose
# lines carry the expected names; and without gnuplot each says so and
# exits 0 with no picture.  Skipped (77) where gnuplot is not installed.
# Run by `make check`.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
src=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}

if ! command -v gnuplot >/dev/null 2>&1; then
	echo "SKIP: gnuplot is not installed (apt-get install gnuplot-nox)"
	exit 77
fi

. "$(dirname "$0")/runs.sh"
scratch plot

# svg_has WHAT FILE NAME...: FILE is an SVG that shows every NAME as text
# (the lines' titles in its key, the axes' labels).
svg_has() {
	what=$1 file=$2
	shift 2
	if ! head -n 1 "$file" 2>/dev/null | grep -q '^<?xml' ||
		! grep -q '<svg' "$file"; then
		fail "$what: $file is not an SVG"
		return
	fi
	for name in "$@"; do
		if ! grep -F -- "<text>$name</text>" "$file" >/dev/null; then
			fail "$what: no \"$name\" in $file"
			return
		fi
	done
	pass "$what: an SVG with $*"
}

# ---- plot-sweep.sh: two sweeps, one line each, named after the files ----

header=size_bytes,gb_per_s,ops_per_s,p50_us,p99_us,p999_us,mean_us
cat >"$tmp/shm write.csv" <<EOF
$header
4096,0.9,220000,8.1,20.5,40.2,9.0
65536,6.2,95000,21.0,60.1,90.3,24.1
1048576,11.4,10900,180.2,300.5,410.9,190.0
EOF
cat >"$tmp/tcp.csv" <<EOF
$header
4096,0.3,73000,30.2,80.0,99.0,33.3
65536,1.1,16800,120.0,200.1,250.2,130.4
1048576,2.0,1900,1010.0,1500.2,1800.3,1050.5
EOF
runs "wrote $tmp/sweep.svg" sh "$src/bench/plot-sweep.sh" -o "$tmp/sweep.svg" \
	-t "two sweeps" "$tmp/shm write.csv" "$tmp/tcp.csv"
svg_has "plot-sweep.sh" "$tmp/sweep.svg" "shm write" tcp "two sweeps" GB/s 4K 64K 1M
runs "wrote $tmp/p50.svg" sh "$src/bench/plot-sweep.sh" -y p50 -o "$tmp/p50.svg" "$tmp/tcp.csv"
svg_has "plot-sweep.sh -y p50" "$tmp/p50.svg" tcp "p50 latency (us)"
exits 2 "name a .png or .svg file" sh "$src/bench/plot-sweep.sh" -o "$tmp/x.pdf" "$tmp/tcp.csv"
exits 1 "not a ferry_bench --csv file" sh "$src/bench/plot-sweep.sh" -o "$tmp/x.svg" "$0"
runs "gnuplot is not installed; skipping the plot" \
	env GNUPLOT="$tmp/no-gnuplot" sh "$src/bench/plot-sweep.sh" -o "$tmp/none.svg" "$tmp/tcp.csv"
if [ -e "$tmp/none.svg" ]; then
	fail "plot-sweep.sh without gnuplot wrote $tmp/none.svg"
fi

# ---- compare.sh -g: a line per tool of the stream group -------------------

cat >"$tmp/raw.txt" <<'RAW'
compare.sh 2026-11-28T00:00:00+00:00 on host (2 CPUs), Linux 6.1
ferry_bench: build/bench/ferry_bench; rma_raw: build/bench/rma_raw; -n 3 -t 1 -d 16 -f block x depth
groups stream; providers shm; ops write; sizes 4K,64K,1M; load average at start: 0.10 0.20 0.30

== stream shm write 4096: s_ferry s_raw s_memcpy
run 1 (load 0.10 0.20 0.30)
s_ferry: 1.0 1.1 0.9 
s_raw: 1.5 1.4 x 
s_memcpy: 9 10 11 

== stream shm write 65536: s_ferry s_raw s_memcpy
s_ferry: 5 6 7 
s_raw: 6 6 6 
s_memcpy: 20 21 22 

== stream shm write 1048576: s_ferry s_raw s_memcpy
s_ferry: 10 11 12 
s_raw: x x x 
s_memcpy: 15 15 15 
Method: `bench/compare.sh -n 3 -t 1`, a line from the run.
RAW
runs "stream-shm-write.svg" bash "$src/bench/compare.sh" -R "$tmp/raw.txt" -g "$tmp/cmp"
svg_has "compare.sh -g" "$tmp/cmp/stream-shm-write.svg" ferry rma_raw memcpy 4K 1M
# The medians: ferry's 64K point at 6 GB/s; no UCX line (no values).
if grep -F -- "<text>UCX</text>" "$tmp/cmp/stream-shm-write.svg" >/dev/null; then
	fail "compare.sh -g drew a UCX line that had no values"
fi
runs "gnuplot is not installed: no plots" \
	env GNUPLOT="$tmp/no-gnuplot" bash "$src/bench/compare.sh" -R "$tmp/raw.txt" -g "$tmp/cmp2"
if [ -e "$tmp/cmp2/stream-shm-write.svg" ]; then
	fail "compare.sh -g without gnuplot wrote a plot"
fi

# ---- ferry_bench --sweep --plot: GB/s and p50 latency of one sweep -----

bench=$abs_top_builddir/bench/ferry_bench
sweep="--provider shm --sweep 4K:8K --duration 0.2 --warmup 0.1"
runs "wrote the plot $tmp/fb.svg" "$bench" $sweep --plot "$tmp/fb.svg"
svg_has "ferry_bench --plot" "$tmp/fb.svg" GB/s "p50 latency" 4K 8K
if ! grep -F "ferry_bench write over shm: blocks 4K:8K" "$tmp/fb.svg" >/dev/null; then
	fail "ferry_bench --plot: the title does not say what ran"
fi
runs "wrote the plot $tmp/fb.png" "$bench" $sweep --plot "$tmp/fb.png"
if ! head -c 8 "$tmp/fb.png" | grep -q PNG; then
	fail "ferry_bench --plot $tmp/fb.png is not a PNG"
fi
exits 2 "--plot draws a sweep: give --sweep LO:HI too" "$bench" --plot "$tmp/x.svg"
exits 2 "--plot $tmp/x.pdf: name a .svg or .png file" "$bench" $sweep --plot "$tmp/x.pdf"
exits 2 "cannot write in $tmp/no-such-dir" "$bench" $sweep --plot "$tmp/no-such-dir/x.svg"
# No gnuplot on the PATH: the sweep succeeds, and says there is no plot.
runs "gnuplot is not installed, so there is no plot" \
	env PATH="$tmp/empty" "$bench" $sweep --plot "$tmp/none.svg"
if [ -e "$tmp/none.svg" ]; then
	fail "ferry_bench --plot without gnuplot wrote $tmp/none.svg"
fi
exit $status
