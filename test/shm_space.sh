#!/bin/sh
# A nearly full /dev/shm: ferry refuses shm up front, naming /dev/shm and
# its free bytes, instead of letting libfabric's shm provider die of
# SIGBUS on the first write.  The full /dev/shm is a small tmpfs mounted
# over it in a private mount namespace (unshare -m), so it needs root;
# elsewhere the test skips (77) and the decision itself is still tested
# by test/unit/check_provider (test_shm_space).  Run by `make check`.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

# In ASan builds, LeakSanitizer's tracer crashes at exit on a bogus
# dynamic-TLS entry once the shm provider has run ("Tracer caught signal
# 11", "DTLS 14 at 0x961"), since libferry links libcurl's dependencies.
# Not scanning TLS for roots skips that walk; it can only make LSan report
# more leaks, never fewer.
LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}use_tls=0"
export LSAN_OPTIONS
tool=$abs_top_builddir/tools/ferry_info
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-shm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if ! unshare -m true 2>/dev/null; then
	echo "SKIP: cannot make a private mount namespace (unshare -m needs root)"
	exit 77
fi

# in_small_shm SIZE CMD...: runs CMD with a SIZE tmpfs over /dev/shm (SIZE
# may carry more mount options: 200m,ro).
in_small_shm() {
	size=$1
	shift
	unshare -m sh -c 'mount -t tmpfs -o size="$0" tmpfs /dev/shm && exec "$@"' \
		"$size" "$@"
}

status=0
run_as= # a command ferry_info runs under (setpriv, below), or none

# expect NAME CODE WORDS SIZE ARGS...: ferry_info ARGS, with a SIZE tmpfs
# over /dev/shm, exits with CODE and prints WORDS.
expect() {
	name=$1 want=$2 words=$3 size=$4
	shift 4
	code=0
	# shellcheck disable=SC2086 # run_as is a command and its words
	in_small_shm "$size" $run_as "$tool" "$@" >"$tmp/out" 2>&1 || code=$?
	if test "$code" -eq "$want" && grep -F -- "$words" "$tmp/out" >/dev/null; then
		echo "PASS: $name"
	else
		cat "$tmp/out"
		echo "FAIL: $name: ferry_info $* with a $size /dev/shm exited $code" \
			"(expected $want) or does not say \"$words\""
		status=1
	fi
}

expect "an 8 MiB /dev/shm refuses shm, saying how much is free" 1 \
	"shm: /dev/shm has only 8 MiB free of 8 MiB" 8m --provider shm --local
# A /dev/shm where the provider cannot make its region files: refused
# before any endpoint opens (libfabric 2.2-2.6 would die of SIGSEGV in
# fi_enable), and the default context stays on the network provider,
# saying why; it used to fail the whole context.
expect "a read-only /dev/shm is refused, named as such" 1 \
	"shm: /dev/shm is mounted read-only" 200m,ro --provider shm --local
expect "a read-only /dev/shm leaves the default context on the network" 0 \
	"shared memory is not available (no libfabric provider offers reliable-datagram RMA read/write here with provider=shm: shm: /dev/shm is mounted read-only" \
	200m,ro
expect "a /dev/shm without free inodes is refused" 1 \
	"/dev/shm can hold only" 200m,nr_inodes=8 --provider shm --local
# One this process may not write into (mode 0755, run as nobody).
nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
if $nobody "$tool" --local >/dev/null 2>&1; then
	run_as=$nobody
	expect "a /dev/shm this process cannot write is refused" 1 \
		"shm: /dev/shm is not writable by this process (Permission denied)" \
		200m,mode=0755 --provider shm --local
	run_as=
else
	echo "SKIP: a /dev/shm this process cannot write: user nobody cannot run $tool here"
fi
# Room for libfabric's own check (it offers shm) but not for ferry's: the
# region could not grow, so ferry refuses it all the same.
expect "a 40 MiB /dev/shm refuses shm too" 1 \
	"/dev/shm has only 40 MiB free of 40 MiB" 40m --provider shm --local
# Without naming shm, a local context falls back to another provider.
expect "with /dev/shm full, a local context takes another provider" 0 \
	": ferry would use this one" 8m --local
if grep -E "^  \* shm: " "$tmp/out" >/dev/null; then
	echo "FAIL: shm chosen with an 8 MiB /dev/shm"
	status=1
fi
# Room enough: shm is chosen and its verdict says how much is free.
expect "a 256 MiB /dev/shm is enough, and said" 0 \
	"/dev/shm has 256 MiB free of 256 MiB" 256m --provider shm --local
exit $status
