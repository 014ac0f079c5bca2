#!/usr/bin/env bash
# scaling.sh: how ferry's costs grow with what it holds, in one markdown
# table (issue #17):
#   - the ferry_xfer_post call, and posting and completing every write
#     (wall time, and the initiator's CPU time), in ns per descriptor, for
#     1K, 10K, 100K and 1M descriptors of 64 B (bench/dlist_bench, shm and
#     tcp;ofi_rxm on lo; the median of -n runs of each);
#   - a registration-cache hit, p50 and p99 in ns, with 100, 1K, 10K and
#     100K cached ranges, each lookup thread going over all of them in a
#     random order (bench/rcache_bench --hit-only: one thread, the best of
#     its 3 runs), the same for its baseline (a mutex and a sorted array),
#     the same again over 64 entries spread over all of them (searches as
#     long, their data in the CPU's caches), and how long filling the
#     cache took;
#   - the memory a ferry context adds to a fresh process, against a raw
#     libfabric endpoint of the same provider, and per live peer and per
#     registered region (bench/footprint).
#
#   bench/scaling.sh [-q] [-n RUNS] [-B BUILD_DIR] [-o FILE]
#
#   -q          quick: up to 100K descriptors and 10K entries, one run of
#               each, fewer lookups, 10 peers and regions (under a minute)
#   -n RUNS     dlist_bench runs per size and provider (default 5; 1 with -q)
#   -B DIR      the build directory holding bench/dlist_bench,
#               bench/rcache_bench and bench/footprint (default: build/
#               beside the source, ../build, the current directory)
#   -o FILE     also write the table to FILE, and each bench's own output
#               to FILE.log
#
# After the table, one verdict per target: flat means the largest size
# costs at most 1.2x the least of the sizes (a post of few descriptors
# pays the call's fixed cost over few, so falling with the size is flat);
# the marginal ns per descriptor between the two largest sizes is given
# beside it.  The CPU time comes from getrusage, which is coarse for the
# few milliseconds the small sizes take: their CPU cells are rough.
# Every bench runs under timeout(1); one that fails or times out leaves
# "failed" in its cells, and the script exits 1.  A full run
# takes about three minutes, most of it filling the 100K-entry cache.
# Other jobs on the machine make the numbers noisy: the load average is
# printed with them.
set -uo pipefail

me=scaling.sh
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
quick=0 runs='' build='' out=''

usage() {
	sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

while getopts qn:B:o:h opt; do
	case $opt in
	q) quick=1 ;;
	n) runs=$OPTARG ;;
	B) build=$OPTARG ;;
	o) out=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
(($# == 0)) || usage
if [[ -n $runs && ! $runs =~ ^[1-9][0-9]*$ ]]; then
	echo "$me: -n $runs: give a whole number >= 1" >&2
	exit 2
fi

if [[ -z $build ]]; then
	for b in "$src_dir/../build" "$src_dir/../../build" "$PWD"; do
		if [[ -x $b/bench/dlist_bench ]]; then build=$b; break; fi
	done
fi
for p in dlist_bench rcache_bench footprint; do
	if [[ -z $build || ! -x $build/bench/$p ]]; then
		echo "$me: no bench/$p in ${build:-a build directory}: build it" \
			"(make bench/dlist_bench bench/rcache_bench bench/footprint)" \
			"and pass -B DIR" >&2
		exit 2
	fi
done

if ((quick)); then
	blocks=(1K 10K 100K) entries=(100 1000 10000)
	runs=${runs:-1} rcache_opts=(--iterations 200000 --repeat 1)
	npeers=10 nregions=10
else
	blocks=(1K 10K 100K 1M) entries=(100 1000 10000 100000)
	runs=${runs:-5} rcache_opts=() npeers=100 nregions=100
fi
providers=(shm "tcp;ofi_rxm")

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
log=/dev/null
if [[ -n $out ]]; then
	if ! : > "$out" || ! : > "$out.log"; then
		echo "$me: cannot write $out" >&2
		exit 1
	fi
	log=$out.log
fi
status=0

# Runs a bench under timeout(1): its output in $tmp/last and the log;
# false (and a note on stderr) if it failed.
run() { # SECONDS PROGRAM ARGS...
	local secs=$1 rc
	shift
	printf '$ %s\n' "$*" >> "$log"
	timeout -k 10 "$secs" "$@" > "$tmp/last" 2>&1
	rc=$?
	cat "$tmp/last" >> "$log"
	if ((rc != 0)); then
		echo "$me: $* $( ((rc == 124)) && echo "timed out after ${secs}s" || echo "failed ($rc)"):" >&2
		tail -n 3 "$tmp/last" >&2
		status=1
		return 1
	fi
}

# The middle of the numbers given (the lower middle of an even count);
# "failed" if none (every run failed, or its line was not found).
median() { printf '%s\n' "$@" | sort -g | awk 'NF {v[++n] = $1} END {print n ? v[int((n + 1) / 2)] : "failed"}'; }

# The ns/descriptor figure of dlist_bench's line starting with the label.
dlist_value() { # LABEL FILE
	awk -v k="$1" 'index($0, k) == 3 {
		for (i = 1; i <= NF; i++) if ($i == "ns/descriptor") print $(i - 1)
	}' "$2"
}

# "1K" -> 1024, "1M" -> 1048576, as dlist_bench reads them.
count() { # N[K|M]
	case $1 in
	*K) echo $((${1%K} * 1024)) ;;
	*M) echo $((${1%M} * 1048576)) ;;
	*) echo "$1" ;;
	esac
}

entries_label() { # 100000 -> 100K
	if (($1 >= 1000 && $1 % 1000 == 0)); then echo "$(($1 / 1000))K"; else echo "$1"; fi
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)

# ---- descriptors -------------------------------------------------------
declare -A post complete cpu
for prov in "${providers[@]}"; do
	for n in "${blocks[@]}"; do
		p=() c=() u=()
		for ((r = 0; r < runs; r++)); do
			if run 300 "$build/bench/dlist_bench" --blocks "$n" --provider "$prov"; then
				p+=("$(dlist_value "post call" "$tmp/last")")
				c+=("$(dlist_value "post and complete every write (wall)" "$tmp/last")")
				u+=("$(dlist_value "post and complete every write (CPU)" "$tmp/last")")
			fi
		done
		post[$prov,$n]=$(median "${p[@]}")
		complete[$prov,$n]=$(median "${c[@]}")
		cpu[$prov,$n]=$(median "${u[@]}")
	done
done

# ---- cache entries -------------------------------------------------------
declare -A p50 p99 base fill hot
for e in "${entries[@]}"; do
	p50[$e]=failed p99[$e]=failed base[$e]=failed fill[$e]=failed hot[$e]=failed
	if run 600 "$build/bench/rcache_bench" --hit-only --entries "$e" "${rcache_opts[@]}"; then
		p50[$e]=$(awk '/ferry get\+put:/ {print $4}' "$tmp/last")
		p99[$e]=$(awk '/ferry get\+put:/ {print $7}' "$tmp/last")
		base[$e]=$(awk '/mutex \+ sorted array:/ {print $6 " / " $9}' "$tmp/last")
		fill[$e]=$(sed -n 's/.*(filled in \([0-9.]*\) s).*/\1/p' "$tmp/last")
		# "  64 hot entries spread over all: ferry p50 X ns, mutex + sorted array p50 Y ns"
		hot[$e]=$(awk '/hot entries spread over all:/ {print $9 " / " $16}' "$tmp/last")
	fi
done

# ---- memory ------------------------------------------------------------------
declare -A foot
version=
if run 300 "$build/bench/footprint" --peers "$npeers" --regions "$nregions"; then
	version=$(head -n 1 "$tmp/last" | sed 's/.*; //')
	# "PROVIDER|KIND|RSS|peak|Pss|threads|1st peer|next peer|per region"
	while IFS='|' read -r prov kind rest; do
		foot[$prov,$kind]=$rest
	done < <(awk '/^  (shm|tcp;ofi_rxm) / {
		kind = index($0, "+ thread") ? "thread" : index($0, "raw") ? "raw" : "context"
		print $1 "|" kind "|" $(NF - 6) "|" $(NF - 5) "|" $(NF - 4) "|" \
			$(NF - 3) "|" $(NF - 2) "|" $(NF - 1) "|" $NF
	}' "$tmp/last")
fi
# One figure of footprint's row: FIELD 1 RSS, 2 peak, 3 Pss, 4 threads,
# 5 first peer, 6 next peer, 7 per region.
fp() { # PROVIDER KIND FIELD
	local v=${foot[$1,$2]:-}
	if [[ -n $v ]]; then cut -d'|' -f"$3" <<< "$v"; else echo failed; fi
}

# ---- the table ------------------------------------------------------------------
table() {
	local n e prov row
	printf 'Scaling (issue #17), %s: %s CPUs, load average %s at the start and %s at the end, %s s; %s.\n' \
		"$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" "$load0" \
		"$(cut -d' ' -f1-3 /proc/loadavg)" "$(($(date +%s) - start))" \
		"${version:-ferry version unknown (footprint failed)}"
	printf 'Method: dlist_bench --blocks N (64 B blocks, sorted indices, one post of all N), median of %s run(s); ' "$runs"
	printf 'rcache_bench --hit-only --entries E %s(one thread, 64 KiB ranges, 4000-byte lookups in a new random order over all entries each pass; its best run), ' "${rcache_opts[*]:+${rcache_opts[*]} }"
	printf 'on tcp;ofi_rxm (a hit calls no provider); footprint --peers %s --regions %s (each endpoint in a fresh process, VmRSS before and after; peers live, no traffic).\n\n' "$npeers" "$nregions"
	printf '| measurement | size | shm | tcp;ofi_rxm |\n|---|---|---|---|\n'
	for n in "${blocks[@]}"; do
		printf '| post call, ns/descriptor | %s | %s | %s |\n' "$n" "${post[shm,$n]}" "${post[tcp;ofi_rxm,$n]}"
	done
	for n in "${blocks[@]}"; do
		printf '| post and complete (wall), ns/descriptor | %s | %s | %s |\n' "$n" "${complete[shm,$n]}" "${complete[tcp;ofi_rxm,$n]}"
	done
	for n in "${blocks[@]}"; do
		printf '| post and complete (initiator CPU), ns/descriptor | %s | %s | %s |\n' "$n" "${cpu[shm,$n]}" "${cpu[tcp;ofi_rxm,$n]}"
	done
	for e in "${entries[@]}"; do
		printf '| cache hit p50 / p99, ns | %s entries | – | %s / %s |\n' "$(entries_label "$e")" "${p50[$e]}" "${p99[$e]}"
	done
	for e in "${entries[@]}"; do
		printf '| baseline hit (mutex + sorted array) p50 / p99, ns | %s entries | – | %s |\n' "$(entries_label "$e")" "${base[$e]}"
	done
	for e in "${entries[@]}"; do
		printf '| hit p50 on 64 hot entries spread over all, ferry / baseline, ns | %s entries | – | %s |\n' "$(entries_label "$e")" "${hot[$e]}"
	done
	for e in "${entries[@]}"; do
		printf '| filling the cache (one miss per entry), s | %s entries | – | %s |\n' "$(entries_label "$e")" "${fill[$e]}"
	done
	for row in "raw:RSS, raw libfabric endpoint, MiB" "context:RSS, ferry context, MiB" \
		"thread:RSS, ferry context with progress thread, MiB"; do
		printf '| %s | – | %s | %s |\n' "${row#*:}" "$(fp shm "${row%%:*}" 1)" "$(fp "tcp;ofi_rxm" "${row%%:*}" 1)"
	done
	printf '| threads added, raw / context / + progress thread | – |'
	for prov in "${providers[@]}"; do
		printf ' %s / %s / %s |' "$(fp "$prov" raw 4)" "$(fp "$prov" context 4)" "$(fp "$prov" thread 4)"
	done
	printf '\n| first peer, KiB, raw / context | 1 peer |'
	for prov in "${providers[@]}"; do printf ' %s / %s |' "$(fp "$prov" raw 5)" "$(fp "$prov" context 5)"; done
	printf '\n| each further peer, KiB, raw / context | %s peers |' "$npeers"
	for prov in "${providers[@]}"; do printf ' %s / %s |' "$(fp "$prov" raw 6)" "$(fp "$prov" context 6)"; done
	printf '\n| each 64 KiB region registered, KiB, raw / context | %s regions |' "$nregions"
	for prov in "${providers[@]}"; do printf ' %s / %s |' "$(fp "$prov" raw 7)" "$(fp "$prov" context 7)"; done
	printf '\n'
}

# "flat" or "NOT flat (x.xx)": the value at the largest size over the least.
flatness() { # VALUES... (smallest size first)
	awk -v last="${!#}" 'BEGIN {
		min = ""
		for (i = 1; i < ARGC; i++) {
			if (ARGV[i] !~ /^[0-9.]+$/) { print "unknown (a run failed)"; exit }
			if (min == "" || ARGV[i] + 0 < min) min = ARGV[i] + 0
		}
		r = min > 0 ? last / min : 0
		printf "%s (largest size %.2fx the least)", r <= 1.2 ? "flat" : "NOT flat", r
	}' "$@"
}

# ns per descriptor between the two largest sizes, from their totals.
marginal() { # PROVIDER TABLE(post|complete)
	local -n t=$2
	local k=${#blocks[@]} a b
	a=${blocks[k - 2]} b=${blocks[k - 1]}
	awk -v ca="${t[$1,$a]}" -v cb="${t[$1,$b]}" -v na="$(count "$a")" -v nb="$(count "$b")" 'BEGIN {
		if (ca !~ /^[0-9.]+$/ || cb !~ /^[0-9.]+$/) print "unknown"
		else printf "%.1f", (cb * nb - ca * na) / (nb - na)
	}'
}

verdicts() {
	local prov vals n e
	printf '\nVerdicts (flat: within 1.2x; marginal: ns per descriptor from %s to %s):\n' \
		"${blocks[${#blocks[@]} - 2]}" "${blocks[${#blocks[@]} - 1]}"
	for prov in "${providers[@]}"; do
		vals=()
		for n in "${blocks[@]}"; do vals+=("${post[$prov,$n]}"); done
		printf -- '- post call, %s: %s; marginal %s\n' "$prov" "$(flatness "${vals[@]}")" "$(marginal "$prov" post)"
		vals=()
		for n in "${blocks[@]}"; do vals+=("${complete[$prov,$n]}"); done
		printf -- '- post and complete (wall), %s: %s; marginal %s\n' "$prov" "$(flatness "${vals[@]}")" "$(marginal "$prov" complete)"
		vals=()
		for n in "${blocks[@]}"; do vals+=("${cpu[$prov,$n]}"); done
		printf -- '- post and complete (initiator CPU), %s: %s\n' "$prov" "$(flatness "${vals[@]}")"
	done
	vals=()
	for e in "${entries[@]}"; do vals+=("${p50[$e]}"); done
	printf -- '- cache hit p50, %s to %s entries: %s\n' "$(entries_label "${entries[0]}")" \
		"$(entries_label "${entries[${#entries[@]} - 1]}")" "$(flatness "${vals[@]}")"
	vals=()
	for e in "${entries[@]}"; do vals+=("${hot[$e]%% *}"); done
	printf -- '- cache hit p50 on 64 hot entries, %s to %s entries: %s\n' "$(entries_label "${entries[0]}")" \
		"$(entries_label "${entries[${#entries[@]} - 1]}")" "$(flatness "${vals[@]}")"
}

{
	table
	verdicts
} > "$tmp/table"
cat "$tmp/table"
[[ -n $out ]] && cp "$tmp/table" "$out"
exit $status
