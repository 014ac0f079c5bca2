#!/bin/sh
# plot-sweep.sh: GB/s against block size from `ferry_bench --sweep LO:HI
# --csv FILE` output, as a PNG (gnuplot; log2 x axis).
#
#   bench/plot-sweep.sh [-o OUT.png] [-t TITLE] [-y gbps|ops|p50|p99] SWEEP.csv...
#
# Several CSV files become several lines on one plot, each labelled with
# its file name (without .csv).  The default output is the first file with
# .png in place of .csv.  Without gnuplot it says so and exits 0, so that
# scripts calling it keep going (apt-get install gnuplot-nox).
set -eu

me=plot-sweep.sh
out= title="ferry_bench sweep" what=gbps

usage() {
    echo "usage: $me [-o OUT.png] [-t TITLE] [-y gbps|ops|p50|p99] SWEEP.csv..." >&2
    exit 2
}

while getopts o:t:y:h opt; do
    case $opt in
    o) out=$OPTARG ;;
    t) title=$OPTARG ;;
    y) what=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage

# Columns of the CSV: size_bytes,gb_per_s,ops_per_s,p50_us,p99_us,p999_us,mean_us
case $what in
gbps) col=2 ylabel="GB/s" yscale="set yrange [0:*]" ;;
ops) col=3 ylabel="ops/s (blocks)" yscale="set logscale y 10" ;;
p50) col=4 ylabel="p50 latency (us)" yscale="set logscale y 10" ;;
p99) col=5 ylabel="p99 latency (us)" yscale="set logscale y 10" ;;
*) echo "$me: -y $what: use gbps, ops, p50 or p99" >&2; exit 2 ;;
esac

for f in "$@"; do
    if [ ! -r "$f" ]; then
        echo "$me: $f: cannot read it" >&2
        exit 1
    fi
    if ! head -n 1 "$f" | grep -q '^size_bytes,gb_per_s,'; then
        echo "$me: $f: not a ferry_bench --csv file (its first line should" \
             "start with size_bytes,gb_per_s,)" >&2
        exit 1
    fi
    if [ "$(wc -l < "$f")" -lt 2 ]; then
        echo "$me: $f: no rows (did the sweep fail?)" >&2
        exit 1
    fi
done

[ -n "$out" ] || out=${1%.csv}.png

if ! command -v gnuplot > /dev/null 2>&1; then
    echo "$me: gnuplot is not installed; skipping the plot" \
         "(apt-get install gnuplot-nox)" >&2
    exit 0
fi

# gnuplot strings are single-quoted: double any quote in names and titles.
q() { printf "%s" "$1" | sed "s/'/''/g"; }

plots=
for f in "$@"; do
    name=$(basename "$f" .csv)
    [ -z "$plots" ] || plots="$plots, "
    plots="$plots'$(q "$f")' using 1:$col every ::1 with linespoints title '$(q "$name")'"
done

gnuplot <<EOF
set terminal pngcairo size 1000,600 noenhanced
set output '$(q "$out")'
set datafile separator ','
set title '$(q "$title")'
set logscale x 2
set format x '%.0b%B'
set xlabel 'block size (bytes, log2)'
set ylabel '$ylabel'
$yscale
set grid
set key top left
plot $plots
EOF
echo "$me: wrote $out"
