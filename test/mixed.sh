#!/bin/bash
# One context, peers on its own host and on another at once (test/rig.sh
# hosts: a network namespace, a private /dev/shm and a hostname each).
# A target on host 1 receives at the same time from a writer on host 1
# and one on host 2 (test/mixed_peers, default configuration on every
# side).  Passes when every byte arrived, the writer of host 1 and the
# target's peer for it went over shared memory, and the writer of host 2
# and the target's peer for it over the network provider; prints each
# writer's warm rate.  Needs root (exit 77 otherwise, from the rig).  Run
# by make check.

# Make check runs scripts with $(SHELL), which may be a plain sh.
if test -z "${BASH_VERSION:-}"; then
	exec bash "$0" "$@"
fi
set -u

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
unset FERRY_PROVIDER FERRY_PEER_HOST FERRY_DOMAIN FI_PROVIDER FERRY_METADATA \
	FERRY_SHM_PEERS

. "$abs_top_srcdir/test/rig.sh"
rig_up 2
case $? in
0) ;;
77) exit 77 ;;
*) echo "FAIL: could not make the simulated hosts"; exit 1 ;;
esac
tmp=$rig_dir
prog=$abs_top_builddir/test/mixed_peers
size=$((64 << 20))
failed=0
ok() { echo "PASS: $1"; }
not_ok() { echo "FAIL: $1"; failed=1; }

rig_bg 1 "$tmp/target" timeout 120 "$prog" target "$tmp" 2 "$size"
target=$rig_pid
rig_bg 1 "$tmp/local" timeout 120 "$prog" writer "$tmp" 0 "$size" 8
local_writer=$rig_pid
rig_bg 2 "$tmp/remote" timeout 120 "$prog" writer "$tmp" 1 "$size" 8
remote_writer=$rig_pid
for who in target:$target local:$local_writer remote:$remote_writer; do
	if wait "${who#*:}"; then
		ok "${who%%:*} exited 0"
	else
		not_ok "${who%%:*} failed"
	fi
done
for who in target local remote; do
	sed "s/^/    $who: /" "$tmp/$who"
done

# expect NAME WORDS WHAT: NAME's output has a line with WORDS.
expect() {
	if grep -q -E -- "$2" "$tmp/$1"; then
		ok "$3"
	else
		not_ok "$3"
	fi
}
expect target "writer 0: $size bytes verified" "the local writer's bytes arrived"
expect target "writer 1: $size bytes verified" "the remote writer's bytes arrived"
expect local "^writer: peer rig-h1 at .* over shm, .*on this host" \
	"the local writer reached the target over shared memory"
expect remote "^writer: peer rig-h1 at .* over (tcp|net|verbs|efa)[^ ]*, .*another host" \
	"the remote writer reached the target over the network"
expect target "^target: peer rig-h1 at .* over shm, " \
	"the target reaches the local writer over shared memory"
expect target "^target: peer rig-h2 at .* over (tcp|net|verbs|efa)[^ ]*, " \
	"the target reaches the remote writer over the network"
exit $failed
