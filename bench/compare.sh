#!/usr/bin/env bash
# compare.sh: ferry_bench side by side with raw libfabric (bench/rma_raw),
# UCX (ucx_perftest) and memcpy on this machine, every tool of a row taking
# its turn in each round, and one markdown table per group of medians with
# their spreads and the ratios ferry / other.
#
#   bench/compare.sh [-n RUNS] [-t SECONDS] [-d DEPTH] [-f FOOTPRINT | -1]
#                    [-c GROUPS] [-P PROVIDERS] [-O OPS] [-s SIZES]
#                    [-L LIBFABRIC_PREFIX] [-F FABTESTS_BIN]
#                    [-b FERRY_BENCH] [-o FILE] [-m FILE] [-g DIR]
#   bench/compare.sh -R FILE [-m FILE] [-g DIR]
#
#   -n RUNS       rounds of each row (default 5): medians, min-max spreads
#   -t SECONDS    measured seconds of each throughput run (1; ping-pongs
#                 take half, rounded up; warmups come on top)
#   -d DEPTH      blocks in flight in the streams (16): ferry_bench
#                 --inflight, rma_raw -b -d, ucx_perftest -O
#   -f FOOTPRINT  bytes each side cycles through (K, M, G; up to 1G): at
#                 least, and by default, the block x DEPTH, or block x
#                 batch in the small group, as ferry_bench picks by itself:
#                 ferry_bench --buffer-size, rma_raw -B, the memcpy's region
#   -1            one block: in the streams every operation moves the same
#                 block, as ucx_perftest's always do (ferry_bench
#                 --same-block, rma_raw -B BLOCK, memcpy over one block);
#                 the data then stays in the CPU's caches
#   -c GROUPS     comma-separated (default stream,pingpong,small; all for
#                 every group):
#                   stream    one-way GB/s, PROVIDERS x OPS x SIZES
#                   pingpong  mean half round trip (us), 8 B and 4 KiB
#                   small     ops/s of 4 and 16 KiB blocks, batches of 64
#                             and 256, one request (window) in flight
#                   iperf     tcp write 1 and 4 MiB against iperf3
#                   batch     ferry_bench 4 KiB blocks, batch 64 against 1
#                   staged    --mem cuda against --mem host, 4 MiB
#                   fabtests  one-way writes of SIZES, DEPTH in flight,
#                             against fabtests' fi_rma_bw -o writedata
#                             (needs -F), PROVIDERS x SIZES
#   -P PROVIDERS  comma-separated, for stream, pingpong, small, fabtests:
#                 tcp (tcp;ofi_rxm, rxm over tcp's connected endpoints,
#                 the only tcp for RDM in libfabric 1.17), tcpn (the
#                 native reliable-datagram tcp provider of libfabric 1.18
#                 and later, named "tcp"; see -L), shm (default tcp,shm)
#   -L PREFIX     run every tool against the libfabric installed under
#                 PREFIX (PREFIX/lib first in LD_LIBRARY_PATH, PREFIX/bin
#                 first in PATH): a release built locally, e.g.
#                 git checkout v2.6.0 && ./autogen.sh && ./configure
#                 --prefix=/opt/libfabric-2.6.0 && make install.  ferry,
#                 rma_raw and fabtests built against an older libfabric
#                 run on it unchanged (libfabric keeps its ABI).  The
#                 default providers are then tcpn,shm
#   -F DIR        fabtests' binaries (fi_rma_bw), built against the same
#                 libfabric as the run uses (fabtests/ of the libfabric
#                 release: ./autogen.sh && ./configure
#                 --with-libfabric=PREFIX && make); default $FABTESTS_BIN,
#                 else fi_rma_bw on PATH
#   -O OPS        write, read or both (write,read) for stream
#   -s SIZES      block sizes of stream (4K,16K,64K,256K,1M,4M,16M)
#   -b PATH       ferry_bench to run (default: $FERRY_BENCH, else a build
#                 directory next to the source: build/, ../build/, the cwd);
#                 rma_raw is taken from beside it (or $RMA_RAW)
#   -o FILE       raw runs (default bench/results/compare-DATE.txt)
#   -m FILE       the tables in markdown, with a line on the method, ready
#                 for docs/performance.md (they are printed in any case)
#   -R FILE       runs nothing: the tables again from the raw runs of an
#                 earlier run (its -o FILE), with its settings and method
#   -g DIR        plots too (gnuplot, via bench/plot-sweep.sh): the stream
#                 group's GB/s against the block size, one line per tool
#                 (the medians), in DIR/stream-PROVIDER-OP.svg for each
#                 provider and op; without gnuplot it says so and goes on
#
# On a terminal a progress line says which row of how many is running,
# how long the whole has taken and about how long the rest will take; in
# a log each row is a line of dots, one per round.
#
# The columns.  tcp is "tcp;ofi_rxm" on domain lo (UCX: UCX_TLS=tcp,
# UCX_NET_DEVICES=lo); shm is libfabric's shm and UCX's shared memory
# transports, UCX_TLS=posix,cma,self and UCX_TLS=sysv,cma,self.
#   ferry     ferry_bench --loopback --inflight DEPTH --buffer-size
#             FOOTPRINT (--pingpong; --batch-size B --inflight 1); its
#             target runs ferry's progress thread, and on tcp a second
#             column has it poll itself instead (--target-polls)
#   rma_raw   the same blocks in raw libfabric, FI_DELIVERY_COMPLETE as
#             ferry asks: -b -d DEPTH -B FOOTPRINT, blocks above 1 MiB as
#             1 MiB operations as ferry posts them (its default largest
#             operation); its ping-pong; -W B for the small group (fabtests'
#             fi_rma_bw loop: B blocks, wait for all, repeat), each block
#             an operation of its own.  ferry posts the neighbouring blocks
#             of a batch as one operation of up to 1 MiB (docs/semantics.md);
#             the small group has it both ways: as is, and with
#             --descending, one operation per block as rma_raw posts them.
#             On tcp a second column, rma_raw -f, gives the target a CQ
#             with a file descriptor, as ferry's progress thread needs to
#             sleep on it (it still busy polls): what that costs is the
#             provider's (its progress then asks epoll_wait every poll)
#   UCX       ucx_perftest -t ucp_put_bw (write) or ucp_get (read) -O DEPTH,
#             ucp_put_lat for the ping-pong; it counts iterations: as many
#             as take SECONDS at the rate its first run in the row measured
#             (the first run: at the rate of the row's ferry or rma_raw;
#             after one that gave no result, 100 times fewer).
#             Heap buffers: UCX_ALLOC_PRIO=heap.  ucx_perftest
#             1.13 has no option for the memory it moves: it asks
#             ucp_mem_map to allocate it, and UCX's default allocation
#             order (md:sysv,md:posix,huge,thp,md:*,mmap,heap) puts it in
#             sysv or posix shared memory whenever a shared memory
#             transport is on, which the peer maps and writes straight
#             into: one memcpy with no CMA or bounce buffer, 45-52 GB/s at
#             4 MiB here, something no application with malloc'd buffers
#             (nor ferry) gets.  heap makes it posix_memalign, so UCX moves
#             ordinary memory (through CMA or its FIFOs) as the others do.
#             It reuses one block-sized buffer on each side (no
#             FOOTPRINT), and a put completes once its buffer may be
#             reused, not once delivered.
#   memcpy    ferry_bench --memcpy (one thread, the same blocks over the
#             same FOOTPRINT), for shm
#   fi_pingpong  fabtests' msg ping-pong (libfabric-bin), in the ping-pong
#             group when installed
# The fabtests group's columns, all writes of one block (fabtests reuse
# one buffer), DEPTH at a time:
#   fi_rma_bw    fi_rma_bw -o writedata -W DEPTH -S BYTES: every write
#             carries remote CQ data, which the target counts; DEPTH
#             writes, then the target's acknowledgement of the window.
#             The provider's default completion: a write completes once
#             its buffer may be reused, not once delivered
#   fi_rma_bw -U the same with FI_DELIVERY_COMPLETE, ferry's completion
#   rma_raw -i -e  rma_raw's stream with remote CQ data on every write
#             and the provider's default completion: what a design that
#             orders notifications by counting writes at the target
#             (instead of waiting for each write's delivery) could reach
#   ferry     ferry_bench --same-block (one block, as fi_rma_bw), and
#             cycling through block x DEPTH as in the stream group
# A ratio is ferry's over the other's, the median of the rounds' ratios
# (each of two runs seconds apart): above 1 ferry is faster for GB/s and
# ops/s, slower for latency.  The groups tcp, shm and latency of
# earlier versions live on in stream (the rma_raw and memcpy columns) and
# pingpong (rma_raw and fi_pingpong).
#
# Every process runs under timeout(1), so nothing hangs; servers are killed
# if their client fails, or on an interrupt.  Missing tools (ucx_perftest:
# apt-get install ucx-utils; iperf3; fi_pingpong: libfabric-bin) leave
# their column out.  Other jobs on the machine make these numbers noisy,
# and worse: every tool here busy-polls on both sides, and on 2 CPUs one
# more busy process leaves the two sides sharing a CPU, where a stream
# collapses to about 100 operations a second (each waits for the other
# side's time slice).  Run it on an idle machine; the load average goes
# with every run in the raw file and into the method line.
set -uo pipefail

me=compare.sh
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
runs=5 secs=1 depth=16 footprint='' one_block='' groups=stream,pingpong,small
provs='' ops=write,read sizes=4K,16K,64K,256K,1M,4M,16M
bench=${FERRY_BENCH:-} out='' md='' reread='' plot_dir=''
lf_prefix='' fab_dir=${FABTESTS_BIN:-}
all_groups=stream,pingpong,small,iperf,batch,staged,fabtests

usage() {
	sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}
bad() { echo "$me: $*" >&2; exit 2; }

while getopts n:t:d:f:1c:P:O:s:L:F:b:o:m:R:g:h opt; do
	case $opt in
	n) runs=$OPTARG ;;
	t) secs=$OPTARG ;;
	d) depth=$OPTARG ;;
	f) footprint=$OPTARG ;;
	1) one_block=1 ;;
	c) groups=$OPTARG ;;
	P) provs=$OPTARG ;;
	O) ops=$OPTARG ;;
	s) sizes=$OPTARG ;;
	L) lf_prefix=$OPTARG ;;
	F) fab_dir=$OPTARG ;;
	b) bench=$OPTARG ;;
	o) out=$OPTARG ;;
	m) md=$OPTARG ;;
	R) reread=$OPTARG ;;
	g) plot_dir=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
(($# == 0)) || bad "$1: takes options only (-h lists them)"

# -R: the settings of the run that wrote FILE, from its first three lines
# (see "go" below).
read_settings() { # FILE
	local l2 l3
	{ read -r _ && read -r l2 && read -r l3; } < "$1" || return 1
	[[ $l2 =~ -n\ ([0-9]+)\ -t\ ([0-9]+)\ -d\ ([0-9]+)\ (-f\ (.*)|-1\ .*)$ ]] || return 1
	runs=${BASH_REMATCH[1]} secs=${BASH_REMATCH[2]} depth=${BASH_REMATCH[3]}
	footprint='' one_block=''
	case ${BASH_REMATCH[4]} in
	-1*) one_block=1 ;;
	"-f block x depth") ;;
	*) footprint=${BASH_REMATCH[5]} ;;
	esac
	[[ $l3 =~ ^groups\ ([^;]+)\;\ providers\ ([^;]+)\;\ ops\ ([^;]+)\;\ sizes\ ([^;]+)\; ]] || return 1
	groups=${BASH_REMATCH[1]} provs=${BASH_REMATCH[2]} ops=${BASH_REMATCH[3]} sizes=${BASH_REMATCH[4]}
}
if [[ -n $reread ]]; then
	[[ -z $out ]] || bad "-o $out: -R runs nothing and writes no raw file (-m FILE writes the tables)"
	[[ -r $reread ]] || bad "-R $reread: cannot read it"
	read_settings "$reread" || bad "-R $reread: not the raw runs of a compare.sh run (its first three lines say what ran)"
fi

# A size with an optional K, M or G (powers of 1024) in bytes, or nothing.
bytes() { [[ $1 =~ ^[0-9]+[KMG]?$ ]] && numfmt --from=iec "$1" 2> /dev/null; }

# Every word of a comma-separated list is one of the allowed: LIST ALLOWED WHAT
check_list() {
	local w
	[[ -n $1 ]] || bad "$3: give at least one of ${2//,/, }"
	for w in ${1//,/ }; do
		[[ ,$2, == *,$w,* ]] || bad "$3 $w: give ${2//,/, } (comma-separated)"
	done
}

[[ $runs =~ ^[1-9][0-9]*$ ]] || bad "-n $runs: give a whole number >= 1"
[[ $secs =~ ^[1-9][0-9]*$ ]] || bad "-t $secs: give whole seconds >= 1"
if ! [[ $depth =~ ^[1-9][0-9]*$ ]] || ((depth > 64)); then
	bad "-d $depth: give a whole number from 1 to 64 (rma_raw -d's limit)"
fi
[[ -n $footprint && -n $one_block ]] && bad "-f and -1: give one footprint"
if [[ -n $footprint ]]; then
	fp_bytes=$(bytes "$footprint")
	if [[ -z $fp_bytes ]] || ((fp_bytes == 0 || fp_bytes > 1 << 30)); then
		bad "-f $footprint: give bytes up to 1G, e.g. 256M"
	fi
fi
[[ $groups == all ]] && groups=$all_groups
check_list "$groups" "$all_groups" "-c"
if [[ -n $lf_prefix ]]; then
	[[ -e $lf_prefix/lib/libfabric.so.1 ]] ||
		bad "-L $lf_prefix: no lib/libfabric.so.1 there (give the --prefix a libfabric was installed under)"
	export LD_LIBRARY_PATH=$lf_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export PATH=$lf_prefix/bin:$PATH
fi
[[ -n $provs ]] || provs=${lf_prefix:+tcpn,shm}
[[ -n $provs ]] || provs=tcp,shm
check_list "$provs" tcp,tcpn,shm "-P"
check_list "$ops" write,read "-O"
size_list=()
for s in ${sizes//,/ }; do
	b=$(bytes "$s")
	if [[ -z $b ]] || ((b == 0 || b > 64 << 20)); then
		bad "-s $s: give block sizes from 1 to 64M, e.g. 4K,1M (rma_raw's limit)"
	fi
	size_list+=("$b")
done
((${#size_list[@]} > 0)) || bad "-s: give at least one block size, e.g. 4K,1M"
want() { [[ ,$groups, == *,$1,* ]]; }

if [[ -n $reread ]]; then
	: # nothing runs
elif [[ -z $bench ]]; then
	for b in "$src_dir/../build/bench/ferry_bench" "$src_dir/../../build/bench/ferry_bench" \
		"$PWD/bench/ferry_bench" "$src_dir/ferry_bench"; do
		if [[ -x $b ]]; then bench=$b; break; fi
	done
fi
if [[ -z $reread ]] && [[ -z $bench || ! -x $bench ]]; then
	bad "no ferry_bench found${bench:+ at $bench}: build it (make bench/ferry_bench) and pass -b PATH"
fi
rma=${RMA_RAW:-$(dirname "${bench:-.}")/rma_raw}
if [[ -z $reread && ! -x $rma ]] && { want stream || want pingpong || want small; }; then
	bad "no rma_raw at $rma: build it (make bench/rma_raw) or set RMA_RAW"
fi

if [[ -n $reread ]]; then
	out=/dev/null
elif [[ -z $out ]]; then
	mkdir -p "$src_dir/results" || exit 1
	out=$src_dir/results/compare-$(date +%Y%m%d-%H%M%S).txt
fi
: > "$out" || { echo "$me: cannot write $out" >&2; exit 1; }
if [[ -n $md ]]; then
	: > "$md" || { echo "$me: cannot write $md" >&2; exit 1; }
fi
if [[ -n $plot_dir ]]; then
	if ! mkdir -p "$plot_dir" || [[ ! -w $plot_dir ]]; then
		bad "-g $plot_dir: cannot write there"
	fi
fi
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
raw() { printf '%s\n' "$@" >> "$out"; }

# Waits up to 5 s for a TCP port to listen on this host, while PID lives.
wait_listen() { # PORT PID
	local i
	for ((i = 0; i < 50; i++)); do
		if command -v ss > /dev/null; then
			ss -Hltn "sport = :$1" 2> /dev/null | grep -q . && return 0
		fi
		kill -0 "$2" 2> /dev/null || return 1
		sleep 0.1
	done
	return 1
}

# A port for a server, below the kernel's ephemeral ports: the tools' own
# connections take those and leave them in TIME_WAIT, where a server's
# bind() fails.
free_port() {
	local lo _
	read -r lo _ < /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null || lo=32768
	((lo > 11000)) || lo=32768
	echo $((10000 + RANDOM % (lo - 10000)))
}

# Starts COMMAND in the background, @PORT@ in it standing for a free port,
# and waits for it to listen there; sets port and server_pid.  Three tries.
start_server() { # LOG COMMAND...
	local log=$1 try
	shift
	for ((try = 0; try < 3; try++)); do
		port=$(free_port)
		"${@//@PORT@/$port}" > "$log" 2>&1 &
		server_pid=$!
		echo "$server_pid" >> "$tmp/servers"
		wait_listen "$port" "$server_pid" && return 0
		raw "  server on port $port did not start: $(head -c 300 "$log")"
		stop_server "$server_pid"
	done
	return 1
}

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

# rma_raw ARGS... -> field FIELD of its result line: "BYTES ITERATIONS
# USEC" (ping-pong) or "BYTES ITERATIONS GB/S OPS/S" (streams)
rma_value() { # FIELD ARGS...
	local field=$1 v
	shift
	timeout -k 2 $((secs + 60)) "$rma" "$@" > "$tmp/rma.out" 2>&1
	raw "  rma_raw $(printf '%q ' "$@")-> rc $?"
	v=$(awk -v f="$field" 'NF >= 3 && $1 ~ /^[0-9]+$/ { v = $f } END { if (v != "") print v }' "$tmp/rma.out")
	[[ -n $v ]] || { raw "    no result: $(head -c 300 "$tmp/rma.out")"; return; }
	raw "    $(tail -n 1 "$tmp/rma.out")"
	echo "$v"
}

# ucx_perftest, server and client with the same environment, heap buffers
# (see the top) -> GB/s (its overall MB/s are MiB/s) or, with lat, its
# overall latency: half the round trip for ucp_put_lat
ucx_value() { # bw|lat TLS ARGS...
	local what=$1 tls=$2 port v
	shift 2
	local env=(env UCX_TLS="$tls" UCX_ALLOC_PRIO=heap)
	[[ $tls == tcp ]] && env+=(UCX_NET_DEVICES=lo)
	start_server "$tmp/ucx-s.out" \
		timeout -k 2 $((secs * 10 + 30)) "${env[@]}" ucx_perftest -p @PORT@ || return
	timeout -k 2 $((secs * 10 + 30)) "${env[@]}" ucx_perftest 127.0.0.1 -p "$port" "$@" -f -v \
		> "$tmp/ucx.out" 2>&1
	raw "  UCX_TLS=$tls ucx_perftest $* -f -v -> rc $?"
	stop_server "$server_pid"
	# iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,...
	v=$(awk -F, -v w="$what" '{ sub(/^ +/, "") } $1 ~ /^[0-9]+$/ && NF >= 8 {
		v = w == "lat" ? $4 : sprintf("%.6f", $6 * 1048576 / 1e9) }
		END { if (v != "") print v }' "$tmp/ucx.out")
	[[ -n $v ]] || { raw "    no result: $(head -c 300 "$tmp/ucx.out")"; return; }
	raw "    $(tail -n 1 "$tmp/ucx.out")"
	echo "$v"
}

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

# fi_pingpong's usec/xfer: the mean one-way time (half a round trip).
fi_pingpong_us() { # PROVIDER SIZE ITERATIONS
	local port v
	start_server "$tmp/fipp-s.out" \
		timeout -k 2 $((secs * 10 + 30)) fi_pingpong -p "$1" -e rdm -I "$3" -S "$2" -B @PORT@ || return
	timeout -k 2 $((secs * 10 + 30)) fi_pingpong -p "$1" -e rdm -I "$3" -S "$2" -P "$port" 127.0.0.1 \
		> "$tmp/fipp-c.out" 2>&1
	raw "  fi_pingpong -p '$1' -e rdm -I $3 -S $2 -P $port 127.0.0.1 -> rc $?"
	stop_server "$server_pid"
	# bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
	v=$(awk '$1 ~ /^[0-9]/ && NF >= 8 { v = $7 } END { if (v != "") print v }' "$tmp/fipp-c.out")
	[[ -n $v ]] || { raw "    no result: $(head -c 300 "$tmp/fipp-c.out")"; return; }
	raw "    $(tail -n 1 "$tmp/fipp-c.out")"
	echo "$v"
}

iperf3_gbps() { # SIZE
	local port v
	start_server "$tmp/iperf3-s.out" \
		timeout -k 2 $((secs + 30)) iperf3 -s -1 -p @PORT@ || return
	timeout -k 2 $((secs + 30)) iperf3 -c 127.0.0.1 -p "$port" -t "$secs" -l "$1" -J \
		> "$tmp/iperf3.json" 2> "$tmp/iperf3-c.err"
	raw "  iperf3 -c 127.0.0.1 -p $port -t $secs -l $1 -J -> rc $?"
	stop_server "$server_pid"
	v=$(json_get "$tmp/iperf3.json" .end.sum_received.bits_per_second)
	[[ -n $v ]] || { raw "    no bits_per_second: $(head -c 300 "$tmp/iperf3-c.err" "$tmp/iperf3.json")"; return; }
	awk -v b="$v" 'BEGIN { printf "%.6f\n", b / 8 / 1e9 }'
	raw "    receiver bits_per_second $v"
}

# ---- rows: every column once per round, the order reversed every other --

declare -A vals=() # [ROW COLUMN] -> the values of the runs, x for a failure
declare -A first=() # [COLUMN] -> its first value in the current row
declare -A misses=() # [COLUMN] -> its runs in the current row with no value

# The progress line, on a terminal only: redrawn in place before every
# run, and replaced by the row's line of dots once the row is done.
tty_line='' row_no=0 rows_total=0 est_total=0 drawn=0
[[ -t 2 ]] && tty_line=1

# "42 s", "3 min 05 s", "1 h 02 min"
fmt_secs() {
	local s=$1
	if ((s < 60)); then echo "$s s"
	elif ((s < 3600)); then printf '%d min %02d s\n' $((s / 60)) $((s % 60))
	else printf '%d h %02d min\n' $((s / 3600)) $((s % 3600 / 60)); fi
}

# Before run RUN of the row, its K-th tool of N (from 0): the share of the
# rows done so far gives the time left at the pace so far; before there
# is any, the estimate made at the start.
progress_line() { # ROW RUN K N COLUMN
	local el left line cols
	el=$(($(date +%s) - t_start))
	left=$(awk -v r="$row_no" -v n="$rows_total" -v i="$2" -v k="$3" \
		-v nc="$4" -v runs="$runs" -v el="$el" -v est="$est_total" 'BEGIN {
		f = (r - 1 + (i - 1 + k / nc) / runs) / n
		left = f > 0 && el >= 5 ? el * (1 - f) / f : est - el
		printf "%d\n", (left > 0 ? left + 0.5 : 0) }')
	line="$me: row $row_no/$rows_total ($(fmt_secs "$el"), about $(fmt_secs "$left") left): $1, run $2/$runs, $5"
	# Longer than the terminal, it would wrap, and \r goes back to the
	# start of its last row only: the end goes.
	cols=$(stty size 2> /dev/null < /dev/tty | cut -d' ' -f2)
	[[ $cols =~ ^[0-9]+$ ]] && ((cols > 1)) || cols=80
	line=${line:0:cols-1}
	printf '\r%s%*s' "$line" $((drawn > ${#line} ? drawn - ${#line} : 0)) '' >&2
	drawn=${#line}
}

measure_row() { # ROW-NAME COLUMN...
	local row=$1 i c v k
	shift
	local cols=("$@") order
	raw "" "== $row: ${cols[*]}"
	row_no=$((row_no + 1))
	[[ -n $tty_line ]] || printf '%s: %-28s' "$me" "$row" >&2
	first=() misses=()
	for ((i = 1; i <= runs; i++)); do
		raw "run $i (load $(load))"
		order=("${cols[@]}")
		((i % 2)) || mapfile -t order < <(printf '%s\n' "${cols[@]}" | tac)
		k=0
		for c in "${order[@]}"; do
			[[ -z $tty_line ]] || progress_line "$row" "$i" "$k" "${#order[@]}" "$c"
			k=$((k + 1))
			v=$($c)
			[[ -n $v && -z ${first[$c]:-} ]] && first[$c]=$v
			[[ -n $v ]] || misses[$c]=$((${misses[$c]:-0} + 1))
			vals[$row $c]+="${v:-x} "
		done
		[[ -n $tty_line ]] || printf '.' >&2
	done
	if [[ -n $tty_line ]]; then
		# Over the progress line, the row's line as a log has it.
		printf '\r%*s\r%s: %-28s%s\n' "$drawn" '' "$me" "$row" \
			"$(printf "%${runs}s" '' | tr ' ' .)" >&2
		drawn=0
	else
		printf '\n' >&2
	fi
	for c in "${cols[@]}"; do raw "$c: ${vals[$row $c]}"; done
}

# What a tool that counts iterations rather than time sizes its runs from:
# the first value column COL measured in this row, else the least (or,
# with max, the largest) of the other columns' first values.  The first,
# not the latest: every later run of the row is as long (UCX's tcp puts
# of 4 MiB and more stall for seconds at the end of a run, whatever its
# length; adapting to that would shorten the runs round by round).
# Sized from the other columns, COL is assumed 100 times slower for each
# of its runs in the row that gave no value, most likely by running out
# of time (ucx_perftest's 4 KiB gets on shared memory move ~1/100 of what
# libfabric's reads do, and 1.2 M of them outlast its timeout).
estimate() { # COL min|max DEFAULT
	local c best=
	if [[ -n ${first[$1]:-} ]]; then echo "${first[$1]}"; return; fi
	for c in "${!first[@]}"; do
		best=$(awk -v a="${best:-${first[$c]}}" -v b="${first[$c]}" -v m="$2" \
			'BEGIN { print (m == "min") == (a + 0 < b + 0) ? a : b }')
	done
	awk -v r="${best:-$3}" -v m="$2" -v k="${misses[$1]:-0}" \
		'BEGIN { print m == "min" ? r / 100 ^ k : r * 100 ^ k }'
}

# ---- the groups ------------------------------------------------------------

FB=(--duration "$secs" --warmup 0.3)
# A ping-pong gathers thousands of samples a second: half the time will do.
lsecs=$(((secs + 1) / 2))
FL=(--duration "$lsecs" --warmup 0.3)
MAX_OP=$((1 << 20)) # ferry's default largest operation (lib/fabric)

# The row's provider as each tool names it: sets FA (ferry_bench), RA
# (rma_raw), UCX_MAIN (UCX_TLS of the UCX column) and FIPP (fi_pingpong).
set_provider() { # tcp|shm
	case $1 in
	tcp)
		FA=(--provider "tcp;ofi_rxm" --domain lo) RA=(-p "tcp;ofi_rxm" -D lo)
		UCX_MAIN=tcp FIPP="tcp;ofi_rxm"
		;;
	tcpn)
		FA=(--provider tcp --domain lo) RA=(-p tcp -D lo)
		UCX_MAIN=tcp FIPP=tcp
		;;
	shm) FA=(--provider shm) RA=(-p shm) UCX_MAIN=posix,cma,self FIPP=shm ;;
	esac
}
# The footprint of a row whose blocks in flight take BYTES: -f's, but
# never less (ferry_bench needs a slot for every block in flight).
fp_of() { echo $((${fp_bytes:-0} > $1 ? fp_bytes : $1)); }

# Iterations of about SECONDS at the estimated rate of COLUMN: GB/s, or
# with -u the half round trip in us; at least 20.
iterations() { # COLUMN SIZE SECONDS [-u]
	local r
	if [[ ${4:-} == -u ]]; then
		r=$(estimate "$1" max 100)
		awk -v us="$r" -v s="$3" 'BEGIN { n = s * 1e6 / (2 * (us > 0.2 ? us : 0.2)); printf "%d\n", n < 200 ? 200 : n }'
	else
		r=$(estimate "$1" min 1)
		awk -v g="$r" -v b="$2" -v s="$3" 'BEGIN { n = s * g * 1e9 / b; printf "%d\n", n < 20 ? 20 : n }'
	fi
}

# stream: one-way blocks of $size, $op, DEPTH in flight over $fp bytes
s_ferry() {
	ferry_value 2 "${FA[@]}" --op "$op" --block-size "$size" --inflight "$depth" \
		--buffer-size "$fp" ${one_block:+--same-block} "${FB[@]}" "$@"
}
s_ferry_polled() { s_ferry --target-polls; }
s_raw() {
	local a=(-b -d "$depth" -s "$size" -B "$fp" -T "$secs" -w $((depth * 4)))
	((size > MAX_OP)) && a+=(-o "$MAX_OP")
	[[ $op == read ]] && a+=(-r)
	rma_value 3 "${RA[@]}" "${a[@]}" "$@"
}
s_raw_fd() { s_raw -f; }
s_ucx_tls() { # TLS COLUMN
	local n test=ucp_put_bw
	[[ $op == read ]] && test=ucp_get
	n=$(iterations "$2" "$size" "$secs")
	ucx_value bw "$1" -t "$test" -s "$size" -O "$depth" -n "$n" -w $((n / 10 + 1))
}
s_ucx() { s_ucx_tls "$UCX_MAIN" s_ucx; }
s_ucx_sysv() { s_ucx_tls sysv,cma,self s_ucx_sysv; }
s_memcpy() {
	# --inflight 1: its buffer check counts blocks in flight, which -1's
	# one-block buffer holds only one of.
	ferry_value 2 --memcpy --block-size "$size" --buffer-size "$fp" \
		${one_block:+--inflight 1} "${FB[@]}"
}

stream_group() {
	local p cols
	for p in ${provs//,/ }; do
		set_provider "$p"
		for op in ${ops//,/ }; do
			for size in "${size_list[@]}"; do
				fp=$(fp_of $((size * depth)))
				[[ -n $one_block ]] && fp=$size
				cols=(s_ferry s_raw)
				[[ $p == tcp* ]] && cols+=(s_ferry_polled s_raw_fd)
				[[ -n $have_ucx ]] && cols+=(s_ucx)
				[[ -n $have_ucx && $p == shm ]] && cols+=(s_ucx_sysv)
				[[ $p == shm ]] && cols+=(s_memcpy)
				measure_row "stream $p $op $size" "${cols[@]}"
			done
		done
	done
}

# pingpong: mean half round trip of $size bytes
p_ferry() { ferry_value 7 "${FA[@]}" --pingpong --block-size "$size" "${FL[@]}"; }
p_raw() { rma_value 3 "${RA[@]}" -s "$size" -T "$lsecs"; }
p_ucx_tls() { # TLS COLUMN
	local n
	n=$(iterations "$2" "$size" "$lsecs" -u)
	ucx_value lat "$1" -t ucp_put_lat -s "$size" -n "$n" -w $((n / 10 + 1))
}
p_ucx() { p_ucx_tls "$UCX_MAIN" p_ucx; }
p_ucx_sysv() { p_ucx_tls sysv,cma,self p_ucx_sysv; }
p_fipp() { fi_pingpong_us "$FIPP" "$size" "$(iterations p_fipp "$size" "$lsecs" -u)"; }

pingpong_group() {
	local p cols
	for p in ${provs//,/ }; do
		set_provider "$p"
		for size in 8 4096; do
			cols=(p_ferry p_raw)
			[[ -n $have_ucx ]] && cols+=(p_ucx)
			[[ -n $have_ucx && $p == shm ]] && cols+=(p_ucx_sysv)
			[[ -n $have_fipp ]] && cols+=(p_fipp)
			measure_row "pingpong $p $size" "${cols[@]}"
		done
	done
}

# small: ops/s of $batch blocks of $size, one request or window in flight
b_ferry() {
	ferry_value 3 "${FA[@]}" --block-size "$size" --batch-size "$batch" --inflight 1 \
		--buffer-size "$fp" "${FB[@]}" "$@"
}
b_ferry_desc() { b_ferry --descending; }
b_raw() { rma_value 4 "${RA[@]}" -W "$batch" -s "$size" -B "$fp" -T "$secs" -w $((batch * 4)) "$@"; }
b_raw_fd() { b_raw -f; }

small_group() {
	local p cols
	for p in ${provs//,/ }; do
		set_provider "$p"
		for size in 4096 16384; do
			for batch in 64 256; do
				fp=$(fp_of $((size * batch)))
				cols=(b_ferry b_ferry_desc b_raw)
				[[ $p == tcp* ]] && cols+=(b_raw_fd)
				measure_row "small $p $size $batch" "${cols[@]}"
			done
		done
	done
}

# fabtests: fi_rma_bw -o writedata, fabtests' own RMA bandwidth test, on
# the provider FIPP names -> GB/s (its MB/sec are 10^6 bytes a second).
# Over tcp its server listens on a port; over shm it has nothing to wait
# for but its endpoint, which a second gives it (as fabtests' own
# runfabtests.sh waits).
fab_value() { # SIZE ITERATIONS ARGS...
	local size=$1 n=$2 v a
	shift 2
	a=(-p "$FIPP" -o writedata -S "$size" -W "$depth" -I "$n" -s 127.0.0.1 "$@")
	if [[ $FIPP == shm ]]; then
		timeout -k 2 $((secs * 10 + 30)) "$fab" "${a[@]}" > "$tmp/fab-s.out" 2>&1 &
		server_pid=$!
		echo "$server_pid" >> "$tmp/servers"
		sleep 1
		timeout -k 2 $((secs * 10 + 30)) "$fab" "${a[@]}" 127.0.0.1 > "$tmp/fab-c.out" 2>&1
	else
		start_server "$tmp/fab-s.out" timeout -k 2 $((secs * 10 + 30)) "$fab" "${a[@]}" -B @PORT@ || return
		timeout -k 2 $((secs * 10 + 30)) "$fab" "${a[@]}" -P "$port" 127.0.0.1 > "$tmp/fab-c.out" 2>&1
	fi
	raw "  fi_rma_bw $(printf '%q ' "${a[@]}")127.0.0.1 -> rc $?"
	stop_server "$server_pid"
	# bytes iters total time MB/sec usec/xfer Mxfers/sec
	v=$(awk '$1 ~ /^[0-9]/ && NF >= 7 { v = $5 } END { if (v != "") printf "%.6f\n", v / 1000 }' "$tmp/fab-c.out")
	[[ -n $v ]] || { raw "    no result: $(head -c 300 "$tmp/fab-c.out")"; return; }
	raw "    $(tail -n 1 "$tmp/fab-c.out")"
	echo "$v"
}
f_fab() { fab_value "$size" "$(iterations f_fab "$size" "$secs")"; }
f_fab_dc() { fab_value "$size" "$(iterations f_fab_dc "$size" "$secs")" -U; }
f_ferry_same() {
	ferry_value 2 "${FA[@]}" --op write --block-size "$size" --inflight "$depth" --same-block "${FB[@]}"
}
f_ferry() {
	ferry_value 2 "${FA[@]}" --op write --block-size "$size" --inflight "$depth" \
		--buffer-size $((size * depth)) "${FB[@]}"
}
f_raw() { rma_value 3 "${RA[@]}" -b -d "$depth" -s "$size" -B "$size" -T "$secs" -w $((depth * 4)) "$@"; }
f_raw_count() { f_raw -i -e; }

fabtests_group() {
	local p
	for p in ${provs//,/ }; do
		set_provider "$p"
		for size in "${size_list[@]}"; do
			measure_row "fabtests $p $size" f_ferry_same f_ferry f_fab f_fab_dc f_raw_count f_raw
		done
	done
}

# The older pairs, ferry_bench's defaults against one reference each.
P_TCP=(--provider "tcp;ofi_rxm" --domain lo)
i_ferry_1m() { ferry_value 2 "${P_TCP[@]}" --op write --block-size 1M "${FB[@]}"; }
i_ferry_4m() { ferry_value 2 "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}"; }
i_iperf() { iperf3_gbps 1M; } # iperf3 refuses -l above 1M for TCP
a_tcp_64() { ferry_value 3 "${P_TCP[@]}" --block-size 4K --batch-size 64 --buffer-size 1M "${FB[@]}"; }
a_tcp_1() { ferry_value 3 "${P_TCP[@]}" --block-size 4K --batch-size 1 --buffer-size 1M "${FB[@]}"; }
a_shm_64() { ferry_value 3 --provider shm --block-size 4K --batch-size 64 --buffer-size 1M "${FB[@]}"; }
a_shm_1() { ferry_value 3 --provider shm --block-size 4K --batch-size 1 --buffer-size 1M "${FB[@]}"; }
# --mem cuda: a real GPU if there is one, else ferry's simulated device,
# whose copy engine is the CPU.
staged() { # ARGS...
	if [[ -z ${FERRY_SIM_DEVICES:-} ]] && ! nvidia-smi -L > /dev/null 2>&1; then
		export FERRY_SIM_DEVICES=1
	fi
	ferry_value 2 "$@" --mem cuda
}
g_tcp_sender() { staged "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}" --target-mem host; }
g_tcp_both() { staged "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}"; }
g_tcp_host() { ferry_value 2 "${P_TCP[@]}" --op write --block-size 4M "${FB[@]}"; }
g_shm_sender() { staged --provider shm --op write --block-size 4M --buffer-size 64M "${FB[@]}" --target-mem host; }
g_shm_both() { staged --provider shm --op write --block-size 4M --buffer-size 64M "${FB[@]}"; }
g_shm_host() { ferry_value 2 --provider shm --op write --block-size 4M --buffer-size 64M "${FB[@]}"; }

# Rows of the pair table: ROW|unit|ferry label|reference label|better
pairs=()
pair() { # NAME UNIT BETTER FERRY_LABEL REF_LABEL FERRY_COL REF_COL
	measure_row "$1" "$6" "$7"
	pairs+=("$1|$2|$4|$5|$3|$6|$7")
}

pair_groups() {
	if want iperf && have iperf3 "the iperf group" iperf3; then
		pair "tcp write 1 MiB" GB/s higher ferry_bench "iperf3 -l 1M" i_ferry_1m i_iperf
		pair "tcp write 4 MiB" GB/s higher ferry_bench "iperf3 -l 1M" i_ferry_4m i_iperf
	fi
	if want batch; then
		pair "tcp 4 KiB batch 64 vs 1" ops/s higher "batch 64" "batch 1" a_tcp_64 a_tcp_1
		pair "shm 4 KiB batch 64 vs 1" ops/s higher "batch 64" "batch 1" a_shm_64 a_shm_1
	fi
	if want staged; then
		pair "tcp 4 MiB GPU->host staged" GB/s higher "--mem cuda" "--mem host" g_tcp_sender g_tcp_host
		pair "tcp 4 MiB GPU->GPU staged" GB/s higher "--mem cuda" "--mem host" g_tcp_both g_tcp_host
		pair "shm 4 MiB GPU->host staged" GB/s higher "--mem cuda" "--mem host" g_shm_sender g_shm_host
		pair "shm 4 MiB GPU->GPU staged" GB/s higher "--mem cuda" "--mem host" g_shm_both g_shm_host
	fi
}

have() { # TOOL WHAT PACKAGE
	command -v "$1" > /dev/null && return 0
	echo "$me: $1 is not installed: skipping $2 (apt-get install $3)" >&2
	raw "skipped $2: $1 not installed"
	return 1
}

# ---- go --------------------------------------------------------------------

# -R: the values of every row and column, from the lines measure_row wrote
# ("== ROW: COLUMN..." and, after the runs, "COLUMN: VALUE...").
reread_values() { # FILE
	local line row='' cols=() c
	while IFS= read -r line; do
		if [[ $line =~ ^==\ (.*):\ (.*)$ ]]; then
			row=${BASH_REMATCH[1]}
			read -ra cols <<< "${BASH_REMATCH[2]}"
		elif [[ -n $row && $line =~ ^([a-z0-9_]+):\ (.*)$ ]]; then
			for c in "${cols[@]}"; do
				[[ $c == "${BASH_REMATCH[1]}" ]] && vals[$row $c]=${BASH_REMATCH[2]}
			done
		fi
	done < "$1"
}

# -g DIR: the stream group's medians as one CSV per tool in ferry_bench
# --csv's form, named as the tool (plot-sweep.sh makes the file name the
# line's title), then a picture per provider and op.
plots() {
	local p op tool c label f size m n
	local tools=(s_ferry:ferry s_ferry_polled:"ferry, target polls" s_raw:rma_raw
		s_raw_fd:"rma_raw -f" s_ucx:UCX s_ucx_sysv:"UCX sysv" s_memcpy:memcpy)
	if ! want stream; then
		echo "$me: -g $plot_dir: only the stream group has plots, and it was not in -c" >&2
		return 0
	fi
	if ! command -v "${GNUPLOT:-gnuplot}" > /dev/null; then
		echo "$me: gnuplot is not installed: no plots in $plot_dir (apt-get install gnuplot-nox)" >&2
		return 0
	fi
	for p in ${provs//,/ }; do
		for op in ${ops//,/ }; do
			rm -rf "$tmp/plot" && mkdir "$tmp/plot" || return 1
			local csvs=()
			for tool in "${tools[@]}"; do
				c=${tool%%:*} label=${tool#*:}
				f=$tmp/plot/$label.csv n=0
				echo "size_bytes,gb_per_s,ops_per_s,p50_us,p99_us,p999_us,mean_us" > "$f"
				for size in "${size_list[@]}"; do
					m=$(median "stream $p $op $size" "$c")
					[[ $m == - ]] && continue
					echo "$size,$m,,,,," >> "$f"
					n=$((n + 1))
				done
				((n == 0)) || csvs+=("$f")
			done
			((${#csvs[@]} > 0)) || continue
			sh "$src_dir/plot-sweep.sh" -o "$plot_dir/stream-$p-$op.svg" \
				-t "compare.sh: one-way $op over $p, $depth blocks in flight, GB/s (medians of $runs runs)" \
				"${csvs[@]}" >&2 || return 1
		done
	done
}

if [[ -n $reread ]]; then
	reread_values "$reread"
	measure_row() { :; } # the pair table's rows, without running them
	have() { return 0; }
	pair_groups
	# shellcheck source=bench/compare-table.sh
	. "$src_dir/compare-table.sh"
	tables | tee "${md:-/dev/null}"
	[[ -z $plot_dir ]] || plots || exit 1
	exit 0
fi

# The raw file's first three lines say what runs (-R reads them back), so
# they come before anything else is written there.
load0=$(load) t_start=$(date +%s)
raw "compare.sh $(date -Is) on $(hostname) ($(nproc) CPUs), $(uname -sr)"
fp_desc="-f ${footprint:-block x depth}"
[[ -n $one_block ]] && fp_desc="-1 (one block)"
raw "ferry_bench: $bench; rma_raw: $rma; -n $runs -t $secs -d $depth $fp_desc"
raw "groups $groups; providers $provs; ops $ops; sizes $sizes; load average at start: $load0"

have_ucx='' have_fipp=''
if want fabtests; then
	fab=${fab_dir:+$fab_dir/fi_rma_bw}
	fab=${fab:-$(command -v fi_rma_bw)}
	[[ -n $fab && -x $fab ]] ||
		bad "-c fabtests: no fi_rma_bw${fab_dir:+ in $fab_dir}: build fabtests (fabtests/ of a libfabric release) and give -F DIR"
	raw "fi_rma_bw: $fab"
fi
if [[ ,$provs, == *,tcpn,* ]] && command -v fi_info > /dev/null &&
	! fi_info -p tcp -t FI_EP_RDM 2> /dev/null | grep -qx 'provider: tcp'; then
	bad "-P tcpn: this libfabric ($(fi_info --version 2> /dev/null | awk '/libfabric:/ { print $2 }')) has no native reliable-datagram tcp provider (1.18 and later do): give -L PREFIX of one"
fi
if want stream || want pingpong; then
	have ucx_perftest "the UCX columns" ucx-utils && have_ucx=1
fi
want pingpong && have fi_pingpong "the fi_pingpong column" libfabric-bin && have_fipp=1

# Seconds a run takes beyond its measured time (start-up, warmup,
# registration), on this machine.
estimate_seconds() {
	local np nprov nops ncols_s ncols_p t=0
	nprov=$(wc -w <<< "${provs//,/ }") nops=$(wc -w <<< "${ops//,/ }")
	np=$(grep -o shm <<< "$provs" | wc -l)
	ncols_s=$(((nprov - np) * (2 + ${have_ucx:-0}) + np * (3 + 2 * ${have_ucx:-0})))
	ncols_p=$(((nprov - np) * (2 + ${have_ucx:-0}) + np * (2 + 2 * ${have_ucx:-0}) + nprov * ${have_fipp:-0}))
	want stream && t=$((t + ncols_s * nops * ${#size_list[@]} * runs * (secs + 1)))
	want pingpong && t=$((t + ncols_p * 2 * runs * (lsecs + 1)))
	want small && t=$((t + nprov * 12 * runs * (secs + 1)))
	want iperf && t=$((t + 4 * runs * (secs + 1)))
	want batch && t=$((t + 4 * runs * (secs + 1)))
	want staged && t=$((t + 8 * runs * (secs + 2)))
	want fabtests && t=$((t + nprov * ${#size_list[@]} * 6 * runs * (secs + 2)))
	echo "$t"
}

# Rows of the groups that run, for the progress line.
count_rows() {
	local nprov nops n=0
	nprov=$(wc -w <<< "${provs//,/ }") nops=$(wc -w <<< "${ops//,/ }")
	want stream && n=$((n + nprov * nops * ${#size_list[@]}))
	want pingpong && n=$((n + nprov * 2))
	want small && n=$((n + nprov * 4))
	want iperf && command -v iperf3 > /dev/null && n=$((n + 2))
	want batch && n=$((n + 2))
	want staged && n=$((n + 4))
	want fabtests && n=$((n + nprov * ${#size_list[@]}))
	echo "$n"
}
est_total=$(estimate_seconds) rows_total=$(count_rows)
echo "$me: groups $groups, about $((est_total / 60 + 1)) min; raw runs in $out" >&2

want stream && stream_group
want pingpong && pingpong_group
want small && small_group
want fabtests && fabtests_group
pair_groups

# ---- the tables ------------------------------------------------------------

# shellcheck source=bench/compare-table.sh
. "$src_dir/compare-table.sh"
tables > "$tmp/tables.md"
echo
cat "$tmp/tables.md"
cat "$tmp/tables.md" >> "$out"
[[ -z $md ]] || cp "$tmp/tables.md" "$md"
echo "raw runs: $out${md:+; markdown: $md}"
[[ -z $plot_dir ]] || plots || exit 1
