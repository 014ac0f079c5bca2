#!/bin/sh
# Runs bench/rcache_bench briefly (--quick), so that it keeps running.
# The numbers printed here mean little (debug or sanitizer builds, a busy
# machine): run bench/rcache_bench in an optimised build for those.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

echo "== bench/rcache_bench --quick"
"$abs_top_builddir/bench/rcache_bench" --quick
