#!/bin/sh
# tools/ferry_stat on snapshots this test writes as libferry writes them
# (FERRY_TELEMETRY): two of live processes (sleeps it starts), one whose
# pid now names another process (its start time differs), one of a
# process gone, and two malformed.  --list tells live from stale; --once
# prints both live processes' peers and rails with the rates between two
# versions of their files (rewritten during its interval); --prometheus
# serves one text that promtool accepts, with both live pids and no stale
# one; --clean removes the stale; the errors name what is wrong.  Then, as
# libferry writes snapshots itself, two real processes (a ferry_bench
# loopback run) show live, and their snapshots go when they end.  Run by
# `make check`.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"

tool=$abs_top_builddir/tools/ferry_stat
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-stat.XXXXXX")
dir=$tmp/snapshots
mkdir "$dir"
# The processes this test starts, killed at the end.
started=""
cleanup() {
	for p in $started; do
		kill "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

pass() {
	echo "PASS: $*"
}

# has FILE WORDS WHAT: FILE holds the line WORDS (fixed string).
has() {
	if grep -F -- "$2" "$1" >/dev/null; then
		pass "$3"
	else
		cat "$1"
		fail "$3: no \"$2\""
	fi
}

# lacks FILE WORDS WHAT: FILE does not hold WORDS.
lacks() {
	if grep -F -- "$2" "$1" >/dev/null; then
		cat "$1"
		fail "$3: \"$2\" is there"
	else
		pass "$3"
	fi
}

# start_time PID: field 22 of /proc/PID/stat.  The command name (field 2)
# of the processes asked about here holds no space.
start_time() {
	awk '{ print $22 }' "/proc/$1/stat"
}

# snapshot PID STARTTIME CONTEXT WRITTEN K PROGRAM: DIR/ferry-PID-CONTEXT.prom
# as libferry writes it: a temporary file renamed into place.  Its
# counters are K times those of K=1.
snapshot() {
	pid=$1 start=$2 ctx=$3 written=$4 k=$5 prog=$6
	peer="h-$pid at fi_sockaddr_in://10.0.0.2:40123"
	f=$dir/ferry-$pid-$ctx.prom
	cat >"$dir/.tmp-$pid-$ctx" <<EOF
# ferry telemetry 1
# pid $pid
# starttime $start
# context $ctx
# written $written
# program $prog
# HELP ferry_info The context: its provider, fabric and domain, and ferry's version.
# TYPE ferry_info gauge
ferry_info{provider="tcp;ofi_rxm",fabric="127.0.0.0/8",domain="lo",version="1.0.0"} 1
# HELP ferry_bytes_total Bytes handed to the provider in writes and reads.
# TYPE ferry_bytes_total counter
ferry_bytes_total{peer="$peer",rail="0",domain="lo",op="write"} $((k * 1000000))
ferry_bytes_total{peer="$peer",rail="0",domain="lo",op="read"} $((k * 2000))
ferry_bytes_total{peer="$peer",rail="1",domain="lo",op="write"} $((k * 500000))
ferry_bytes_total{peer="$peer",rail="1",domain="lo",op="read"} 0
ferry_bytes_total{peer="odd \"peer\" \\\\ of $pid",rail="0",domain="lo",op="write"} $k
# HELP ferry_operations_total Writes and reads handed to the provider.
# TYPE ferry_operations_total counter
ferry_operations_total{peer="$peer",rail="0",domain="lo",op="write"} $((k * 10))
ferry_operations_total{peer="$peer",rail="0",domain="lo",op="read"} $k
ferry_operations_total{peer="$peer",rail="1",domain="lo",op="write"} $((k * 5))
ferry_operations_total{peer="$peer",rail="1",domain="lo",op="read"} 0
# HELP ferry_requests_total Requests ended, by kind and outcome.
# TYPE ferry_requests_total counter
ferry_requests_total{peer="$peer",op="write",outcome="ok"} $((k * 100))
ferry_requests_total{peer="$peer",op="write",outcome="timeout"} $k
ferry_requests_total{peer="$peer",op="read",outcome="ok"} $((k * 2))
# HELP ferry_requests_in_flight Requests taken and not yet ended.
# TYPE ferry_requests_in_flight gauge
ferry_requests_in_flight 3
# HELP ferry_request_duration_seconds Time from taking a request to its end.
# TYPE ferry_request_duration_seconds histogram
ferry_request_duration_seconds_bucket{op="write",le="1e-05"} 0
ferry_request_duration_seconds_bucket{op="write",le="0.0001"} $((k * 50))
ferry_request_duration_seconds_bucket{op="write",le="0.001"} $((k * 100))
ferry_request_duration_seconds_bucket{op="write",le="+Inf"} $((k * 100))
ferry_request_duration_seconds_sum{op="write"} $((k * 3)).5e-03
ferry_request_duration_seconds_count{op="write"} $((k * 100))
ferry_request_duration_seconds_bucket{op="read",le="1e-05"} 0
ferry_request_duration_seconds_bucket{op="read",le="0.0001"} 0
ferry_request_duration_seconds_bucket{op="read",le="0.001"} $((k * 2))
ferry_request_duration_seconds_bucket{op="read",le="+Inf"} $((k * 2))
ferry_request_duration_seconds_sum{op="read"} $((k * 1)).0e-03
ferry_request_duration_seconds_count{op="read"} $((k * 2))
# HELP ferry_peer_up 1 while the peer answers, 0 while connecting, unreachable or dead.
# TYPE ferry_peer_up gauge
ferry_peer_up{peer="$peer"} 1
# HELP ferry_registration_cache_hits_total Lookups of the registration cache that found the region.
# TYPE ferry_registration_cache_hits_total counter
ferry_registration_cache_hits_total $((k * 7))
EOF
	mv "$dir/.tmp-$pid-$ctx" "$f"
}

# Live until the end (cleanup kills them), however slow the machine: the
# waits below may each take up to a minute on a loaded one.
sleep 600 &
live1=$!
sleep 600 &
live2=$!
sh -c 'exit 0' &
gone=$!
wait "$gone" || true
started="$live1 $live2"
start1=$(start_time "$live1")
start2=$(start_time "$live2")
now=$(date +%s)

# All written as version 1 (K=1); version 2 is written 2 s later (K=2).
write_all() {
	snapshot "$live1" "$start1" 1 "$(($1 + now)).250" "$2" /usr/bin/app-one
	snapshot "$live2" "$start2" 1 "$(($1 + now)).250" "$2" /usr/bin/app-two
}
write_all 0 1
# Stale: live2's pid with another start time (the pid reused), and a
# process that is gone.
snapshot "$live2" "$((start2 + 1))" 2 "$now.0" 1 /usr/bin/app-reused
snapshot "$gone" 12345 1 "$((now - 7200)).0" 1 /usr/bin/app-gone
# Malformed: a sample cut short, and a format to come.
printf '# ferry telemetry 1\n# pid %s\n# starttime %s\n# context 9\n# written %s.0\n# program /x\nferry_bytes_total{peer="a" 12\n' \
	"$live1" "$start1" "$now" >"$dir/ferry-$live1-9.prom"
printf '# ferry telemetry 2\n' >"$dir/ferry-$live1-8.prom"
# Not snapshots: a writer's temporary file, and anything else.
echo junk >"$dir/.ferry-$live1-7.prom.tmp"
echo junk >"$dir/notes.txt"

# --list: two live, two stale, the malformed named with their line.
rc=0
"$tool" --dir "$dir" --list >"$tmp/list" 2>"$tmp/list.err" || rc=$?
if test "$rc" -ne 0; then
	cat "$tmp/list" "$tmp/list.err"
	fail "ferry_stat --list exited with $rc"
fi
# listed PID CONTEXT STATE: --list says so.
listed() {
	if awk -v p="$1" -v c="$2" -v s="$3" '$1 == p && $2 == c && $3 == s { found = 1 } END { exit !found }' "$tmp/list"; then
		pass "--list: pid $1 context $2 is $3"
	else
		cat "$tmp/list"
		fail "--list: pid $1 context $2 is not $3"
	fi
}
listed "$live1" 1 live
listed "$live2" 1 live
listed "$live2" 2 stale
listed "$gone" 1 stale
if test "$(awk '$3 == "live"' "$tmp/list" | wc -l)" -eq 2 &&
	test "$(awk '$3 == "stale"' "$tmp/list" | wc -l)" -eq 2 &&
	test "$(wc -l <"$tmp/list")" -eq 5; then
	pass "--list: a heading, 2 live and 2 stale, nothing else"
else
	cat "$tmp/list"
	fail "--list: expected a heading, 2 live and 2 stale"
fi
has "$tmp/list" "/usr/bin/app-gone" "--list names the programs"
has "$tmp/list" "2.0 h" "--list gives the age of a snapshot"
has "$tmp/list.err" "$dir/ferry-$live1-9.prom:7: expected ',' or '}' after label peer" \
	"a malformed snapshot is named with its line and why"
has "$tmp/list.err" "$dir/ferry-$live1-8.prom:1: snapshot format 2; this ferry_stat reads format 1" \
	"a snapshot of another format is named"
FERRY_TELEMETRY=$dir "$tool" --list >"$tmp/env" 2>/dev/null || true
has "$tmp/env" "/usr/bin/app-one" "FERRY_TELEMETRY names the directory"

# A directory other users write into: a FIFO at a snapshot's name (opening
# it would hold ferry_stat, and its server, for ever), a link to a real
# snapshot, a directory; and, as root, a well-formed snapshot of a live
# process in a file another user owns.  Each is left aside with a
# sentence; the real snapshot beside them is listed, and only it.
shared=$tmp/shared
mkdir "$shared"
dir=$shared snapshot "$live1" "$start1" 1 "$now.0" 1 /usr/bin/app-one
dir=$shared snapshot "$live1" "$start1" 5 "$now.0" 1 /usr/bin/app-planted
mkfifo "$shared/ferry-$live1-2.prom"
ln -s "$shared/ferry-$live1-1.prom" "$shared/ferry-$live1-3.prom"
mkdir "$shared/ferry-$live1-4.prom"
planted=no
if test "$(id -u)" -eq 0; then
	chown 65534 "$shared/ferry-$live1-5.prom"
	planted=yes
else
	rm "$shared/ferry-$live1-5.prom"
	echo "SKIP part: not root, so no file of another user's to plant"
fi
rc=0
timeout 20 "$tool" --dir "$shared" --list >"$tmp/shared.list" 2>"$tmp/shared.list.err" || rc=$?
if test "$rc" -eq 0; then
	pass "--list on a FIFO, a link and a directory: exit 0"
else
	cat "$tmp/shared.list" "$tmp/shared.list.err"
	fail "--list on a FIFO, a link and a directory: exit $rc (124: it hung)"
fi
has "$tmp/shared.list.err" "$shared/ferry-$live1-2.prom: a FIFO, not a snapshot: libferry writes its snapshots as regular files" \
	"a FIFO is named and left aside"
has "$tmp/shared.list.err" "$shared/ferry-$live1-3.prom: a symbolic link, not a snapshot" \
	"a link is named and left aside"
has "$tmp/shared.list.err" "$shared/ferry-$live1-4.prom: a directory, not a snapshot" \
	"a directory is named and left aside"
if test "$planted" = yes; then
	has "$tmp/shared.list.err" "$shared/ferry-$live1-5.prom: owned by uid 65534, but process $live1 runs as uid 0: not its snapshot, left aside" \
		"another user's snapshot of a live process is left aside"
fi
if test "$(awk '$3 == "live"' "$tmp/shared.list" | wc -l)" -eq 1; then
	pass "--list: only the real snapshot beside them is live"
else
	cat "$tmp/shared.list"
	fail "--list: expected one live snapshot among the planted files"
fi
lacks "$tmp/shared.list" "app-planted" "the planted snapshot is not listed"

# Escapes in a snapshot (a peer names its own host; a file's text is its
# writer's): the view and the problems show them printably, and nothing
# reaches the terminal that could move its cursor or forge a line.
esc=$tmp/escapes
mkdir "$esc"
printf '# ferry telemetry 1\n# pid %s\n# starttime %s\n# context 1\n# written %s.0\n# program /usr/bin/app\033[31mred\nferry_peer_up{peer="evil\033[2J\\nhost"} 1\n' \
	"$live1" "$start1" "$now" >"$esc/ferry-$live1-1.prom"
printf '# ferry telemetry 1\n# pid %s\n# starttime %s\n# context 2\n# written %s.0\n# program /x\nferry_peer_up 1\033]0;x\n' \
	"$live1" "$start1" "$now" >"$esc/ferry-$live1-2.prom"
rc=0
"$tool" --dir "$esc" --once --interval 0.2 >"$tmp/esc.out" 2>"$tmp/esc.err" || rc=$?
if test "$rc" -eq 0 && ! tr -d -c '\033' <"$tmp/esc.out" | grep . >/dev/null &&
	! tr -d -c '\033' <"$tmp/esc.err" | grep . >/dev/null; then
	pass "escapes in snapshots: --once prints none"
else
	cat -v "$tmp/esc.out" "$tmp/esc.err"
	fail "escapes in snapshots: --once exited $rc or printed an escape"
fi
has "$tmp/esc.out" "pid $live1, context 1: /usr/bin/app?[31mred" \
	"a program name's escape is shown as ?"
has "$tmp/esc.out" "peer evil?[2J host: up" \
	"a peer label's escape and newline are shown as ? and a space"
has "$tmp/esc.err" "ferry-$live1-2.prom:7:" "the malformed one is named"

# once INTERVAL DELAY: ferry_stat --once while version 2 is written DELAY
# seconds in, its output in $tmp/once.
once() {
	"$tool" --dir "$dir" --once --interval "$1" >"$tmp/once" 2>"$tmp/once.err" &
	viewer=$!
	sleep "$2"
	write_all 2 2
	rc=0
	wait "$viewer" || rc=$?
	write_all 0 1
}

# --once: both processes, their peers and rails, the rates between the two
# versions (2 s apart in their `written`).  Timing: version 2 must come
# after the first read; a loaded machine gets a second, slower try.
once 3 1.5
if ! grep -F "rail 0: write 500.00 kB/s" "$tmp/once" >/dev/null; then
	echo "(--once saw no rate: trying again more slowly)"
	once 6 3
fi
if test "$rc" -ne 0; then
	cat "$tmp/once" "$tmp/once.err"
	fail "ferry_stat --once exited with $rc"
fi
has "$tmp/once" "2 live contexts in 2 processes; 2 stale snapshots left aside" \
	"--once counts the live and the stale"
for p in "$live1" "$live2"; do
	has "$tmp/once" "peer h-$p at fi_sockaddr_in://10.0.0.2:40123: up" \
		"--once shows the peer of $p"
done
has "$tmp/once" "pid $live1, context 1: /usr/bin/app-one" "--once shows process one"
has "$tmp/once" "pid $live2, context 1: /usr/bin/app-two" "--once shows process two"
has "$tmp/once" "tcp;ofi_rxm on domain lo (fabric 127.0.0.0/8), ferry 1.0.0" \
	"--once shows the provider and domain"
has "$tmp/once" "rail 0: write 500.00 kB/s 5.0 op/s, read 1.00 kB/s 0.5 op/s" \
	"--once: rail 0's rates"
has "$tmp/once" "rail 1: write 250.00 kB/s 2.5 op/s, read 0 B/s 0.0 op/s" \
	"--once: rail 1's rates"
has "$tmp/once" "requests ended: write ok 200 (+100), write timeout 2 (+1), read ok 4 (+2)" \
	"--once: requests by outcome"
has "$tmp/once" "requests in flight 3; median latency write 100.0 us, read 550.0 us" \
	"--once: in flight and the median latencies"
has "$tmp/once" 'peer odd "peer" \ of' "--once: label values unescaped"
lacks "$tmp/once" "app-reused" "--once leaves the reused pid's snapshot aside"
lacks "$tmp/once" "app-gone" "--once leaves the gone process's snapshot aside"
has "$tmp/once.err" "ferry-$live1-9.prom:7:" "--once names the malformed snapshot"
if tr -d -c '\033' <"$tmp/once" | grep . >/dev/null; then
	fail "--once printed terminal escapes to a file"
else
	pass "--once prints no terminal escape to a file"
fi

# The live view, not on a terminal: frame after frame, no escape, until it
# is stopped.  Its first frame may take a while on a loaded machine (up to
# 60 s here; a fixed 3 s run could end before it); the next one is due an
# --interval later (within 3 s here, as before).
: >"$tmp/view"
"$tool" --dir "$dir" --interval 1 >"$tmp/view" 2>/dev/null &
viewer=$!
started="$started $viewer"
# drawn N TRIES: waits up to TRIES quarters of a second, while the view
# runs, for N frames; their count is in $frames.
drawn() {
	for _ in $(seq "$2"); do
		frames=$(grep -c "^ferry_stat $dir, " "$tmp/view" || true)
		test "$frames" -ge "$1" && return 0
		kill -0 "$viewer" 2>/dev/null || return 1
		sleep 0.25
	done
	return 1
}
drawn 1 240 && drawn 2 12 || true
running=no
if kill "$viewer" 2>/dev/null; then
	running=yes
fi
rc=0
wait "$viewer" 2>/dev/null || rc=$?
if test "$running" = yes && test "$frames" -ge 2 &&
	! tr -d -c '\033' <"$tmp/view" | grep . >/dev/null; then
	pass "the live view prints $frames frames, without escapes"
else
	cat "$tmp/view"
	fail "the live view: $frames frames, running when stopped: $running (exit $rc)"
fi

# fetch URL FILE [SECONDS]: the body into FILE; prints the HTTP status
# (000: no answer within SECONDS, 30 by default).
fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -s -m "${3:-30}" -o "$2" -w '%{http_code}' "$1" || true
	else
		python3 -c 'import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[3]))
except urllib.error.HTTPError as e:
    r = e
open(sys.argv[2], "wb").write(r.read())
print(r.status if hasattr(r, "status") else r.code)' "$1" "$2" "${3:-30}" 2>/dev/null || echo 000
	fi
}

# --prometheus: one text of both live processes, accepted by promtool.
if ! command -v curl >/dev/null 2>&1 && ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP part: neither curl nor python3 to fetch /metrics with"
else
	# The file exists before the server starts: the shell opens it in the
	# background child, which may not have run when the loop first reads.
	: >"$tmp/serve.err"
	"$tool" --dir "$dir" --prometheus 127.0.0.1:0 2>"$tmp/serve.err" &
	server=$!
	started="$started $server"
	port=""
	# Up to 60 s (a loaded machine starts it slowly), unless it ends.
	for _ in $(seq 120); do
		port=$(sed -n 's|^ferry_stat: serving http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/serve.err")
		test -n "$port" && break
		kill -0 "$server" 2>/dev/null || break
		sleep 0.5
	done
	if test -z "$port"; then
		cat "$tmp/serve.err"
		fail "ferry_stat --prometheus did not say where it listens"
	else
		code=$(fetch "http://127.0.0.1:$port/metrics" "$tmp/metrics")
		if test "$code" = 200; then
			pass "GET /metrics answers 200"
		else
			fail "GET /metrics answered $code"
		fi
		if command -v promtool >/dev/null 2>&1; then
			if promtool check metrics <"$tmp/metrics" >"$tmp/promtool" 2>&1; then
				pass "promtool check metrics accepts the text"
			else
				cat "$tmp/metrics" "$tmp/promtool"
				fail "promtool check metrics refuses the text"
			fi
		else
			echo "SKIP part: no promtool (Debian: apt-get install prometheus) to check the text with"
		fi
		for p in "$live1" "$live2"; do
			has "$tmp/metrics" "ferry_bytes_total{pid=\"$p\",context=\"1\",peer=\"h-$p at fi_sockaddr_in://10.0.0.2:40123\",rail=\"0\",domain=\"lo\",op=\"write\"} 1000000" \
				"/metrics has the bytes of $p"
			has "$tmp/metrics" "ferry_request_duration_seconds_bucket{pid=\"$p\",context=\"1\",op=\"write\",le=\"+Inf\"} 100" \
				"/metrics has the histogram series of $p"
		done
		has "$tmp/metrics" "peer=\"odd \\\"peer\\\" \\\\ of $live1\"" \
			"/metrics escapes label values again"
		lacks "$tmp/metrics" "pid=\"$gone\"" "/metrics leaves the gone process out"
		lacks "$tmp/metrics" "pid=\"$live2\",context=\"2\"" "/metrics leaves the reused pid's snapshot out"
		if test "$(grep -c '^# TYPE ferry_bytes_total counter$' "$tmp/metrics")" -eq 1 &&
			test "$(grep -c '^# HELP ferry_bytes_total ' "$tmp/metrics")" -eq 1; then
			pass "/metrics has each family's HELP and TYPE once"
		else
			fail "/metrics repeats HELP or TYPE"
		fi
		code=$(fetch "http://127.0.0.1:$port/nothing" "$tmp/404")
		if test "$code" = 404; then
			pass "another path answers 404"
		else
			fail "GET /nothing answered $code"
		fi
		has "$tmp/serve.err" "ferry-$live1-9.prom:7:" "--prometheus names the malformed snapshot"
		# Connections that say nothing, more than the server holds: a
		# scraper is still answered at once, not when they time out (10 s).
		python3 -c 'import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        for _ in range(40)]
print("held", flush=True)
time.sleep(60)' "$port" >"$tmp/held" 2>&1 &
		holder=$!
		started="$started $holder"
		for _ in $(seq 120); do
			grep -q held "$tmp/held" && break
			sleep 0.25
		done
		code=$(fetch "http://127.0.0.1:$port/metrics" "$tmp/metrics.held" 5)
		if test "$code" = 200; then
			pass "40 silent connections: GET /metrics still answers 200 at once"
		else
			cat "$tmp/held"
			fail "40 silent connections: GET /metrics answered $code within 5 s"
		fi
		kill "$holder" 2>/dev/null || true
		# The port taken: a clear error, at once.
		rc=0
		timeout 10 "$tool" --dir "$dir" --prometheus "127.0.0.1:$port" >"$tmp/busy" 2>&1 || rc=$?
		if test "$rc" -eq 1; then
			pass "a port in use: exit 1"
		else
			fail "a port in use: exit $rc, expected 1"
		fi
		has "$tmp/busy" "cannot listen on 127.0.0.1:$port: Address already in use" \
			"a port in use is said"
	fi
	kill "$server" 2>/dev/null || true
fi

# says CODE WORDS ARGS...: ferry_stat ARGS exits CODE and prints WORDS.
says() {
	want=$1 words=$2
	shift 2
	rc=0
	"$tool" "$@" >"$tmp/out" 2>&1 || rc=$?
	if test "$rc" -eq "$want" && grep -F -- "$words" "$tmp/out" >/dev/null; then
		pass "ferry_stat $*: exit $rc, \"$words\""
	else
		cat "$tmp/out"
		fail "ferry_stat $*: exit $rc, expected $want and \"$words\""
	fi
}

says 1 "cannot read the directory $tmp/none: No such file or directory" --dir "$tmp/none" --list
says 1 "cannot read the directory $tmp/none: No such file or directory" --dir "$tmp/none" --once
(
	unset FERRY_TELEMETRY
	says 2 "Set FERRY_TELEMETRY" --list
	exit "$status"
) || status=1
says 2 "usage:" --bogus
says 2 "exclude each other" --dir "$dir" --list --once
says 2 "--interval 0: give seconds" --dir "$dir" --interval 0
says 2 "--prometheus wants [HOST]:PORT" --dir "$dir" --prometheus 9100
says 0 "--prometheus [HOST]:PORT" --help

# --clean: the stale go, the live and the malformed stay; so do a
# writer's temporary files: one a dead process left a minute ago goes; a
# live one's (a snapshot being written), and a fresh one of a pid not
# here (a writer of another pid namespace, renaming it any moment), stay.
echo partial >"$dir/.ferry-$gone-3.prom.tmp"
touch -d '2 minutes ago' "$dir/.ferry-$gone-3.prom.tmp"
echo partial >"$dir/.ferry-$gone-5.prom.tmp"
echo partial >"$dir/.ferry-$live1-4.prom.tmp"
touch -d '2 minutes ago' "$dir/.ferry-$live1-4.prom.tmp"
"$tool" --dir "$dir" --list --clean >"$tmp/clean" 2>/dev/null || true
if test -e "$dir/.ferry-$gone-3.prom.tmp"; then
	fail "--clean left the temporary file of a process gone"
elif test -e "$dir/.ferry-$live1-4.prom.tmp" &&
	test -e "$dir/.ferry-$gone-5.prom.tmp"; then
	pass "--clean removes a dead writer's old temporary file, not a live one's or a fresh one"
else
	fail "--clean removed a live writer's temporary file, or a fresh one"
fi
rm -f "$dir/.ferry-$live1-4.prom.tmp" "$dir/.ferry-$gone-5.prom.tmp"
has "$tmp/clean" "stale, removed" "--clean says what it removed"
if test -e "$dir/ferry-$gone-1.prom" || test -e "$dir/ferry-$live2-2.prom"; then
	ls -la "$dir"
	fail "--clean left a stale snapshot"
elif test -e "$dir/ferry-$live1-1.prom" && test -e "$dir/ferry-$live2-1.prom" &&
	test -e "$dir/ferry-$live1-9.prom"; then
	pass "--clean removes the stale snapshots only"
else
	ls -la "$dir"
	fail "--clean removed a live or malformed snapshot"
fi

# Real processes: libferry writes the snapshots of ferry_bench's two
# sides (its loopback mode runs each in its own process).
bench=$abs_top_builddir/bench/ferry_bench
# run_bench DIR SECONDS [PREFIX...]: ferry_bench's loopback run over shm
# for SECONDS with FERRY_TELEMETRY=DIR, in the background ($benchpid; its
# output in DIR.out), started through PREFIX.  Then waits for both its
# processes to show live in --list (DIR.list) and to have met their
# peer: a rate needs the peer's counters in both of the views' reads.  Up
# to 60 s (its timeout): two processes meeting can take seconds on a
# loaded machine.  How many show live is in $nlive.
run_bench() {
	d=$1 secs=$2
	shift 2
	mkdir "$d"
	FERRY_TELEMETRY=$d timeout 60 "$@" "$bench" --provider shm \
		--duration "$secs" --warmup 0.2 >"$d.out" 2>&1 &
	benchpid=$!
	started="$started $benchpid"
	nlive=0
	for _ in $(seq 240); do
		"$tool" --dir "$d" --list >"$d.list" 2>&1 || true
		nlive=$(awk '$3 == "live"' "$d.list" | wc -l)
		met=$(grep -l '^ferry_bytes_total{' "$d"/*.prom 2>/dev/null | wc -l)
		test "$nlive" -ge 2 && test "$met" -ge 2 && return 0
		kill -0 "$benchpid" 2>/dev/null || return 1
		sleep 0.25
	done
	return 1
}
if ! grep 'telemetry_dir, STR' "$abs_top_srcdir/include/ferry/core.h" >/dev/null; then
	echo "SKIP part: this libferry writes no snapshots (no config.telemetry_dir)"
elif ! test -x "$bench"; then
	fail "no $bench to run with FERRY_TELEMETRY"
else
	real=$tmp/real
	run_bench "$real" 8 || true
	if test "$nlive" -ge 2; then
		pass "ferry_bench's two processes show live"
		"$tool" --dir "$real" --once --interval 1.5 >"$tmp/real.once" 2>&1 || true
		if grep -E '^    rail [0-9]+: write [0-9.]+ [kMGT]?B/s' "$tmp/real.once" >/dev/null; then
			pass "--once computes rates from libferry's snapshots"
		else
			cat "$tmp/real.once"
			fail "--once shows no rate for ferry_bench's processes"
		fi
	else
		cat "$real.list" "$real.out"
		fail "ferry_bench's processes do not show live ($nlive live)"
	fi
	rc=0
	wait "$benchpid" || rc=$?
	if test "$rc" -ne 0; then
		cat "$real.out"
		fail "ferry_bench with FERRY_TELEMETRY exited with $rc"
	fi
	if test -n "$(find "$real" -name '*.prom')"; then
		ls -la "$real"
		fail "snapshots stay after their contexts closed"
	else
		pass "the snapshots go when their contexts close"
	fi
fi
# Another pid namespace (a metrics sidecar in its own container, sharing
# the directory): a writer's pid says nothing here.  Its snapshot is live
# while rewritten within three intervals and 2 s, stale after; --clean
# removes it only once unchanged for 10 minutes.
other=$tmp/otherns
mkdir "$other"
# ns_snapshot CONTEXT AGE: a snapshot of pid 2147483646 (none here) in
# namespace 1 (not this one), written AGE seconds ago.
ns_snapshot() {
	printf '# ferry telemetry 1\n# pid 2147483646\n# starttime 1\n# context %s\n# pidns 1\n# interval 1000\n# written %s.0\n# program /usr/bin/sidecar-app\nferry_peer_up{peer="p"} 1\n' \
		"$1" "$(($(date +%s) - $2))" >"$other/ferry-2147483646-$1.prom"
}
ns_snapshot 1 0
ns_snapshot 2 30
ns_snapshot 3 700
"$tool" --dir "$other" --list --clean >"$tmp/other.list" 2>&1 || true
if awk '$2 == 1 && $3 == "live"' "$tmp/other.list" | grep . >/dev/null &&
	awk '$2 == 2 && $3 == "stale"' "$tmp/other.list" | grep . >/dev/null &&
	test -e "$other/ferry-2147483646-1.prom" &&
	test -e "$other/ferry-2147483646-2.prom" &&
	! test -e "$other/ferry-2147483646-3.prom"; then
	pass "another pid namespace: live while rewritten, stale after, removed after 10 minutes"
else
	cat "$tmp/other.list"
	ls -la "$other"
	fail "another pid namespace: expected context 1 live, 2 stale and kept, 3 removed"
fi

# The same with a real one: ferry_bench in a pid namespace of its own
# (root and unshare needed), its snapshots read from here.
if test "$(id -u)" -ne 0 || ! unshare -pf --mount-proc true 2>/dev/null; then
	echo "SKIP part: not root, or no unshare -p: no pid namespace to run ferry_bench in"
elif test -x "$bench"; then
	ns=$tmp/realns
	run_bench "$ns" 6 unshare -pf --mount-proc || true
	if test "$nlive" -ge 2; then
		pass "ferry_bench's processes in another pid namespace show live"
	else
		cat "$ns.list" "$ns.out"
		fail "ferry_bench's processes in another pid namespace: $nlive live"
	fi
	wait "$benchpid" || true
fi
exit "$status"
