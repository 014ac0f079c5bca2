#!/bin/sh
# plot-sweep.sh: GB/s against block size from `ferry_bench --sweep LO:HI
# --csv FILE` output, as a PNG or an SVG (gnuplot; log2 x axis).
#
#   bench/plot-sweep.sh [-o OUT.png|OUT.svg] [-t TITLE] [-y gbps|ops|p50|p99] SWEEP.csv...
#
# Several CSV files become several lines on one plot, each labelled with
# its file name (without .csv); bench/compare.sh -g writes one per tool.
# The default output is the first file with .png in place of .csv; a name
# ending in .svg gives an SVG.  (One sweep's GB/s and latency together:
# ferry_bench --sweep LO:HI --plot FILE.svg.)  Without gnuplot ($GNUPLOT
# if set) it says so and exits 0, so that scripts calling it keep going
# (apt-get install gnuplot-nox).
set -eu

me=plot-sweep.sh
out= title="ferry_bench sweep" what=gbps
gnuplot=${GNUPLOT:-gnuplot}

usage() {
    echo "usage: $me [-o OUT.png|OUT.svg] [-t TITLE] [-y gbps|ops|p50|p99] SWEEP.csv..." >&2
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
case $out in
*.svg) terminal="svg size 1000,600 dynamic noenhanced font 'sans,11' background '#ffffff'" ;;
*.png) terminal="pngcairo size 1000,600 noenhanced" ;;
*) echo "$me: -o $out: name a .png or .svg file" >&2; exit 2 ;;
esac

if ! command -v "$gnuplot" > /dev/null 2>&1; then
    echo "$me: gnuplot is not installed; skipping the plot" \
         "(apt-get install gnuplot-nox)" >&2
    exit 0
fi

# gnuplot strings are single-quoted: double any quote in names and titles.
q() { printf "%s" "$1" | sed "s/'/''/g"; }

# A tic at every block size of the files, named as --sweep takes it
# ("4K", "16M"), and a little room at both ends: gnuplot drops a tic that
# falls on the end of a log axis.
sizes=$(for f in "$@"; do tail -n +2 "$f" | cut -d, -f1; done | grep -E '^[0-9]+$' | sort -nu)
xrange="[$(echo "$sizes" | head -n 1) / 1.2:$(echo "$sizes" | tail -n 1) * 1.2]"
tics=$(echo "$sizes" | awk '
    {
        n = $1; u = ""
        if (n >= 1073741824 && n % 1073741824 == 0) { n /= 1073741824; u = "G" }
        else if (n >= 1048576 && n % 1048576 == 0) { n /= 1048576; u = "M" }
        else if (n >= 1024 && n % 1024 == 0) { n /= 1024; u = "K" }
        printf "%s\"%d%s\" %s", sep, n, u, $1; sep = ", "
    }')

plots=
for f in "$@"; do
    name=$(basename "$f" .csv)
    [ -z "$plots" ] || plots="$plots, "
    plots="$plots'$(q "$f")' using 1:$col every ::1 with linespoints lw 2 title '$(q "$name")'"
done

"$gnuplot" <<EOF
set terminal $terminal
set output '$(q "$out")'
set datafile separator ','
set title '$(q "$title")'
set logscale x 2
set xrange $xrange
set xtics ($tics)
set xlabel 'block size (bytes, log2)'
set ylabel '$ylabel'
$yscale
set grid
set key below Left reverse width 2
plot $plots
EOF
echo "$me: wrote $out"
