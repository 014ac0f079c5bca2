#!/bin/sh
# check_rcache's allocator case again, with the real mimalloc preloaded
# and purging at once: the same threads allocate, register, transfer and
# free while mimalloc madvises and unmaps memory the registration cache
# watches.  check_rcache's malloc shim then only forwards to mimalloc
# (FERRY_TEST_MIMALLOC=1), and the test checks it really is mimalloc's.
# Run by `make check`; exit 77 (SKIP) with the reason when mimalloc is not
# installed or in a sanitizer build.
set -eu

builddir=${abs_top_builddir:-${top_builddir:-.}}
prog=$builddir/test/unit/check_rcache

skip() {
	echo "SKIP: $*"
	exit 77
}

case "${FERRY_TEST_CFLAGS:-}" in
*-fsanitize=*) skip "sanitizer build: mimalloc cannot be preloaded under ASan/TSan" ;;
esac
test -x "$prog" || skip "$prog is not built"
mimalloc=
for f in $( (ldconfig -p 2>/dev/null || true) | awk '/libmimalloc\.so\.2 / { print $NF }') \
	/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 /usr/lib64/libmimalloc.so.2 \
	/usr/local/lib/libmimalloc.so.2; do
	if test -e "$f"; then
		mimalloc=$f
		break
	fi
done
test -n "$mimalloc" || skip "libmimalloc.so.2 not installed (Debian: apt-get install libmimalloc2.0)"

echo "== LD_PRELOAD=$mimalloc $prog (case allocator)"
# mimalloc 2.0 names (PAGE_RESET, DECOMMIT_DELAY and its old name
# RESET_DELAY, SEGMENT_DECOMMIT_DELAY) and 2.1+ ones (PURGE_*).
LD_PRELOAD=$mimalloc \
	MIMALLOC_PAGE_RESET=1 MIMALLOC_DECOMMIT_DELAY=0 MIMALLOC_RESET_DELAY=0 \
	MIMALLOC_SEGMENT_DECOMMIT_DELAY=0 MIMALLOC_PURGE_DELAY=0 \
	MIMALLOC_PURGE_DECOMMITS=1 \
	FERRY_TEST_MIMALLOC=1 CK_RUN_SUITE=rcache CK_RUN_CASE=allocator \
	"$prog"
