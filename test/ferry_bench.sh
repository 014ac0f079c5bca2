#!/bin/sh
# ferry_bench as a person runs it, briefly: the checks made before anything
# is allocated (exit 2 with a sentence naming the flags), and short loopback
# runs over tcp and shm whose --validate / --notify checks must say OK, plus
# the self-test of the checker (a flipped byte must fail the run).  Run by
# `make check`; it guards the program's parts against drifting apart.
# Then bench/rma_raw, the raw-libfabric floor compare.sh sets beside
# ferry_bench: it refuses bad options and answers with its result line
# (ping-pong and -b stream), so compare.sh cannot lose that reference
# unnoticed.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

prog=$abs_top_builddir/bench/ferry_bench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

# expect CODE WORDS ARGS...: $prog ARGS exits CODE and prints WORDS.
expect() {
	code=$1 words=$2
	shift 2
	rc=0
	timeout 120 "$prog" "$@" >"$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -eq "$code" ] && grep -F -- "$words" "$tmp/out" >/dev/null; then
		echo "PASS: ${prog##*/} $* (exit $rc, \"$words\")"
	else
		cat "$tmp/out"
		echo "FAIL: ${prog##*/} $* (exit $rc; expected $code and \"$words\")"
		status=1
	fi
}

short="--duration 0.3 --warmup 0.1"
expect 2 "does not fit in --buffer-size 1 MiB" --batch-size 4 --buffer-size 1M
expect 2 "overflows 64 bits" --batch-size 65536 --block-size 1024G \
	--threads 64 --inflight 1024
expect 0 "result       OK" --provider "tcp;ofi_rxm" --validate --notify $short
expect 0 "result       OK" --provider shm --op read --validate --threads 2 \
	--batch-size 4 --block-size 64K $short
expect 0 "pings" --provider shm --pingpong $short
expect 0 '"ok":true}' --provider shm --sweep 4K:16K --json $short
FERRY_BENCH_CORRUPT=100 expect 1 "FAILED" --provider shm --validate $short
# --metrics: both sides' metrics in one file, each sample with its side;
# at least what the run reported moving (the metrics count the warmup
# too), and valid Prometheus text where promtool is installed.
expect 0 '"ok":true}' --provider shm --block-size 64K --json \
	--metrics "$tmp/run.prom" $short
moved=$(sed -n 's/.*"bytes":\([0-9]*\).*/\1/p' "$tmp/out" | head -n 1)
counted=$(awk '/^ferry_bytes_total[{]side="initiator".*op="write"/ { s += $NF }
	END { printf "%.0f", s }' "$tmp/run.prom")
if grep -q '^ferry_requests_total{side="target",' "$tmp/run.prom" &&
	grep -q '^ferry_info{side="initiator",' "$tmp/run.prom" &&
	[ -n "$moved" ] && [ "$counted" -ge "$moved" ] &&
	[ "$(grep -c '^# TYPE ferry_bytes_total ' "$tmp/run.prom")" -eq 1 ] &&
	{ ! command -v promtool >/dev/null || promtool check metrics <"$tmp/run.prom"; }; then
	echo "PASS: --metrics: both sides, $counted bytes counted for $moved moved"
else
	cat "$tmp/run.prom"
	echo "FAIL: --metrics: sides, families or counts wrong ($counted counted, $moved moved)"
	status=1
fi
# --mem cuda on the simulated device (this machine has no GPU; with one,
# FERRY_SIM_DEVICES still selects the simulation): staged GPU memory on
# both sides, every byte checked on the device.
FERRY_SIM_DEVICES=1 expect 0 "result       OK" --mem cuda --provider "tcp;ofi_rxm" \
	--validate --notify --block-size 1M $short
FERRY_SIM_DEVICES=2 expect 0 "result       OK" --mem cuda:1 --provider shm \
	--op read --validate --block-size 256K --batch-size 2 $short
FERRY_SIM_DEVICES=1 expect 1 "device 3 does not exist" --mem cuda:3 $short
# --same-block: a buffer of one block holds every request in flight, and
# the run says so; nothing to validate then.
expect 0 "(every request the same blocks)" --provider shm --same-block \
	--block-size 64K --inflight 8 --buffer-size 64K $short
expect 2 "--same-block does not go with --validate" --same-block --validate
expect 2 "--same-block does not go with --memcpy" --memcpy --same-block
expect 2 "--same-block does not go with --pingpong" --pingpong --same-block
# --regions: a request's blocks into two of the target's regions, every
# byte checked; a cut that splits blocks, or a mode without a stream, is
# refused.
expect 0 "the rest untouched: OK" --provider shm --regions 2 --block-size 4K \
	--batch-size 16 --inflight 1 --descending --validate $short
expect 2 "regions that do not hold whole blocks" --regions 3 --block-size 4K \
	--batch-size 4 --inflight 1
expect 2 "--regions does not go with --pingpong" --pingpong --regions 2
# Two processes cut their buffers differently: the initiator sees the
# target's regions hold no whole blocks of its size and says what to give.
port=$((20000 + $$ % 10000))
FERRY_OOB_TOKEN=ferry-bench-test timeout 60 "$prog" --target --port "$port" \
	--provider shm --regions 2 --buffer-size 24K --block-size 4K \
	>"$tmp/target" 2>&1 &
target=$!
sleep 1
FERRY_OOB_TOKEN=ferry-bench-test expect 1 \
	"are 12 KiB each, not whole blocks of 8 KiB: give both sides the same --buffer-size" \
	--initiator "127.0.0.1:$port" --provider shm --regions 2 \
	--buffer-size 16K --block-size 8K --batch-size 2 --inflight 1 $short
kill "$target" 2>/dev/null || :
wait "$target" 2>/dev/null || :
# --fanout: three receiver processes, a chain and a tree; every receiver
# checks every byte; what it cannot do is refused.
expect 0 "to 3 receivers" --fanout 3 --block-size 3M --fanout-chunk 256K \
	--fanout-degree 1 --provider "tcp;ofi_rxm" --domain lo $short
expect 0 "every receiver verified" --fanout 3 --block-size 1M \
	--fanout-degree 2 --provider shm $short
FERRY_BENCH_CORRUPT=100 expect 1 "does not hold every byte" --fanout 2 \
	--block-size 64K --provider shm $short
expect 2 "drop --op read" --fanout 2 --op read
expect 2 "go with --fanout N" --fanout-chunk 1M
expect 2 "does not fit in --buffer-size 64 KiB" --block-size 64K \
	--inflight 8 --buffer-size 64K
# --target-polls: the target drives its own progress, and the data lands.
expect 0 "result       OK" --provider "tcp;ofi_rxm" --target-polls \
	--validate $short
expect 2 "--target-mem is for --loopback" --target --target-mem host
# --initiator-thread: the initiator's context runs a progress thread while
# its workers test; writes and reads land whole, the run says so; the
# modes it does not fit are refused.
for op in write read; do
	expect 0 "result       OK" --provider shm --initiator-thread --op "$op" \
		--validate --block-size 4K --inflight 16 $short
done
expect 0 "(the initiator runs a progress thread)" --provider "tcp;ofi_rxm" \
	--initiator-thread --validate $short
expect 0 '"initiator_thread":true' --provider shm --initiator-thread --json \
	$short
# --event-loop: the worker sleeps on ferry_context_fd between passes.
for provider in shm "tcp;ofi_rxm"; do
	expect 0 "and sleeps on ferry_context_fd" --provider "$provider" \
		--initiator-thread --event-loop --validate --block-size 4K \
		--inflight 4 $short
done
expect 0 '"event_loop":true' --provider shm --initiator-thread --event-loop \
	--json $short
expect 2 "--event-loop goes with --initiator-thread" --event-loop
expect 2 "--event-loop waits in one thread" --initiator-thread --event-loop \
	--threads 2
expect 2 "--initiator-thread does not go with --pingpong" --pingpong \
	--initiator-thread
expect 2 "--initiator-thread does not go with --target" --target \
	--initiator-thread
# --idle-peers: peers that carry nothing beside the busy one; the data
# still lands, and the run says they were there.
expect 0 "(and 200 idle peers)" --provider shm --idle-peers 200 \
	--block-size 4K --inflight 32 --validate $short
expect 2 "--idle-peers are the initiator's" --target --idle-peers 1
# --pin: the two sides on CPUs 0 and 1, where this process may use both.
if taskset -c 0,1 true 2>/dev/null; then
	expect 0 "(initiator on CPU 0, target on CPU 1)" --provider shm --pin \
		--validate $short
else
	echo "not run: --pin needs CPUs 0 and 1 (taskset -c 0,1 failed)"
fi
expect 2 "--pin is for --loopback" --target --pin
# Latency samples: every request with --iterations, one in 8 with
# --duration (give or take one per lane in flight).
expect 0 "(200 samples of 200)" --provider shm --iterations 200 --inflight 4
expect 0 "samples of" --provider shm --inflight 4 --block-size 4K $short
samples=$(sed -n 's/.*(\([0-9]*\) samples of \([0-9]*\)).*/\1 \2/p' "$tmp/out")
if echo "$samples" | awk '{ exit !($1 > 0 && $2 >= 7 * $1 - 32 && $2 <= 8 * $1 + 32) }'; then
	echo "PASS: one request in 8 timed with --duration ($samples)"
else
	echo "FAIL: with --duration one request in 8 should be timed: \"$samples\" (samples, requests)"
	status=1
fi
expect 2 "--target-mem cuda: x: not a whole number" --target-mem cuda:x
# --idle: the target at rest, then writes after gaps and warm ones.  The
# numbers are the benchmark's, never checked here: only that each field is
# there and is a number, on tcp and shm, and that the target saw every
# notification.
idle="--idle 0.5 --idle-gaps 3 --gap-length 0.2 --iterations 200 --warmup 0.1"
num='-?[0-9][0-9.]*([eE][-+]?[0-9]+)?'
for provider in "tcp;ofi_rxm" shm; do
	expect 0 '"ok":true}' --provider "$provider" $idle --json
	missing=
	for key in seconds target_cpu_s target_cpu_per_idle_s \
		target_wakeups_per_s target_preemptions_per_s gap_s p50 p99 \
		first_over_warm_p50; do
		grep -Eq "\"$key\":$num[,}]" "$tmp/out" || missing="$missing $key"
	done
	grep -Eq '"first_write_us":\{"p50":[^}]*"samples":3\}' "$tmp/out" ||
		missing="$missing first_write_us.samples"
	grep -Eq '"warm_write_us":\{"p50":[^}]*"samples":200\}' "$tmp/out" ||
		missing="$missing warm_write_us.samples"
	grep -Fq '"sent":' "$tmp/out" || missing="$missing notifications"
	if [ -z "$missing" ]; then
		echo "PASS: --idle --json over $provider has every field, numbers"
	else
		echo "FAIL: --idle --json over $provider: missing or not a number:$missing"
		status=1
	fi
done
expect 0 "(counter and queue agree): OK" --provider shm $idle
line="the target used $num CPU-s per idle s \($num % of a core\), $num wake-ups/s; first write after 0.2 s idle: p50 $num [nmu]?s, p99 $num [nmu]?s; warm: p50 $num [nmu]?s \($num x\)"
if grep -Eq "$line" "$tmp/out"; then
	echo "PASS: --idle says what the target cost at rest and what writes took"
else
	echo "FAIL: --idle's summary line is not there or not numbers (/$line/)"
	status=1
fi
expect 2 "--idle, --idle-gaps and --gap-length are the initiator's" \
	--target --idle 1
# --idle with --target-polls: the target's thread polls through the window
# instead of sleeping, so the window costs it CPU (a whole core when
# nothing else runs; more than a fifth of one even on a loaded machine).
expect 0 '"ok":true}' --provider shm $idle --target-polls --json
cpu=$(sed -n 's/.*"target_cpu_per_idle_s":\([0-9.]*\).*/\1/p' "$tmp/out")
if [ -n "$cpu" ] && awk -v c="$cpu" 'BEGIN { exit !(c > 0.2) }'; then
	echo "PASS: --idle --target-polls: the target polled through the window ($cpu CPU-s per s)"
else
	echo "FAIL: --idle --target-polls: the target's CPU per idle second is \"$cpu\", not above 0.2: it did not poll"
	status=1
fi
expect 2 "--idle does not go with --pingpong" --idle 1 --pingpong
expect 2 "--idle does not go with --inflight" --idle 1 --inflight 4
expect 2 "--idle-gaps and --gap-length go with --idle SECONDS" --idle-gaps 3
expect 2 "--idle: 0.05 s is too short" --idle 0.05

# --call-times: a request's time split into ferry's calls and the rest.
# The split is the benchmark's; checked here is that every part is there,
# above zero, and that the parts do not add up to more than the whole (a
# clock read at the wrong rate, or calls counted twice, would).
# parts_fit FILE: the call_ns object of FILE's JSON holds sane numbers.
parts_fit() {
	sed -n 's/.*"call_ns":{\([^}]*\)}.*/\1/p' "$1" | tr ',' '\n' |
		sed 's/"//g; s/:/ /' | awk '
		{ v[$1] = $2 + 0; n++ }
		END {
			if (n != 6) exit 1
			if (v["post"] <= 0 || v["test"] <= 0 || v["close"] <= 0) exit 1
			if (v["running_tests"] < 0) exit 1
			if (v["post"] + v["test"] + v["close"] > 1.1 * v["request"]) exit 1
		}'
}
for op in write read; do
	expect 0 '"ok":true}' --provider shm --op "$op" --block-size 4K \
		--inflight 8 --call-times --json $short
	if parts_fit "$tmp/out"; then
		echo "PASS: --call-times --op $op: post, test and close above 0, within the request's time"
	else
		echo "FAIL: --call-times --op $op: call_ns missing, not above 0, or its parts above the whole"
		status=1
	fi
done
expect 0 "per request of" --provider shm --op read --call-times $short
grep -Eq "calls +per request of $num [nmu]?s: ferry_read $num [nmu]?s, ferry_req_test $num [nmu]?s \($num tests found it running, ($num [nmu]?s|-) each\), ferry_req_close $num [nmu]?s; the rest -?$num [nmu]?s" "$tmp/out" &&
	echo "PASS: --call-times names ferry_read's share and the rest" || {
	echo "FAIL: --call-times's line is not there or not numbers"
	status=1
}
expect 2 "--call-times does not go with --pingpong" --call-times --pingpong
expect 2 "--call-times does not go with --sweep" --call-times --sweep 4K:8K
expect 2 "--call-times does not go with --target" --target --call-times

# The progress line of a sweep: on a terminal (script(1) gives the run a
# pseudo-terminal) a line redrawn in place with '\r' per block size, and
# in a log nothing of it.
cr=$(printf '\r')
# on_tty OUT CMD...: CMD on a pseudo-terminal, everything it wrote there
# into OUT; returns its exit status.
on_tty() {
	out=$1
	shift
	cmd=
	for a in "$@"; do
		cmd="$cmd '$a'"
	done
	timeout 300 script -qec "$cmd" /dev/null </dev/null >"$out" 2>&1
}
sweep="--provider shm --sweep 4K:8K --duration 0.2 --warmup 0.3"
if command -v script >/dev/null 2>&1; then
	rc=0
	on_tty "$tmp/tty" "$prog" $sweep || rc=$?
	if [ "$rc" -eq 0 ] && grep -F "${cr}sweep 1/2: 4K" "$tmp/tty" >/dev/null &&
		grep -F "${cr}sweep 2/2: 8K" "$tmp/tty" >/dev/null &&
		grep -E "$cr +8 KiB +[0-9.]+ .* OK" "$tmp/tty" >/dev/null; then
		echo "PASS: --sweep on a terminal: CR sweep 1/2: 4K, CR sweep 2/2: 8K, then each row from the margin"
	else
		cat -A "$tmp/tty"
		echo "FAIL: --sweep on a terminal (exit $rc): no line redrawn after a CR per size, or a row not at the margin"
		status=1
	fi
else
	echo "not run: the progress line on a terminal (no script(1): apt-get install bsdutils)"
fi
expect 0 "8 KiB" $sweep
if grep -F "$cr" "$tmp/out" >/dev/null || grep -F "sweep 1/2" "$tmp/out" >/dev/null; then
	cat -A "$tmp/out"
	echo "FAIL: --sweep into a file: the progress line is there"
	status=1
else
	echo "PASS: --sweep into a file: no progress line"
fi

# compare.sh's progress line: which row of how many, the time so far and
# left, on a terminal only; a log keeps its line of dots per row.
compare=${abs_top_srcdir:-$(dirname "$0")/..}/bench/compare.sh
cmp_args="-n 1 -t 1 -c batch -b $prog"
if command -v script >/dev/null 2>&1; then
	rc=0
	on_tty "$tmp/cmp-tty" bash "$compare" $cmp_args -o "$tmp/cmp1.txt" || rc=$?
	if [ "$rc" -eq 0 ] &&
		grep -E "${cr}compare.sh: row 1/2 \([0-9]+ s, about [0-9]+ s left\): tcp 4 KiB batch 64 vs 1, run 1/1" "$tmp/cmp-tty" >/dev/null &&
		grep -E "${cr}compare.sh: row 2/2 \(.*\): shm 4 KiB batch 64 vs 1" "$tmp/cmp-tty" >/dev/null &&
		grep -E "${cr}compare.sh: shm 4 KiB batch 64 vs 1 +\.$cr?\$" "$tmp/cmp-tty" >/dev/null; then
		echo "PASS: compare.sh on a terminal: CR compare.sh: row 1/2 ..., then the row's line"
	else
		cat -A "$tmp/cmp-tty"
		echo "FAIL: compare.sh on a terminal (exit $rc): no progress line with the row of how many"
		status=1
	fi
else
	echo "not run: compare.sh on a terminal (no script(1): apt-get install bsdutils)"
fi
rc=0
bash "$compare" $cmp_args -o "$tmp/cmp2.txt" >"$tmp/cmp-log" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && ! grep -F "$cr" "$tmp/cmp-log" >/dev/null &&
	grep -E "^compare.sh: tcp 4 KiB batch 64 vs 1 +\.\$" "$tmp/cmp-log" >/dev/null; then
	echo "PASS: compare.sh into a file: its rows' lines, no progress line"
else
	cat -A "$tmp/cmp-log"
	echo "FAIL: compare.sh into a file (exit $rc): a CR in the log, or no row line"
	status=1
fi

prog=$abs_top_builddir/bench/rma_raw
expect 2 "usage: rma_raw -p PROVIDER" -s 8
expect 2 "-s 0 is not a whole number in range" -p shm -s 0
expect 2 "-n x is not a whole number in range" -p shm -n x
expect 0 "8 2000 " -p "tcp;ofi_rxm" -n 2000 -w 100
if taskset -c 0,1 true 2>/dev/null; then
	expect 0 "8 2000 " -p shm -n 2000 -w 100 -P
fi
expect 0 "4096 2000 " -p shm -s 4096 -n 2000 -w 100
expect 0 "8 2000 " -p shm -t -n 2000 -w 100
expect 0 "1048576 200 " -p "tcp;ofi_rxm" -D lo -b -s 1048576 -n 200 -w 10
expect 0 "1048576 200 " -p shm -b -s 1048576 -o 65536 -d 2 -n 200 -w 10
expect 2 "-d 65 is not a whole number in range" -p shm -b -d 65
expect 2 "-C shape or time the streams" -p shm -C
# -G: first writes after gaps and warm ones, p50 and p99 of each, in us.
# gaps_sane: the line has 3 gaps and four positive numbers, no p99 below
# its p50.
gaps_sane() {
	awk '$1 == 8 && $2 == 3 && NF == 6 && $3 > 0 && $5 > 0 &&
		$4 >= $3 && $6 >= $5 { ok = 1 } END { exit !ok }' "$tmp/out"
}
for args in "-p shm" "-p tcp;ofi_rxm -D lo -f"; do
	# shellcheck disable=SC2086 # the words of args are options
	expect 0 "8 3 " $args -G 3 -g 0.1 -n 200 -w 10
	if gaps_sane; then
		echo "PASS: rma_raw $args -G: first and warm latencies, p99 >= p50"
	else
		echo "FAIL: rma_raw $args -G: not \"8 3\" and four sane latencies"
		status=1
	fi
done
expect 2 "-b, -W and -G are kinds of run" -p shm -G 3 -b
expect 2 "-G times single writes" -p shm -G 3 -T 1
expect 2 "-g is the length of -G's gaps" -p shm -g 0.5
expect 2 "-G 0 is not a whole number in range" -p shm -G 0
expect 2 "-g 0 is not a number of seconds in range" -p shm -G 1 -g 0
# -C: an op's time split between posting, reading the CQ and the rest;
# the parts are above zero and fit in the whole.
expect 0 "4096 2000 " -p shm -b -s 4096 -d 8 -n 2000 -w 100 -C
if sed -n 's/^calls: per op of \([0-9.]*\) ns: posting \([0-9.]*\) ns, fi_cq_read \([0-9.]*\) ns (\([0-9.]*\) reads per op, \([0-9.]*\) ns each), the rest \(-\{0,1\}[0-9.]*\) ns$/\1 \2 \3 \4/p' "$tmp/out" |
	awk 'NF == 4 && $2 > 0 && $3 > 0 && $4 > 0 && $2 + $3 <= 1.1 * $1 { ok = 1 } END { exit !ok }'; then
	echo "PASS: rma_raw -C: posting and fi_cq_read above 0, within an op's time"
else
	echo "FAIL: rma_raw -C: no calls line, or its parts are not above 0 or above the whole"
	status=1
fi
expect 0 "16384 200 " -p "tcp;ofi_rxm" -D lo -b -s 16384 -f -n 200 -w 10
expect 1 "fi_cq_open with a file descriptor (-f) failed" -p shm -b -f -n 10
expect 1 "fi_getinfo failed" -p no-such-provider -n 10
exit $status
