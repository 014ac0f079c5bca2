#!/bin/sh
# Run tools/ferry_topo on hwloc's saved topologies (test/fixtures/topology)
# with fixed GPUs and NICs and compare its output with
# test/topo_expected/<case>; check that --rdma overrides what the topology
# says of RDMA; then check that it runs on this machine, and
# that it refuses a missing XML file, a malformed NIC map and bad options
# with a message.  Run by `make check` (also inside `make distcheck`).
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"

tool=$abs_top_builddir/tools/ferry_topo
fixtures=$abs_top_srcdir/test/fixtures/topology
expected=$abs_top_srcdir/test/topo_expected

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-topo.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

# same CASE ARGS...: ferry_topo ARGS must print test/topo_expected/CASE.
# It runs in the fixture directory, so that the output names the XML file
# and not where this tree happens to be.
same() {
	case_name=$1
	shift
	if ! (cd "$fixtures" && "$tool" "$@") >"$tmp/$case_name" 2>&1; then
		cat "$tmp/$case_name"
		fail "ferry_topo $* exited with an error"
	elif diff -u "$expected/$case_name" "$tmp/$case_name"; then
		echo "PASS: $case_name"
	else
		fail "ferry_topo $* differs from test/topo_expected/$case_name" \
			"(if the change is right, copy the new output there)"
	fi
}

# says WORDS ARGS...: ferry_topo ARGS must succeed and print WORDS.
says() {
	words=$1
	shift
	if ! (cd "$fixtures" && "$tool" "$@") >"$tmp/out" 2>&1; then
		cat "$tmp/out"
		fail "ferry_topo $* exited with an error"
	elif grep -F -- "$words" "$tmp/out" >/dev/null; then
		echo "PASS: ferry_topo $* says \"$words\""
	else
		cat "$tmp/out"
		fail "ferry_topo $*: the output does not say \"$words\""
	fi
}

# refused CODE WORDS ARGS...: ferry_topo ARGS must exit with CODE and say
# WORDS on stderr.
refused() {
	want=$1
	words=$2
	shift 2
	code=0
	"$tool" "$@" >"$tmp/out" 2>"$tmp/err" || code=$?
	if test "$code" -ne "$want"; then
		cat "$tmp/out" "$tmp/err"
		fail "ferry_topo $* exited with $code, expected $want"
	elif ! grep -F -- "$words" "$tmp/err" >/dev/null; then
		cat "$tmp/err"
		fail "ferry_topo $*: the message does not say \"$words\""
	else
		echo "PASS: ferry_topo $* refused: $(cat "$tmp/err")"
	fi
}

# Socket 1 of 32em64t: GPUs 84:00.x and the ConnectX-4 on one root port
# (PIX), GPU 83:00.0 on a second and the Ethernet pair on a third (PHB);
# GPU 03:00.0 on socket 0 (SYS).  Where the ConnectX-4 (InfiniBand, mlx5_0)
# is as near as the Ethernet pair (GPUs 03:00.0 and 83:00.0) it comes
# first, so it is every GPU's primary and the pair follows as rails.
gpus32=0000:03:00.0,0000:83:00.0,0000:84:00.0,0000:84:00.1
nics32=0000:81:00.0,0000:81:00.1,0000:04:00.0
same 32em64t.txt --xml 32em64t-2n8c2t-pci-normalio.xml --gpus $gpus32 --nics $nics32
same 32em64t.json --json --xml 32em64t-2n8c2t-pci-normalio.xml --gpus $gpus32 --nics $nics32
if command -v python3 >/dev/null 2>&1; then
	if python3 -m json.tool "$tmp/32em64t.json" >/dev/null; then
		echo "PASS: 32em64t.json is valid JSON"
	else
		fail "ferry_topo --json printed invalid JSON"
	fi
fi

# 24em64t: both sockets' GPUs share the two NICs of socket 0, each on its
# own root port: every GPU takes the Mellanox HCA (InfiniBand, mlx4_0) first
# and eth0 (an Intel 82576) second.
gpus24=0000:06:00.0,0000:14:00.0,0000:11:00.0
nics24=0000:05:00.0,0000:04:00.0
same 24em64t.txt --xml 24em64t-2n6c2t-pci.xml --gpus $gpus24 --nics $nics24
# Told that libfabric offers RDMA on eth0 alone, ferry believes it.
says 'GPU1        NIC1, NIC0' --xml 24em64t-2n6c2t-pci.xml \
	--gpus $gpus24 --nics $nics24 --rdma eth0
says 'NUMA 0  eth2, ib0, mlx4_0  libfabric reports no RDMA' \
	--xml 24em64t-2n6c2t-pci.xml --gpus $gpus24 --nics $nics24 --rdma eth0

# 16intel64 has no GPU: two virtual functions behind one switch stand in
# for GPUs sharing its two NICs; a third "GPU" is not in the topology and
# is pinned by the map.
same 16intel64.txt --xml 16intel64-manyVFs.xml \
	--gpus 0000:0b:00.1,0000:0c:00.1,0000:fe:00.0 \
	--nics 0000:0b:00.0,0000:0c:00.0,0000:02:00.0,0000:88:00.0 --map '2:eth6'

# This machine: whatever it holds, ferry_topo says what it found and
# succeeds, GPU or not.  (Under ASan, hwloc's own leak is suppressed by
# test/lsan.supp, which make check names in LSAN_OPTIONS.)
if "$tool" >"$tmp/live" 2>&1 && grep -F "ferry_topo: live topology of this machine" "$tmp/live" >/dev/null; then
	echo "PASS: this machine:"
	sed -n '1p' "$tmp/live"
else
	cat "$tmp/live"
	fail "ferry_topo on this machine"
fi

refused 1 "cannot read the topology XML file $tmp/none.xml" --xml "$tmp/none.xml"
refused 1 'at offset 2, expected a NIC of GPU 0' \
	--xml "$fixtures/24em64t-2n6c2t-pci.xml" --map '0:'
refused 1 'config.gpus[0] is "17:00", not a PCI address' \
	--xml "$fixtures/24em64t-2n6c2t-pci.xml" --gpus 17:00
refused 2 'unexpected argument' extra
exit $status
