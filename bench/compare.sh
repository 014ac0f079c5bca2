#!/usr/bin/env bash
# compare.sh: ferry_bench against reference tools on this machine, in one
# go, alternating the two sides of every comparison, and prints the median
# of each side with its spread and the ratio ferry / reference.
#
#   bench/compare.sh [-n RUNS] [-t SECONDS] [-b FERRY_BENCH] [-c CASES] [-o FILE]
#
#   -n RUNS      runs of each side of each case (default 5; medians)
#   -t SECONDS   measured seconds of each throughput run (2; latency runs
#                take half, rounded up)
#   -b PATH      ferry_bench to run (default: $FERRY_BENCH, else a build
#                directory next to the source: build/, ../build/, the cwd)
#   -c CASES     comma-separated groups: tcp, shm, latency, batch, staged
#                (all)
#   -o FILE      raw runs go here (default bench/results/compare-DATE.txt)
#
# The cases:
#   tcp      ferry_bench --provider "tcp;ofi_rxm" --domain lo --op write,
#            1 MiB and 4 MiB blocks, against iperf3 single stream over
#            127.0.0.1 with the same -l (receiver's bits_per_second): GB/s;
#            iperf3 takes at most -l 1M over TCP, so 4 MiB uses -l 1M;
#            and the same ferry runs against bench/rma_raw -b (raw
#            libfabric streaming the same blocks, 4 in flight, as 1 MiB
#            fi_write operations, as ferry posts them: the provider's floor)
#   shm      ferry_bench --provider shm --op write, 4 MiB blocks, against
#            ferry_bench --memcpy (one thread, same blocks), both over a
#            256 MiB region, larger than the caches: GB/s
#   latency  ferry_bench --pingpong (mean half round trip) against
#            fi_pingpong -e rdm (its usec/xfer, also a mean half round
#            trip), 8 B and 4 KiB, tcp;ofi_rxm and shm: lower is better;
#            and the same ferry runs against bench/rma_raw (built beside
#            ferry_bench), raw libfabric doing what a ferry ping does:
#            fi_writedata with FI_DELIVERY_COMPLETE, the CQ data announcing
#            the write (the provider's floor for ferry)
#   batch    ferry_bench 4 KiB blocks, --batch-size 64 against --batch-size
#            1, tcp and shm: ops/s (blocks), batching must help
#   staged   ferry_bench --mem cuda against --mem host, 4 MiB blocks, tcp
#            and shm: GB/s of GPU memory the provider cannot register
#            (staged through host buffers), from a GPU into host memory
#            (--target-mem host: one staging copy) and GPU to GPU (two);
#            without a GPU (no nvidia-smi -L) on ferry's simulated device
#            (FERRY_SIM_DEVICES=1), whose copy engine is the CPU
#
# Missing reference tools (apt-get install iperf3 libfabric-bin) skip their
# cases.  Every process runs under timeout(1), so nothing hangs; servers
# are killed if their client fails.  Other jobs on the machine make these
# numbers noisy: the load average is printed with them.
set -uo pipefail

me=compare.sh
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
runs=5 secs=2 bench=${FERRY_BENCH:-} cases=tcp,shm,latency,batch,staged out=

usage() {
	sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

while getopts n:t:b:c:o:h opt; do
	case $opt in
	n) runs=$OPTARG ;;
	t) secs=$OPTARG ;;
	b) bench=$OPTARG ;;
	c) cases=$OPTARG ;;
	o) out=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
(($# == 0)) || usage
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "$me: -n $runs: give a whole number >= 1" >&2; exit 2; }
[[ $secs =~ ^[1-9][0-9]*$ ]] || { echo "$me: -t $secs: give whole seconds >= 1" >&2; exit 2; }
for c in ${cases//,/ }; do
	case $c in
	tcp | shm | latency | batch | staged) ;;
	*) echo "$me: -c $c: the groups are tcp, shm, latency, batch and staged" >&2; exit 2 ;;
	esac
done
want() { [[ ,$cases, == *,$1,* ]]; }

if [[ -z $bench ]]; then
	for b in "$src_dir/../build/bench/ferry_bench" "$src_dir/../../build/bench/ferry_bench" \
		"$PWD/bench/ferry_bench" "$src_dir/ferry_bench"; do
		if [[ -x $b ]]; then bench=$b; break; fi
	done
fi
if [[ -z $bench || ! -x $bench ]]; then
	echo "$me: no ferry_bench found${bench:+ at $bench}: build it (make bench/ferry_bench) and pass -b PATH" >&2
	exit 2
fi

if [[ -z $out ]]; then
	mkdir -p "$src_dir/results" || exit 1
	out=$src_dir/results/compare-$(date +%Y%m%d-%H%M%S).txt
fi
: > "$out" || { echo "$me: cannot write $out" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
# Servers are started inside $(...): their pids go to a file, so that an
# interrupted run still stops them.
cleanup() {
	local p
	if [[ -f $tmp/servers ]]; then
		while read -r p; do kill "$p" 2> /dev/null; done < "$tmp/servers"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

load() { cut -d' ' -f1-3 /proc/loadavg; }
raw() { printf '%s\n' "$*" >> "$out"; }

# A JSON number by path, with jq or python3.
json_get() { # FILE PATH (jq syntax, e.g. .end.sum_received.bits_per_second)
	if command -v jq > /dev/null; then
		jq -r "$2 // empty" "$1" 2> /dev/null
	elif command -v python3 > /dev/null; then
		python3 - "$1" "$2" <<-'EOF' 2> /dev/null
			import json, sys
			v = json.load(open(sys.argv[1]))
			for k in sys.argv[2].strip('.').split('.'):
			    v = v[k]
			print(v)
		EOF
	fi
}

# Waits up to 5 s for a TCP port to listen on this host.
wait_listen() {
	local i
	for ((i = 0; i < 50; i++)); do
		if command -v ss > /dev/null; then
			ss -Hltn "sport = :$1" 2> /dev/null | grep -q . && return 0
		fi
		sleep 0.1
	done
	return 1
}

free_port() { echo $((20000 + (RANDOM * 32768 + RANDOM) % 40000)); }

# Stops a server: it should end by itself once its client is done.
stop_server() {
	local pid=$1 i
	for ((i = 0; i < 30; i++)); do
		kill -0 "$pid" 2> /dev/null || break
		sleep 0.1
	done
	kill "$pid" 2> /dev/null
	wait "$pid" 2> /dev/null
}

# ---- one measurement each: prints the value, or nothing on failure -----

# ferry_bench ARGS... -> column COL of its CSV row
ferry_value() { # COL ARGS...
	local col=$1 csv=$tmp/ferry.csv rc
	shift
	rm -f "$csv"
	timeout -k 5 $((secs + 60)) "$bench" "$@" --csv "$csv" > "$tmp/ferry.out" 2>&1
	rc=$?
	raw "  ferry_bench $(printf '%q ' "$@")-> rc $rc"
	if ((rc != 0)) || [[ ! -s $csv ]]; then
		sed 's/^/    | /' "$tmp/ferry.out" | tail -n 5 >> "$out"
		return
	fi
	tail -n +2 "$csv" | head -n 1 | cut -d, -f"$col"
	raw "    $(tail -n +2 "$csv" | head -n 1) (size,GB/s,ops/s,p50,p99,p999,mean us)"
}

iperf3_gbps() { # SIZE
	local port pid v
	port=$(free_port)
	timeout -k 2 $((secs + 30)) iperf3 -s -1 -p "$port" > "$tmp/iperf3-s.out" 2>&1 &
	pid=$!
	echo "$pid" >> "$tmp/servers"
	if ! wait_listen "$port"; then
		raw "  iperf3 server on port $port did not start"
		stop_server "$pid"
		return
	fi
	timeout -k 2 $((secs + 30)) iperf3 -c 127.0.0.1 -p "$port" -t "$secs" -l "$1" -J \
		> "$tmp/iperf3.json" 2> "$tmp/iperf3-c.err"
	raw "  iperf3 -c 127.0.0.1 -p $port -t $secs -l $1 -J -> rc $?"
	stop_server "$pid"
	v=$(json_get "$tmp/iperf3.json" .end.sum_received.bits_per_second)
	[[ -n $v ]] || { raw "    no bits_per_second: $(head -c 300 "$tmp/iperf3-c.err" "$tmp/iperf3.json")"; return; }
	awk -v b="$v" 'BEGIN { printf "%.6f\n", b / 8 / 1e9 }'
	raw "    receiver bits_per_second $v"
}

# fi_pingpong's usec/xfer: the mean one-way time (half a round trip).
fi_pingpong_us() { # PROVIDER SIZE ITERATIONS
	local port pid v
	port=$(free_port)
	timeout -k 2 $((secs * 10 + 30)) fi_pingpong -p "$1" -e rdm -I "$3" -S "$2" -B "$port" \
		> "$tmp/fipp-s.out" 2>&1 &
	pid=$!
	echo "$pid" >> "$tmp/servers"
	if ! wait_listen "$port"; then
		raw "  fi_pingpong server on port $port did not start: $(head -c 300 "$tmp/fipp-s.out")"
		stop_server "$pid"
		return
	fi
	timeout -k 2 $((secs * 10 + 30)) fi_pingpong -p "$1" -e rdm -I "$3" -S "$2" -P "$port" 127.0.0.1 \
		> "$tmp/fipp-c.out" 2>&1
	raw "  fi_pingpong -p '$1' -e rdm -I $3 -S $2 -P $port 127.0.0.1 -> rc $?"
	stop_server "$pid"
	# bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
	v=$(awk '$1 ~ /^[0-9]/ && NF >= 8 { v = $7 } END { if (v != "") print v }' "$tmp/fipp-c.out")
	[[ -n $v ]] || { raw "    no result: $(head -c 300 "$tmp/fipp-c.out")"; return; }
	raw "    $(tail -n 1 "$tmp/fipp-c.out")"
	echo "$v"
}

# rma_raw ARGS... -> the last field of its result line: the mean half
# round trip in µs (ping-pong), or GB/s (-b).
rma_value() {
	local v
	timeout -k 2 $((secs * 10 + 30)) "$rma" "$@" > "$tmp/rma.out" 2>&1
	raw "  rma_raw $(printf '%q ' "$@")-> rc $?"
	v=$(awk 'NF == 3 && $1 ~ /^[0-9]+$/ { v = $3 } END { if (v != "") print v }' "$tmp/rma.out")
	[[ -n $v ]] || { raw "    no result: $(head -c 300 "$tmp/rma.out")"; return; }
	raw "    $(tail -n 1 "$tmp/rma.out") (bytes iterations usec-or-GB/s)"
	echo "$v"
}
# Blocks of rma_raw -b that take about $secs at RATE GB/s: SIZE RATE
stream_blocks() { awk -v s="$1" -v r="$2" -v t="$secs" 'BEGIN { printf "%d\n", r * 1e9 * t / s }'; }

# ---- cases ---------------------------------------------------------------

# Rows of the table: name|unit|ferry label|ref label|ferry values|ref values|better
rows=()

# "median min max count" of the numbers given
stats() {
	printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | sort -g | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "- - - 0"; exit }
			m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			print m, v[1], v[NR], NR
		}'
}

# compare NAME UNIT BETTER FERRY_LABEL REF_LABEL FERRY_FN REF_FN
# Runs both sides -n times, alternating which goes first.
compare() {
	local name=$1 unit=$2 better=$3 fl=$4 rl=$5 ffn=$6 rfn=$7 i a b
	local fvals=() rvals=()
	rm -f "$tmp/last_ferry"
	raw "" "== $name ($unit; ferry: $fl; reference: $rl)"
	printf '%s: %-34s' "$me" "$name" >&2
	for ((i = 1; i <= runs; i++)); do
		raw "run $i (load $(load))"
		if ((i % 2)); then
			a=$($ffn)
			[[ -z $a ]] || echo "$a" > "$tmp/last_ferry"
			b=$($rfn)
		else
			b=$($rfn)
			a=$($ffn)
			[[ -z $a ]] || echo "$a" > "$tmp/last_ferry"
		fi
		fvals+=("${a:-x}") rvals+=("${b:-x}")
		printf '.' >&2
	done
	printf '\n' >&2
	raw "ferry: ${fvals[*]}" "reference: ${rvals[*]}"
	rows+=("$name|$unit|$fl|$rl|${fvals[*]}|${rvals[*]}|$better")
}

P_TCP=(--provider "tcp;ofi_rxm" --domain lo)
FB=(--duration "$secs" --warmup 0.3)
# A pingpong gathers thousands of samples a second: half the time will do.
lsecs=$(((secs + 1) / 2))
FL=(--duration "$lsecs" --warmup 0.3)

tcp_ferry_1m() { ferry_value 2 "${P_TCP[@]}" --op write --block-size 1M "${FB[@]}"; }
tcp_ferry_4m() { ferry_value 2 "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}"; }
tcp_iperf_1m() { iperf3_gbps 1M; }
tcp_iperf_4m() { iperf3_gbps 1M; } # iperf3 refuses -l above 1M for TCP
shm_ferry_4m() { ferry_value 2 --provider shm --op write --block-size 4M --buffer-size 256M "${FB[@]}"; }
shm_memcpy_4m() { ferry_value 2 --memcpy --block-size 4M --buffer-size 256M "${FB[@]}"; }
# mean half round trip: column 7
lat_ferry_tcp_8() { ferry_value 7 "${P_TCP[@]}" --pingpong --block-size 8 "${FL[@]}"; }
lat_ferry_tcp_4k() { ferry_value 7 "${P_TCP[@]}" --pingpong --block-size 4K "${FL[@]}"; }
lat_ferry_shm_8() { ferry_value 7 --provider shm --pingpong --block-size 8 "${FL[@]}"; }
lat_ferry_shm_4k() { ferry_value 7 --provider shm --pingpong --block-size 4K "${FL[@]}"; }
# fi_pingpong runs a number of iterations, not a time: enough for as long
# as ferry's pingpong at the half round trip ferry just measured in this
# case (the first run of each case measures ferry first).
pp_iterations() {
	local us
	us=$(cat "$tmp/last_ferry" 2> /dev/null)
	awk -v us="${us:-100}" -v s="$lsecs" 'BEGIN {
		n = s * 1e6 / (2 * (us > 0.5 ? us : 0.5))
		if (n < 200) n = 200
		if (n > s * 200000) n = s * 200000
		printf "%d\n", n
	}'
}
lat_ref_tcp_8() { fi_pingpong_us "tcp;ofi_rxm" 8 "$(pp_iterations)"; }
lat_ref_tcp_4k() { fi_pingpong_us "tcp;ofi_rxm" 4096 "$(pp_iterations)"; }
lat_ref_shm_8() { fi_pingpong_us shm 8 "$(pp_iterations)"; }
lat_ref_shm_4k() { fi_pingpong_us shm 4096 "$(pp_iterations)"; }
lat_rma_tcp_8() { rma_value -p "tcp;ofi_rxm" -D lo -s 8 -n "$(pp_iterations)"; }
lat_rma_tcp_4k() { rma_value -p "tcp;ofi_rxm" -D lo -s 4096 -n "$(pp_iterations)"; }
lat_rma_shm_8() { rma_value -p shm -s 8 -n "$(pp_iterations)"; }
lat_rma_shm_4k() { rma_value -p shm -s 4096 -n "$(pp_iterations)"; }
tcp_rma_1m() { rma_value -p "tcp;ofi_rxm" -D lo -b -s 1048576 -d 4 -n "$(stream_blocks 1048576 4)" -w 200; }
tcp_rma_4m() { rma_value -p "tcp;ofi_rxm" -D lo -b -s 4194304 -o 1048576 -d 4 -n "$(stream_blocks 4194304 4)" -w 50; }
batch_tcp_64() { ferry_value 3 "${P_TCP[@]}" --block-size 4K --batch-size 64 --buffer-size 1M "${FB[@]}"; }
batch_tcp_1() { ferry_value 3 "${P_TCP[@]}" --block-size 4K --batch-size 1 --buffer-size 1M "${FB[@]}"; }
batch_shm_64() { ferry_value 3 --provider shm --block-size 4K --batch-size 64 --buffer-size 1M "${FB[@]}"; }
batch_shm_1() { ferry_value 3 --provider shm --block-size 4K --batch-size 1 --buffer-size 1M "${FB[@]}"; }
# --mem cuda: a real GPU if there is one, else the simulated device.
staged() { # ARGS...
	if [[ -z ${FERRY_SIM_DEVICES:-} ]] && ! nvidia-smi -L > /dev/null 2>&1; then
		export FERRY_SIM_DEVICES=1
	fi
	ferry_value 2 "$@" --mem cuda
}
staged_tcp_sender() { staged "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}" --target-mem host; }
staged_tcp_both() { staged "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}"; }
host_tcp() { ferry_value 2 "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}"; }
staged_shm_sender() { staged --provider shm --op write --block-size 4M --buffer-size 64M "${FB[@]}" --target-mem host; }
staged_shm_both() { staged --provider shm --op write --block-size 4M --buffer-size 64M "${FB[@]}"; }
host_shm() { ferry_value 2 --provider shm --op write --block-size 4M --buffer-size 64M "${FB[@]}"; }

have() {
	command -v "$1" > /dev/null && return 0
	echo "$me: $1 is not installed: skipping $2 (apt-get install $3)" >&2
	raw "skipped $2: $1 not installed"
	return 1
}

ncases=0
want tcp && ncases=$((ncases + 2))
want shm && ncases=$((ncases + 1))
rma=${RMA_RAW:-$(dirname "$bench")/rma_raw}
nlat=0
want latency && nlat=4
if [[ -x $rma ]]; then
	want latency && nlat=8
	want tcp && ncases=$((ncases + 2))
elif want latency || want tcp; then
	echo "$me: no rma_raw at $rma: the tcp and latency cases run without the raw-RMA floor (make bench/rma_raw)" >&2
fi
ncases=$((ncases + nlat))
want batch && ncases=$((ncases + 2))
want staged && ncases=$((ncases + 4))
load0=$(load)
raw "compare.sh $(date -Is) on $(hostname) ($(nproc) CPUs), $(uname -sr)"
raw "ferry_bench: $bench; -n $runs -t $secs; load average at start: $load0"
echo "$me: $ncases cases × $runs runs × 2 sides, about" \
	"$(((ncases - nlat) * runs * (2 * secs + 3) + nlat * runs * (2 * lsecs + 3))) s; raw runs in $out" >&2

if want tcp && have iperf3 "the tcp cases" iperf3; then
	compare "tcp write 1 MiB" "GB/s" higher "ferry_bench" "iperf3 -l 1M" tcp_ferry_1m tcp_iperf_1m
	compare "tcp write 4 MiB" "GB/s" higher "ferry_bench" "iperf3 -l 1M" tcp_ferry_4m tcp_iperf_4m
fi
if want tcp && [[ -x $rma ]]; then
	compare "tcp write 1 MiB vs RMA" "GB/s" higher "ferry_bench" "rma_raw -b" tcp_ferry_1m tcp_rma_1m
	compare "tcp write 4 MiB vs RMA" "GB/s" higher "ferry_bench" "rma_raw -b" tcp_ferry_4m tcp_rma_4m
fi
if want shm; then
	compare "shm write 4 MiB" "GB/s" higher "ferry_bench" "memcpy 1 thread" shm_ferry_4m shm_memcpy_4m
fi
if want latency && have fi_pingpong "the latency cases" libfabric-bin; then
	compare "latency tcp 8 B" "us" lower "pingpong" "fi_pingpong" lat_ferry_tcp_8 lat_ref_tcp_8
	compare "latency tcp 4 KiB" "us" lower "pingpong" "fi_pingpong" lat_ferry_tcp_4k lat_ref_tcp_4k
	compare "latency shm 8 B" "us" lower "pingpong" "fi_pingpong" lat_ferry_shm_8 lat_ref_shm_8
	compare "latency shm 4 KiB" "us" lower "pingpong" "fi_pingpong" lat_ferry_shm_4k lat_ref_shm_4k
fi
if want latency && [[ -x $rma ]]; then
	compare "latency tcp 8 B vs RMA" "us" lower "pingpong" "rma_raw" lat_ferry_tcp_8 lat_rma_tcp_8
	compare "latency tcp 4 KiB vs RMA" "us" lower "pingpong" "rma_raw" lat_ferry_tcp_4k lat_rma_tcp_4k
	compare "latency shm 8 B vs RMA" "us" lower "pingpong" "rma_raw" lat_ferry_shm_8 lat_rma_shm_8
	compare "latency shm 4 KiB vs RMA" "us" lower "pingpong" "rma_raw" lat_ferry_shm_4k lat_rma_shm_4k
fi
if want batch; then
	compare "tcp 4 KiB batch 64 vs 1" "ops/s" higher "batch 64" "batch 1" batch_tcp_64 batch_tcp_1
	compare "shm 4 KiB batch 64 vs 1" "ops/s" higher "batch 64" "batch 1" batch_shm_64 batch_shm_1
fi

if want staged; then
	compare "tcp 4 MiB GPU->host staged" "GB/s" higher "--mem cuda" "--mem host" staged_tcp_sender host_tcp
	compare "tcp 4 MiB GPU->GPU staged" "GB/s" higher "--mem cuda" "--mem host" staged_tcp_both host_tcp
	compare "shm 4 MiB GPU->host staged" "GB/s" higher "--mem cuda" "--mem host" staged_shm_sender host_shm
	compare "shm 4 MiB GPU->GPU staged" "GB/s" higher "--mem cuda" "--mem host" staged_shm_both host_shm
fi

# ---- the table -------------------------------------------------------------

fmt() { awk -v v="$1" 'BEGIN { if (v == "-") print "-"; else if (v >= 1000) printf "%.0f", v; else printf "%.3g", v }'; }

table() {
	local row name unit fl rl fv rv better fs rs fm fmin fmax fn rm rmin rmax rn ratio
	printf '%-26s %-6s %-30s %-36s %s\n' "case" "unit" "ferry median (min-max) n" "reference median (min-max) n" "ratio"
	for row in "${rows[@]}"; do
		IFS='|' read -r name unit fl rl fv rv better <<< "$row"
		read -r fm fmin fmax fn <<< "$(stats $fv)"
		read -r rm rmin rmax rn <<< "$(stats $rv)"
		ratio=$(awk -v a="$fm" -v b="$rm" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }')
		fs="$(fmt "$fm") ($(fmt "$fmin")-$(fmt "$fmax")) $fn/$runs"
		rs="$rl $(fmt "$rm") ($(fmt "$rmin")-$(fmt "$rmax")) $rn/$runs"
		printf '%-26s %-6s %-30s %-36s %s%s\n' "$name" "$unit" "$fs" "$rs" "$ratio" \
			"$([[ $better == lower ]] && echo ' (lower is better)')"
	done
	echo "ratio = ferry median / reference median; load average at start $load0, at the end $(load) on $(nproc) CPUs"
}

echo
table | tee -a "$out"
echo "raw runs: $out"
