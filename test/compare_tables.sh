#!/bin/bash
# bench/compare.sh's tables, made again from raw runs (-R) that this test
# writes itself: a ratio is the median of the rounds' ratios, a failed run
# (x) leaves its round out, and a file that is not compare.sh's is refused.
# Nothing is measured.
srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
compare=$srcdir/bench/compare.sh
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0

check() { # WHAT FILE WORDS
	if grep -F -- "$3" "$2" > /dev/null; then
		echo "PASS: $1"
	else
		cat "$2"
		echo "FAIL: $1: no \"$3\""
		status=1
	fi
}

cat > "$tmp/raw.txt" <<'RAW'
compare.sh 2026-11-25T00:00:00+00:00 on host (2 CPUs), Linux 6.1
ferry_bench: build/bench/ferry_bench; rma_raw: build/bench/rma_raw; -n 3 -t 1 -d 16 -f block x depth
groups stream,small,fabtests; providers tcp,shm; ops write; sizes 4K,16K; load average at start: 0.10 0.20 0.30

== stream tcp write 4096: s_ferry s_raw s_ferry_polled s_raw_fd
run 1 (load 0.10 0.20 0.30)
s_ferry: 1 4 9 
s_raw: 2 4 10 
s_ferry_polled: 3 3 12 
s_raw_fd: 1 x 9 

== stream tcp write 16384: s_ferry s_raw s_ferry_polled s_raw_fd
s_ferry: x x x 
s_raw: 3 3 3 
s_ferry_polled: 3 3 3 
s_raw_fd: 3 3 3 

== small tcp 4096 64: b_ferry b_ferry_desc b_raw b_raw_fd
s_ferry: 7 7 7 
b_ferry: 200000 300000 400000 
b_ferry_desc: 90000 100000 110000 
b_raw: 100000 100000 100000 
b_raw_fd: 90000 100000 110000 

== fabtests shm 4096: f_ferry_same f_ferry f_fab f_fab_dc f_raw_count f_raw
f_ferry_same: 4 5 6 
f_ferry: 3 x 6 
f_fab: 5 5 4 
f_fab_dc: 2 2 3 
f_raw_count: 4 5 6 
f_raw: 8 10 12 
Method: `bench/compare.sh -n 3 -t 1`, a line from the run.
RAW
out=$tmp/out.md
rc=0
bash "$compare" -R "$tmp/raw.txt" -m "$tmp/md" > "$out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
	cat "$out"
	echo "FAIL: compare.sh -R exited $rc"
	status=1
fi
# Rounds 1/2, 4/4, 9/10: the median of the ratios is 0.90, where the
# ratio of the medians (4/4) would say 1.00.
check "paired ratio to rma_raw" "$out" "| tcp | write | 4 KiB | 4 (1-9) | 4 (2-10) | 0.90 |"
# 3/2, 3/4, 12/10: 1.20 against rma_raw (the medians would say 0.75).
check "paired ratio of the polling target" "$out" "| 3 (3-12) | 1.20 |"
# The failed round drops out: 1/1 and 9/9.
check "a failed run leaves its round out" "$out" "| 5 (1-9) 2/3 | 1.00 |"
check "a column that always failed" "$out" "| tcp | write | 16 KiB | failed | 3 (3-3) | - |"
check "small blocks" "$out" "| tcp | 4 KiB | 64 | 100k (100k-100k) | 300k (200k-400k) | 3.00 | 100k (90k-110k) | 1.00 | 100k (90k-110k) | 1.00 |"
if grep -F "7 (7-7)" "$out" > /dev/null; then
	echo "FAIL: a value of a column the row did not run was taken"
	status=1
else
	echo "PASS: a value of a column the row did not run is ignored"
fi
# One block: 4/5, 5/5, 6/4 -> 1.00 to fi_rma_bw; 2, 2.5, 2 -> 2.00 to -U;
# 0.5 each -> 0.50 to rma_raw.  Cycling: 3/5 and 6/4 (a failed run) -> 1.05.
check "fabtests row" "$out" "| shm | 4 KiB | 5 (4-6) | 5 (4-5) | 1.00 | 2 (2-3) | 2.00 | 5 (4-6) | 1.00 | 10 (8-12) | 0.50 | 4.5 (3-6) 2/3 | 1.05 |"
check "the run's method line" "$out" "a line from the run. Tables made again from the raw runs"
check "-m writes the same tables" "$tmp/md" "| tcp | write | 4 KiB | 4 (1-9) | 4 (2-10) | 0.90 |"

printf 'not a compare.sh run\n' > "$tmp/other.txt"
rc=0
bash "$compare" -R "$tmp/other.txt" > "$out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: -R of another file exited $rc, not 2"; status=1; }
check "-R refuses another file" "$out" "not the raw runs of a compare.sh run"
rc=0
bash "$compare" -R "$tmp/missing.txt" > "$out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: -R of a missing file exited $rc, not 2"; status=1; }
check "-R names a file it cannot read" "$out" "-R $tmp/missing.txt: cannot read it"
rc=0
bash "$compare" -R "$tmp/raw.txt" -o "$tmp/again.txt" > "$out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: -R with -o exited $rc, not 2"; status=1; }
check "-R refuses -o" "$out" "-R runs nothing and writes no raw file"
rc=0
bash "$compare" -L "$tmp/nowhere" -c stream > "$out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: -L of a directory without libfabric exited $rc, not 2"; status=1; }
check "-L names what it needs" "$out" "-L $tmp/nowhere: no lib/libfabric.so.1 there"
rc=0
FABTESTS_BIN='' bash "$compare" -c fabtests -F "$tmp" -b /bin/true > "$out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: -c fabtests without fi_rma_bw exited $rc, not 2"; status=1; }
check "-c fabtests without fi_rma_bw says where it looked" "$out" "-c fabtests: no fi_rma_bw in $tmp"
rc=0
bash "$compare" -P tcp,udp -c stream > "$out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: -P udp exited $rc, not 2"; status=1; }
check "-P lists tcpn" "$out" "-P udp: give tcp, tcpn, shm"
# -P tcpn on a libfabric without the native reliable-datagram tcp
# provider (Debian's 1.17: only tcp;ofi_rxm) names what to do.
if command -v fi_info > /dev/null && ! fi_info -p tcp -t FI_EP_RDM 2> /dev/null | grep -qx 'provider: tcp'; then
	rc=0
	RMA_RAW=/bin/true bash "$compare" -P tcpn -c stream -b /bin/true -o "$tmp/tcpn.txt" > "$out" 2>&1 || rc=$?
	[ "$rc" -eq 2 ] || { echo "FAIL: -P tcpn without native tcp exited $rc, not 2"; status=1; }
	check "-P tcpn without native tcp says to give -L" "$out" "has no native reliable-datagram tcp provider (1.18 and later do): give -L PREFIX of one"
else
	echo "note: fi_info is missing or this libfabric has native tcp: the -P tcpn refusal is not checked here"
fi
exit $status
