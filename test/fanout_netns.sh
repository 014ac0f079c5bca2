#!/bin/sh
# ferry_fanout across hosts: bench/fanout_netns.sh at small sizes, as a
# test (no timing is asserted: the table is the benchmark's).  A source
# and four receivers in network namespaces of their own on 100 Mbit links
# (16 MiB each: 1.3 s, so that the kill lands while the data flows);
# every receiver verifies every byte, for the naive copies and the
# fan-out; then the first receiver of a chain of two is killed while the
# data flows, the second must still verify everything and the source must
# name the first.  Needs root (77 otherwise, from the script, saying why).
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"

command -v bash >/dev/null || { echo "fanout_netns.sh: SKIP: needs bash"; exit 77; }
exec bash "$abs_top_srcdir/bench/fanout_netns.sh" -q -k -s 16M -r 100mbit \
	-n "1 4" -m "parallel fanout" -x "$abs_top_builddir/examples"
