#!/bin/sh
# The example programs, run as a person would: each demo starts its
# processes on this host, they meet through ferry's metadata calls over
# the embedded bootstrap (bootstrap://), move data, verify every byte and
# say OK.  Then the two-command forms the README prints for two machines,
# on this host: each side given HOST:PORT, the first to come listening
# there (port 0: any free one, which it names), and the shared secret
# (FERRY_OOB_TOKEN) that the bootstrap needs beyond loopback.  Run by
# make check.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

ex=$abs_top_builddir/examples
. "$(dirname "$0")/runs.sh"
scratch examples

runs "demo: OK" "$ex/hello_write" demo --size 8M --iterations 3
runs "bytes verified: OK" "$ex/hello_write" demo --size 1M --iterations 2
runs "kv_transfer (pull): OK" "$ex/kv_transfer" demo --mode pull
runs "kv_transfer (push): OK" "$ex/kv_transfer" demo --mode push
runs "sequence 3 complete" "$ex/kv_transfer" demo --mode push
FERRY_PROVIDER=shm runs "demo: OK" "$ex/hello_write" demo --size 4M --iterations 2
# The provider comes from the environment: tcp (rxm over tcp on libfabric
# 1.17, its own tcp provider from 1.18), over loopback (the peer's route).
FERRY_PROVIDER=tcp runs "on domain lo" "$ex/hello_write" demo --size 4M --iterations 2
FERRY_PROVIDER=tcp runs "kv_transfer (push): OK" "$ex/kv_transfer" demo --mode push
# One call, five receivers: a chain, then a tree, and the naive copies.
runs "bytes verified: OK" "$ex/epoll_wait" --writes 16 --size 1M
runs "fanout: OK" "$ex/fanout" demo --receivers 5 --size 8M
runs "fanout: OK" "$ex/fanout" demo --receivers 3 --size 3M --degree 2 --chunk 256K
runs "(parallel)" "$ex/fanout" demo --receivers 2 --size 2M --mode parallel
# No GPU here: it says so and runs on the simulated device.
runs "verified on the device: OK" "$ex/gpu_write" --size 8M --iterations 2
FERRY_PROVIDER=tcp runs "gpu_write: OK" "$ex/gpu_write" --size 3M --iterations 2
FERRY_PROVIDER=shm runs "gpu_write: OK" "$ex/gpu_write" --size 3M --iterations 2

# ---- the progress line --------------------------------------------------

# A long transfer draws a line in place ('\r') on a terminal (script(1)
# gives the demo a pseudo-terminal), and none into a log.
cr=$(printf '\r')
# on_tty WORDS CMD...: CMD, run on a pseudo-terminal, exits 0 and writes
# WORDS there.
on_tty() {
	words=$1
	shift
	cmd=
	for a in "$@"; do
		cmd="$cmd '$a'"
	done
	rc=0
	timeout 300 script -qec "$cmd" /dev/null </dev/null >"$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -F -- "$words" "$tmp/out" >/dev/null; then
		pass "$* on a terminal (exit 0, a CR, then \"${words#"$cr"}\")"
	else
		cat -A "$tmp/out"
		echo "FAIL: $* on a terminal (exit $rc; expected 0, and a CR, then \"${words#"$cr"}\")"
		status=1
	fi
}
# no_progress WHAT: the output of the last command ($tmp/out) has no '\r'.
no_progress() {
	if grep -F "$cr" "$tmp/out" >/dev/null; then
		fail "$1 into a file: a progress line (CR) is there"
	else
		pass "$1 into a file: no progress line"
	fi
}
if command -v script >/dev/null 2>&1; then
	# The first draw comes at once; the next ones four times a second at
	# most, which transfers this short may not last.
	on_tty "${cr}client: write 1 of 3: " \
		"$ex/hello_write" demo --size 8M --iterations 3
	on_tty "${cr}send: fan-out of 8.0 MiB to 2 receivers: " \
		"$ex/fanout" demo --receivers 2 --size 8M
	on_tty "${cr}send: copy 1 of 2: " \
		"$ex/fanout" demo --receivers 2 --size 4M --mode sequential
else
	echo "not run: the progress lines on a terminal (no script(1): apt-get install bsdutils)"
fi
runs "demo: OK" "$ex/hello_write" demo --size 8M --iterations 3
no_progress "hello_write demo"
runs "fanout: OK" "$ex/fanout" demo --receivers 2 --size 4M --mode sequential
no_progress "fanout demo --mode sequential"

# ---- two commands -------------------------------------------------------

# started NAME CMD...: CMD in the background for at most 120 s, its pid in
# $bg and its output in $tmp/NAME; waits until it says where it joined
# the bootstrap, and sets $port to the port there.  Fails (1) if it ends
# first, or has not said so within 60 s.  The port is read until the
# whole of it is there: the line may be read while it is being written
# (a distcheck run once handed the client "127.0.0.1:", no port).
joined_port() {
	sed -n 's|.*joined bootstrap://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$1" | head -n 1
}
started() {
	name=$1
	shift
	timeout 120 "$@" >"$tmp/$name" 2>&1 &
	bg=$!
	tries=0
	until port=$(joined_port "$tmp/$name") && test -n "$port"; do
		tries=$((tries + 1))
		if test "$tries" -gt 600 || ! kill -0 "$bg" 2>/dev/null; then
			kill "$bg" 2>/dev/null || true
			cat "$tmp/$name"
			echo "FAIL: $*: did not join the bootstrap"
			status=1
			return 1
		fi
		sleep 0.1
	done
}

# finished NAME WORDS: the command started last, as NAME, exits 0 and has
# said WORDS.
finished() {
	rc=0
	wait "$bg" || rc=$?
	if test "$rc" -eq 0 && grep -F -- "$2" "$tmp/$1" >/dev/null; then
		pass "$1 (exit 0, \"$2\")"
	else
		cat "$tmp/$1"
		echo "FAIL: $1 (exit $rc; expected 0 and \"$2\")"
		status=1
	fi
}

# The server first, on a free port of loopback, which it names: it
# listens there, and the client given that port connects.
if started server "$ex/hello_write" server 127.0.0.1:0 --size 2M --iterations 2; then
	runs "GB/s warm" "$ex/hello_write" client "127.0.0.1:$port" --size 2M --iterations 2
	finished server "bytes verified: OK"
fi
# kv_transfer the same way, decode first: in push mode prefill waits for
# decode's caches by name, and decode for prefill's, for the goodbye.
if started decode "$ex/kv_transfer" decode 127.0.0.1:0 --mode push; then
	runs "pushed 4 sequences" "$ex/kv_transfer" prefill "127.0.0.1:$port" --mode push
	finished decode "verified 35651584 bytes of both caches: OK"
fi
# Beyond loopback only with the same secret on both sides: without one
# the server refuses to listen, a client with another one is refused.
unset FERRY_OOB_TOKEN FERRY_OOB_INSECURE
exits 1 "FERRY_OOB_TOKEN" "$ex/hello_write" server :0 --size 1M
if FERRY_OOB_TOKEN=tutti started server "$ex/hello_write" server :0 --size 1M --iterations 2; then
	FERRY_OOB_TOKEN=frutti exits 1 "does not match" "$ex/hello_write" client "127.0.0.1:$port" --size 1M --iterations 2
	FERRY_OOB_TOKEN=tutti runs "GB/s warm" "$ex/hello_write" client "127.0.0.1:$port" --size 1M --iterations 2
	finished server "bytes verified: OK"
fi
exit $status
