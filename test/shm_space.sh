#!/bin/sh
# A nearly full /dev/shm: ferry refuses shm up front, naming /dev/shm and
# its free bytes, instead of letting libfabric's shm provider die of
# SIGBUS on the first write.  The full /dev/shm is a small tmpfs mounted
# over it in a private mount namespace (unshare -m), so it needs root;
# elsewhere the test skips (77) and the decision itself is still tested
# by test/unit/check_provider (test_shm_space).  Run by `make check`.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

tool=$abs_top_builddir/tools/ferry_info
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-shm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if ! unshare -m true 2>/dev/null; then
	echo "SKIP: cannot make a private mount namespace (unshare -m needs root)"
	exit 77
fi

# in_small_shm SIZE CMD...: runs CMD with a SIZE tmpfs over /dev/shm.
in_small_shm() {
	size=$1
	shift
	unshare -m sh -c 'mount -t tmpfs -o size="$0" tmpfs /dev/shm && exec "$@"' \
		"$size" "$@"
}

status=0
code=0
in_small_shm 8m "$tool" --provider shm --local >"$tmp/full" 2>&1 || code=$?
if test "$code" -eq 1 && grep -F "/dev/shm has only 8 MiB free of 8 MiB" "$tmp/full" >/dev/null &&
	grep -F "shm: " "$tmp/full" >/dev/null; then
	echo "PASS: an 8 MiB /dev/shm refuses shm, saying how much is free"
else
	cat "$tmp/full"
	echo "FAIL: ferry_info --provider shm with an 8 MiB /dev/shm (exit $code)"
	status=1
fi

# Room for libfabric's own check (it offers shm) but not for ferry's: the
# region could not grow, so ferry refuses it all the same.
code=0
in_small_shm 40m "$tool" --provider shm --local >"$tmp/tight" 2>&1 || code=$?
if test "$code" -eq 1 && grep -F "/dev/shm has only 40 MiB free of 40 MiB" "$tmp/tight" >/dev/null; then
	echo "PASS: a 40 MiB /dev/shm refuses shm too"
else
	cat "$tmp/tight"
	echo "FAIL: ferry_info --provider shm with a 40 MiB /dev/shm (exit $code)"
	status=1
fi

# Without naming shm, a local context falls back to another provider.
code=0
in_small_shm 8m "$tool" --local >"$tmp/fallback" 2>&1 || code=$?
if test "$code" -eq 0 && grep -F "/dev/shm has only" "$tmp/fallback" >/dev/null &&
	! grep -E "^  \* shm: " "$tmp/fallback" >/dev/null; then
	echo "PASS: with /dev/shm full, a local context takes another provider"
else
	cat "$tmp/fallback"
	echo "FAIL: ferry_info --local with an 8 MiB /dev/shm (exit $code)"
	status=1
fi

# Room enough: shm is chosen and its verdict says how much is free.
code=0
in_small_shm 256m "$tool" --provider shm --local >"$tmp/room" 2>&1 || code=$?
if test "$code" -eq 0 && grep -F "/dev/shm has 256 MiB free of 256 MiB" "$tmp/room" >/dev/null; then
	echo "PASS: a 256 MiB /dev/shm is enough, and said"
else
	cat "$tmp/room"
	echo "FAIL: ferry_info --provider shm with a 256 MiB /dev/shm (exit $code)"
	status=1
fi
exit $status
