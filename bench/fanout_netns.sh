#!/usr/bin/env bash
# fanout_netns.sh: one source and N receivers as hosts of their own
# (test/rig.sh: a network namespace, a private /dev/shm and a hostname
# each), joined to a bridge by veth pairs whose two ends are rate-limited
# with tc tbf (each host's upload and download), moving
# SIZE bytes with examples/fanout three ways: every copy from the source
# one after the other (sequential), all at once (parallel), and
# ferry_fanout (a chain or tree of the receivers, each forwarding).
# Every receiver verifies every byte.
#
#   bench/fanout_netns.sh [-s SIZE] [-r RATE] [-n "1 2 4 8"]
#                         [-m "sequential parallel fanout"] [-R RUNS]
#                         [-c CHUNK] [-k] [-x EXAMPLES_DIR] [-q]
#
#   -s SIZE   bytes per receiver (default 256M; K/M/G)
#   -r RATE   each host's link, both ways, as tc says it (default 1gbit)
#   -n LIST   receiver counts (default "1 2 4 8")
#   -m LIST   modes (default "sequential parallel fanout")
#   -R RUNS   runs of each case; the median is reported (default 1)
#   -c CHUNK  the fan-out's chunk (default: ferry picks)
#   -k        also the failure case: a chain of 2 receivers whose first is
#             killed (SIGKILL) while the data flows; the second must still
#             get everything, and the source must name the first
#   -x DIR    the examples' build directory (default build/examples)
#   -q        no table, only "fanout_netns: OK" or what failed (tests)
#
# Prints a table of seconds per case and the ratio to the N = 1 time of
# the same mode, then the same as a bar plot.  Needs root, iproute2 and tc; exits 77 without them,
# saying which is missing.
set -uo pipefail

me=fanout_netns.sh
src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
size=256M rate=1gbit counts="1 2 4 8" modes="sequential parallel fanout"
runs=1 kill_case=0 quiet=0 ex=$src_dir/../build/examples chunk=()
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while getopts s:r:n:m:R:c:kx:qh opt; do
	case $opt in
	s) size=$OPTARG ;;
	r) rate=$OPTARG ;;
	n) counts=$OPTARG ;;
	m) modes=$OPTARG ;;
	R) runs=$OPTARG ;;
	c) chunk=(--chunk "$OPTARG") ;;
	k) kill_case=1 ;;
	x) ex=$OPTARG ;;
	q) quiet=1 ;;
	*) usage ;;
	esac
done

bin=$ex/fanout
[ -x "$bin" ] || { echo "$me: $bin is missing: build the examples" >&2; exit 2; }
# libtool's wrapper runs the program against the build tree's library.
command -v pkill >/dev/null || { echo "$me: SKIP: needs pkill (procps)" >&2; exit 77; }

max=0
for n in $counts; do [ "$n" -gt "$max" ] && max=$n; done
[ "$kill_case" = 1 ] && [ "$max" -lt 2 ] && max=2
id=$$
# The hosts (test/rig.sh): host 1 is the source, host i + 1 receiver i,
# each with a private /dev/shm, on links of the rate asked for.
. "$src_dir/../test/rig.sh"
rig_up $((max + 1)) "$rate"
case $? in
0) ;;
77) exit 77 ;;
*) echo "$me: could not make the hosts (above)" >&2; exit 1 ;;
esac
tmp=$rig_dir
trap 'exit 130' INT TERM

# On receiver i's host (0: the source's), with tcp on its link.
on() {
	local i=$1; shift
	rig_on $((i + 1)) env FERRY_PROVIDER="tcp;ofi_rxm" \
		FERRY_DOMAIN=eth0 FERRY_OOB_TOKEN="fanout-netns-$id" "$@"
}
addr() { rig_addr $(($1 + 1)); }

# Waits until receiver i published its region (or ended); 1 if it ended.
published() {
	local i=$1 pid=$2 tries=0
	until grep -q published "$tmp/recv$i"; do
		kill -0 "$pid" 2>/dev/null || return 1
		tries=$((tries + 1))
		[ "$tries" -lt 3000 ] || return 1
		sleep 0.01
	done
}

failures=0
fail() { echo "$me: FAIL: $*" >&2; failures=$((failures + 1)); }

# Runs one case; prints the sender's seconds, or nothing on failure.
# kill_after: SIGKILL receiver 1 that many seconds after the send began.
run_case() {
	local n=$1 mode=$2 kill_after=${3:-} pids=() where=() i secs
	for ((i = 1; i <= n; i++)); do
		on "$i" "$bin" recv "$(addr "$i"):18520" --size "$size" \
			--timeout 300 >"$tmp/recv$i" 2>&1 &
		pids+=($!)
		where+=("$(addr "$i"):18520")
	done
	for ((i = 1; i <= n; i++)); do
		if ! published "$i" "${pids[i - 1]}"; then
			kill "${pids[@]}" 2>/dev/null
			wait "${pids[@]}" 2>/dev/null
			fail "$mode to $n: receiver $i: $(tail -n 2 "$tmp/recv$i")"
			return
		fi
	done
	# Emptied here, not only by the sender's redirection: the kill case
	# below waits for "transfer starts" in it, and the previous case's
	# sender wrote that too; read before the new sender's shell opened
	# the file, it killed receiver 1 before the sender reached it.
	: >"$tmp/send"
	on 0 "$bin" send "${where[@]}" --size "$size" --mode "$mode" \
		"${chunk[@]}" --timeout 300 >"$tmp/send" 2>&1 &
	local sender=$!
	if [ -n "$kill_after" ]; then
		# Once the data flows (a slow build takes a while to connect).
		until grep -q "transfer starts" "$tmp/send"; do
			kill -0 "$sender" 2>/dev/null || break
			sleep 0.01
		done
		sleep "$kill_after"
		# A receiver that ended by itself says why (its log is not
		# checked below, since it is the one killed).
		kill -0 "${pids[0]}" 2>/dev/null ||
			fail "kill: receiver 1 ended before it was killed: $(tail -n 5 "$tmp/recv1")"
		# The receiver itself, not the shell that started it.
		pkill -9 -f "fanout recv ${where[0]} " ||
			fail "kill: no receiver at ${where[0]} to kill"
	fi
	wait "$sender"
	local send_rc=$?
	# The receivers end soon after the sender; one that does not is
	# stopped rather than waited on for its whole timeout.
	local grace=$((SECONDS + 60))
	for ((i = 1; i <= n; i++)); do
		while kill -0 "${pids[i - 1]}" 2>/dev/null && [ "$SECONDS" -lt "$grace" ]; do
			sleep 0.1
		done
		kill "${pids[i - 1]}" 2>/dev/null
		wait "${pids[i - 1]}"
		local rc=$?
		[ -n "$kill_after" ] && [ "$i" = 1 ] && continue
		[ "$rc" = 0 ] && grep -q "bytes verified" "$tmp/recv$i" ||
			fail "$mode to $n: receiver $i: $(tail -n 2 "$tmp/recv$i")"
	done
	secs=$(sed -n 's/.* in \([0-9.]*\) s:.*/\1/p' "$tmp/send")
	if [ -n "$kill_after" ]; then
		grep -q "receiver 0 did not get the data" "$tmp/send" ||
			fail "kill: the source did not name receiver 0: $(tail -n 3 "$tmp/send")"
		return
	fi
	if [ "$send_rc" != 0 ] || [ -z "$secs" ]; then
		fail "$mode to $n: the sender: $(tail -n 3 "$tmp/send")"
		return
	fi
	echo "$secs"
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }

declare -A t
for mode in $modes; do
	for n in $counts; do
		all=
		for ((r = 0; r < runs; r++)); do
			all="$all $(run_case "$n" "$mode")"
		done
		t[$mode,$n]=$(echo "$all" | median)
		[ "$quiet" = 1 ] || echo "$me: $mode to $n: ${t[$mode,$n]:-failed} s (runs:$all)" >&2
	done
done

if [ "$kill_case" = 1 ]; then
	# The first of a chain of two dies a quarter into the transfer.
	one=${t[fanout,1]:-1}
	run_case 2 fanout "$(awk -v s="$one" 'BEGIN {printf "%.2f", s / 4}')" >/dev/null
	[ "$quiet" = 1 ] || {
		echo "$me: kill case: receiver 1 of a chain of 2 killed; receiver 2:"
		sed 's/^/  /' "$tmp/recv2"
		echo "$me: the source said:"
		sed 's/^/  /' "$tmp/send"
	}
fi

if [ "$quiet" = 0 ]; then
	printf '\n| %s to N receivers, %s links |' "$size" "$rate"
	for n in $counts; do printf ' N = %s |' "$n"; done
	printf '\n|---|'
	for n in $counts; do printf -- '---|'; done
	printf '\n'
	for mode in $modes; do
		printf '| %s, s (x N = 1) |' "$mode"
		for n in $counts; do
			v=${t[$mode,$n]:-} base=${t[$mode,${counts%% *}]:-}
			if [ -n "$v" ] && [ -n "$base" ]; then
				printf ' %s (%s) |' "$v" "$(awk -v a="$v" -v b="$base" 'BEGIN {printf "%.2f", a / b}')"
			else
				printf ' failed |'
			fi
		done
		printf '\n'
	done
fi
if [ "$quiet" = 0 ]; then
	# The same as bars: one character per 0.5 s.
	printf '\nseconds per transfer (one # per 0.5 s)\n'
	for n in $counts; do
		for mode in $modes; do
			v=${t[$mode,$n]:-}
			[ -n "$v" ] || continue
			printf 'N = %-2s %-10s %7.2f %s\n' "$n" "$mode" "$v" \
				"$(awk -v v="$v" 'BEGIN {s = ""; for (i = 0; i < v * 2; i++) s = s "#"; print s}')"
		done
	done
fi
[ "$failures" = 0 ] || { echo "$me: $failures failures" >&2; exit 1; }
echo "fanout_netns: OK"
