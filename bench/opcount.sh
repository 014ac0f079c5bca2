#!/usr/bin/env bash
# opcount.sh: what one operation costs ferry and raw libfabric (and UCX),
# counted instead of timed, so that a noisy machine cannot blur it.
#
#   bench/opcount.sh [-B BUILD] [-p PROVIDER] [-D DOMAIN] [-o write|read]
#                    [-s BYTES] [-d DEPTH] [-n OPS] [-r RUNS] [-u] [-v]
#
#   -B BUILD     the build directory holding bench/ and lib/ (default:
#                build next to this script)
#   -p PROVIDER  shm (default) or "tcp;ofi_rxm"
#   -D DOMAIN    the domain (tcp: lo, the default there)
#   -o OP        write (default) or read
#   -s BYTES     block size (4096); -d DEPTH blocks in flight (16)
#   -n OPS       operations of the shorter run (10000)
#   -r RUNS      callgrind runs of each length, the least kept (3)
#   -u           also ucx_perftest (UCX_TLS tcp, or posix,cma,self on shm)
#   -v           also print the kept runs' instructions, not per operation
#
# Every tool runs twice, OPS and 2 x OPS operations, and every count is
# the difference of the two runs over OPS: what setting up, warming up and
# tearing down cost falls out.
#   Instructions (valgrind's callgrind, both processes under it): those
#   of the initiator's loop (ferry_bench's worker_main, rma_raw's
#   initiate; all of ucx_perftest's client), per operation, split by the
#   object they ran in.  Time spent waiting in a poll loop is counted too,
#   and only waiting moves a count between runs of one length (a busy
#   machine makes the initiator wait longer), so of RUNS runs the one with
#   the fewest instructions is kept.  Where the runs of one length spread
#   by more than a quarter of what the OPS extra operations cost, or the
#   longer run cost no more than the shorter, the waiting swamped the
#   operations: the script says so and exits 3.
#   System calls (strace -f, both processes): per operation, by name, those
#   made at least once per 20 operations.  Calls that wait (poll,
#   epoll_wait, futex, nanosleep) depend on timing, the rest do not.
# Needs valgrind and strace; a sanitizer build cannot run under valgrind.
set -uo pipefail

me=opcount.sh
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$src_dir/../build provider=shm domain='' op=write size=4096 depth=16
ops=10000 runs=3 ucx=false verbose=false
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while getopts B:p:D:o:s:d:n:r:uvh opt; do
	case $opt in
	B) build=$OPTARG ;;
	p) provider=$OPTARG ;;
	D) domain=$OPTARG ;;
	o) op=$OPTARG ;;
	s) size=$OPTARG ;;
	d) depth=$OPTARG ;;
	n) ops=$OPTARG ;;
	r) runs=$OPTARG ;;
	u) ucx=true ;;
	v) verbose=true ;;
	*) usage ;;
	esac
done
[[ $op == write || $op == read ]] || { echo "$me: -o is write or read, not \"$op\"" >&2; exit 2; }
for flag_var in s:size d:depth n:ops r:runs; do
	v=${flag_var#*:}
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] ||
		{ echo "$me: -${flag_var%%:*} wants a positive whole number, not \"${!v}\"" >&2; exit 2; }
done
[[ $provider == shm || -n $domain ]] || domain=lo
for tool in valgrind callgrind_annotate strace; do
	command -v $tool > /dev/null ||
		{ echo "$me: needs $tool (apt-get install valgrind strace)" >&2; exit 1; }
done
fbench=$build/bench/.libs/ferry_bench
[[ -x $fbench ]] || fbench=$build/bench/ferry_bench
raw=$build/bench/rma_raw
[[ -x $fbench && -x $raw ]] ||
	{ echo "$me: no ferry_bench and rma_raw in $build/bench: build them (make) or give -B" >&2; exit 1; }
export LD_LIBRARY_PATH=$build/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if grep -q -- -fsanitize "$build/config.log" 2> /dev/null; then
	echo "$me: $build is a sanitizer build, which valgrind cannot run" >&2
	exit 1
fi
# valgrind before 3.20 (Debian 12 has 3.19) cannot read the DWARF 5 debug
# information clang 14 writes by default, and gives up on the first run.
if [[ $(valgrind -q --tool=none "$fbench" --help 2>&1 > /dev/null) == *"debuginfo reader"* ]]; then
	echo "$me: valgrind $(valgrind --version | sed 's/^valgrind-//') cannot read the debug information of $fbench (clang writes DWARF 5, which valgrind reads from 3.20 on): rebuild with CFLAGS=\"-O2 -g -gdwarf-4\"" >&2
	exit 1
fi
$ucx && ! command -v ucx_perftest > /dev/null &&
	{ echo "$me: -u needs ucx_perftest (apt-get install ucx-utils)" >&2; exit 1; }

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

ferry_args() { # N
	echo --provider "$provider" ${domain:+--domain "$domain"} --op "$op" \
		--block-size "$size" --inflight "$depth" \
		--buffer-size $((size * depth)) --iterations "$1" --warmup 0 \
		--timeout 600000
}
# Runs tool TOOL with N operations under a wrapper: "cg" (callgrind) or
# "st" (strace -f -c); the output goes to $tmp/TOOL.WRAP.N.
run() { # TOOL WRAP N
	local tool=$1 wrap=$2 n=$3 out=$tmp/$1.$2.$3 pre=() toggle=() reads=()
	[[ $op == read ]] && reads=(-r)
	case $tool in
	ferry) toggle=(--toggle-collect=worker_main) ;;
	raw) toggle=(--toggle-collect=initiate) ;;
	esac
	if [[ $wrap == cg ]]; then
		pre=(valgrind -q --tool=callgrind "${toggle[@]}"
			"--callgrind-out-file=$out.%p")
	else
		pre=(strace -f -c -o "$out")
	fi
	case $tool in
	ferry)
		# shellcheck disable=SC2046 # ferry_args's words, on purpose
		"${pre[@]}" "$fbench" $(ferry_args "$n") > "$tmp/log" 2>&1 ;;
	raw)
		"${pre[@]}" "$raw" -p "$provider" ${domain:+-D "$domain"} -b \
			-d "$depth" -s "$size" -B $((size * depth)) -n "$n" -w 0 \
			"${reads[@]}" > "$tmp/log" 2>&1 ;;
	ucx)
		run_ucx "$n" "$wrap" "$out" ;;
	esac || { echo "$me: $tool ($wrap, $n operations) failed:" >&2; tail -n 5 "$tmp/log" >&2; exit 1; }
}
run_ucx() { # N WRAP OUT
	local n=$1 wrap=$2 out=$3 port=$((20000 + RANDOM % 20000)) tls=posix,cma,self
	local server_pre=() client_pre=(valgrind -q --tool=callgrind "--callgrind-out-file=$out.client")
	[[ $provider == shm ]] || tls=tcp
	export UCX_TLS=$tls UCX_ALLOC_PRIO=heap
	[[ $tls == tcp ]] && export UCX_NET_DEVICES=${domain:-lo}
	# callgrind: the client only (UCX has no loop function to toggle on, so
	# all of it); strace: both, each to its own file.
	if [[ $wrap == st ]]; then
		server_pre=(strace -f -c -o "$out.server")
		client_pre=(strace -f -c -o "$out.client")
	fi
	"${server_pre[@]}" ucx_perftest -p "$port" > "$tmp/ucx-server.log" 2>&1 &
	local server=$!
	sleep 1
	"${client_pre[@]}" ucx_perftest 127.0.0.1 -p "$port" \
		-t "$([[ $op == write ]] && echo ucp_put_bw || echo ucp_get)" \
		-s "$size" -O "$depth" -n "$n" > "$tmp/log" 2>&1
	local rc=$?
	wait "$server"
	return $rc
}

# Instructions by object in every callgrind file of TOOL's N run, summed.
objects() { # TOOL N
	local f
	for f in "$tmp/$1.cg.$2".*; do
		callgrind_annotate --inclusive=no --threshold=100 "$f" 2> /dev/null
	done | awk '
		match($0, /^ *[0-9,]+ \( *[0-9.]+%\) +.*\[(.*)\]$/) {
			ir = $1; gsub(",", "", ir)
			obj = $0; sub(/.*\[/, "", obj); sub(/\]$/, "", obj)
			sub(/.*\//, "", obj); sub(/\.so.*/, "", obj)
			if (obj ~ /^(ferry_bench|rma_raw|ucx_perftest)$/) obj = "bench"
			else if (obj !~ /^(libferry|libfabric|libc)$/) obj = "other"
			sum[obj] += ir
		}
		END { for (o in sum) print o, sum[o] }'
}
# Calls by name in TOOL's strace summaries of the N run, summed.
calls() { # TOOL N
	cat "$tmp/$1.st.$2"* | awk '$NF != "total" && $1 ~ /^[0-9.]+$/ { n[$NF] += $4 }
		END { for (k in n) print k, n[k] }'
}
# Per operation: (the 2N run's count - the N run's) / N, for each key.
per_op() { # FILE_N FILE_2N
	awk -v n="$ops" 'NR == FNR { a[$1] = $2; next } { b[$1] = $2 }
		END { for (k in b) printf "%s %.2f\n", k, (b[k] - a[k]) / n }' "$1" "$2"
}

waiting_calls="poll ppoll select pselect6 epoll_wait epoll_pwait futex nanosleep clock_nanosleep sched_yield"
tools=(ferry raw)
$ucx && tools+=(ucx)
label() { case $1 in ferry) echo ferry ;; raw) echo rma_raw ;; ucx) echo ucx_perftest ;; esac; }
echo "opcount: $provider${domain:+ ($domain)} $op, $size-byte blocks, depth $depth; $ops and $((2 * ops)) operations"
# The total of an "objects" file.
total() { awk '{ s += $2 } END { printf "%.0f\n", s }' "$1"; }
# Runs TOOL with N operations under callgrind RUNS times and keeps, as
# $tmp/TOOL.obj.N, the run with the fewest instructions (the others waited
# longer), its total as fewest[TOOL.N]; spread[TOOL] is the most the runs
# of one length differed by.
declare -A fewest spread
count_least() { # TOOL N
	local tool=$1 n=$2 k least='' most=0 this
	for ((k = 1; k <= runs; k++)); do
		run "$tool" cg "$n"
		objects "$tool" "$n" > "$tmp/$tool.obj.$n.$k"
		rm -f "$tmp/$tool.cg.$n".*
		this=$(total "$tmp/$tool.obj.$n.$k")
		if [[ -z $least ]] || ((this < fewest[$tool.$n])); then
			least=$tmp/$tool.obj.$n.$k fewest[$tool.$n]=$this
		fi
		((this > most)) && most=$this
	done
	cp "$least" "$tmp/$tool.obj.$n"
	((most - fewest[$tool.$n] > ${spread[$tool]:-0})) && spread[$tool]=$((most - fewest[$tool.$n]))
	return 0
}
for tool in "${tools[@]}"; do
	for n in "$ops" $((2 * ops)); do
		echo "  running $(label "$tool"), $n operations (callgrind $runs times, then strace)" >&2
		count_least "$tool" "$n"
		run "$tool" st "$n"
		calls "$tool" "$n" > "$tmp/$tool.calls.$n"
	done
	per_op "$tmp/$tool.obj.$ops" "$tmp/$tool.obj.$((2 * ops))" > "$tmp/$tool.obj"
	per_op "$tmp/$tool.calls.$ops" "$tmp/$tool.calls.$((2 * ops))" > "$tmp/$tool.calls"
done

# A row of instructions by object: LABEL, then the FILE's counts.
object_row() { # LABEL FILE
	awk -v t="$1" '{ v[$1] = $2; s += $2 }
		function f(k) { return k in v ? sprintf("%.0f", v[k]) : "-" }
		END { printf "  %-20s %10.0f %10s %10s %10s %10s %10s\n", t, s, f("libferry"),
			f("libfabric"), f("libc"), f("bench"), f("other") }' "$2"
}
object_header() { # FIRST_COLUMN
	printf '  %-20s %10s %10s %10s %10s %10s %10s\n' "$1" total libferry libfabric libc bench other
}
if $verbose; then
	echo
	echo "Instructions of the kept runs (the least of $runs; the initiator's loop):"
	object_header "tool operations"
	for tool in "${tools[@]}"; do
		for n in "$ops" $((2 * ops)); do
			object_row "$(label "$tool") $n" "$tmp/$tool.obj.$n"
		done
	done
fi
echo
echo "Instructions per operation (the initiator's loop):"
object_header tool
for tool in "${tools[@]}"; do
	object_row "$(label "$tool")" "$tmp/$tool.obj"
done
echo
echo "System calls per operation (both processes; those made at least once per 20 operations;"
echo "after the bar, calls that wait, whose count depends on timing):"
for tool in "${tools[@]}"; do
	printf '  %-13s' "$(label "$tool")"
	sort -k2,2 -g -r "$tmp/$tool.calls" | awk -v waits="$waiting_calls" '
		BEGIN { split(waits, w, " "); for (i in w) waiting[w[i]] = 1 }
		$2 < 0.05 { next }
		$1 in waiting { wait_list = wait_list " " $1 " " $2; next }
		{ printf " %s %s", $1, $2 }
		END { printf " |%s\n", wait_list }'
done

# Waiting only adds instructions, so the least run of a length is the
# nearest to its operations' cost; but where the runs of one length spread
# by more than a quarter of what the N extra operations cost, or the
# longer run cost no more at all, waiting and not the operations made the
# difference.
unsteady=false
for tool in "${tools[@]}"; do
	short=${fewest[$tool.$ops]} long=${fewest[$tool.$((2 * ops))]}
	if ((long <= short || 4 * ${spread[$tool]:-0} > long - short)); then
		echo "$me: $(label "$tool")'s counts are unsteady: its least run of $((2 * ops))" \
			"operations cost $long instructions, of $ops $short, and runs of one length" \
			"differed by up to ${spread[$tool]:-0}; its loop counted the time it waited, which a busy" \
			"machine stretches. Run it on an idle machine, or with more -r." >&2
		unsteady=true
	fi
done
$unsteady && exit 3
exit 0
