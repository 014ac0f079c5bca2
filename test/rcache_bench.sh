#!/bin/sh
# Builds bench/rcache_bench and runs it briefly (--quick), so that it keeps
# compiling and running.  It is an EXTRA_PROGRAMS, built on demand, because
# it times ferry's internals and so links lib/libferry-internal.la, which
# only `make check` builds.  The numbers printed here mean little (debug or
# sanitizer builds, a busy machine): run `make bench/rcache_bench &&
# bench/rcache_bench` in an optimised build for those.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
MAKE=${MAKE:-make}

tmp=$(mktemp "${TMPDIR:-/tmp}/ferry-rcache-bench.XXXXXX")
trap 'rm -f "$tmp"' EXIT

echo "== make bench/rcache_bench"
if ! $MAKE -C "$abs_top_builddir" bench/rcache_bench >"$tmp" 2>&1; then
	cat "$tmp"
	echo "FAIL: make bench/rcache_bench"
	exit 1
fi
echo "== bench/rcache_bench --quick"
"$abs_top_builddir/bench/rcache_bench" --quick
