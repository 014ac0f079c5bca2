#!/bin/sh
# tools/ferry_info on this machine: it finds a usable provider and says
# which and why, lists refusals, prints the cache monitor and the
# topology; --json is one object; a provider that cannot work here makes
# it exit 1 with the reason; libfabric's MR cache switched on by the
# environment is a warning.  Run by `make check`.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

tool=$abs_top_builddir/tools/ferry_info
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-info.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

# says CODE WORDS ARGS...: ferry_info ARGS exits with CODE and prints WORDS.
says() {
	want=$1
	words=$2
	shift 2
	code=0
	"$tool" "$@" >"$tmp/out" 2>&1 || code=$?
	if test "$code" -ne "$want"; then
		cat "$tmp/out"
		fail "ferry_info $* exited with $code, expected $want"
	elif ! grep -F -- "$words" "$tmp/out" >/dev/null; then
		cat "$tmp/out"
		fail "ferry_info $*: the output does not say \"$words\""
	else
		echo "PASS: ferry_info $* says \"$words\""
	fi
}

says 0 ": ferry would use this one" --provider 'tcp;ofi_rxm'
says 0 "chose tcp;ofi_rxm on domain lo" --provider 'tcp;ofi_rxm' --domain lo
says 0 "registration cache invalidated by:"
says 0 "notifications: carried by their request's last write (remote CQ data) when id and value are below 2^32" --provider shm
says 0 '"notify_in_write_bits": 32' --json --provider 'tcp;ofi_rxm'
says 0 "verbs: not loaded by libfabric"
says 0 "NIC "
says 0 "only processes on this host are reachable" --domain lo
says 0 '"usable": true' --json
says 0 '"chosen": true' --json
says 1 "verbs: no device or interface available" --provider verbs
says 1 "no usable provider" --provider verbs
FI_MR_CACHE_MAX_COUNT=100 says 0 "libfabric's own MR cache is enabled by the environment (FI_MR_CACHE_MAX_COUNT)"
FERRY_NO_USERFAULTFD=1 says 0 "invalidated only when the program calls ferry_mem_invalidate()"
says 2 "usage:" --bogus

# --json is one well-formed object.
if command -v python3 >/dev/null 2>&1; then
	"$tool" --json >"$tmp/json" 2>/dev/null
	if python3 -m json.tool "$tmp/json" >/dev/null; then
		echo "PASS: --json is valid JSON"
	else
		cat "$tmp/json"
		fail "ferry_info --json printed invalid JSON"
	fi
fi
exit $status
