#!/bin/sh
# tools/ferry_info on this machine: it finds a usable provider and says
# which and why, lists refusals, prints the cache monitor and the
# topology; --json is one object; a provider that cannot work here makes
# it exit 1 with the reason; libfabric's MR cache switched on by the
# environment is a warning.  Run by `make check`.
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
FI_MR_CACHE_MONITOR=memhooks says 0 "libfabric's own MR cache is enabled by the environment (FI_MR_CACHE_MONITOR)"
FERRY_NO_USERFAULTFD=1 says 0 "invalidated only when the program calls ferry_mem_invalidate()"
says 2 "usage:" --bogus

# Names: a mistyped provider gets the nearest real one; a provider that
# FI_PROVIDER filtered out says so instead of "no device".
FERRY_PROVIDER=tcpp says 1 "libfabric has no provider named 'tcpp'; did you mean 'tcp'?"
FI_PROVIDER=verbs says 1 "tcp: excluded by FI_PROVIDER=verbs"
FI_PROVIDER=tcpp says 1 "FI_PROVIDER: libfabric has no provider named 'tcpp'"
says 0 "tcp;ofi_rxm: rxm (reliable datagrams) over tcp's connected endpoints"
# The domain on the route to the peer, and the sentence says so.
FERRY_PEER_HOST=127.0.0.1 says 0 "chose tcp;ofi_rxm on domain lo" --provider 'tcp;ofi_rxm'
FERRY_PEER_HOST=127.0.0.1 says 0 "the interface that routes to peer host 127.0.0.1" --provider 'tcp;ofi_rxm'
FERRY_PEER_HOST=no-such-host.invalid says 1 "peer host 'no-such-host.invalid' does not resolve"
# /dev/shm's room is reported whichever way shm goes.
says 0 "/dev/shm has "
says 0 "/dev/shm has " --local
# libfabric's MR cache: what ferry did to it, and the opt-out.
says 0 "ferry turned libfabric's MR cache off for this process"
FERRY_KEEP_FI_MR_CACHE=1 says 0 "left on because FERRY_KEEP_FI_MR_CACHE=1"
FERRY_KEEP_FI_MR_CACHE=yes says 2 "FERRY_KEEP_FI_MR_CACHE=yes is neither 1"
# The bootstrap's protection, and a warning when it is turned off.
says 0 "bootstrap: no token: listens on loopback only"
FERRY_OOB_TOKEN=s3cret says 0 "bootstrap: token set: peers prove it"
FERRY_OOB_INSECURE=1 says 0 "the bootstrap may listen beyond loopback without a token"
FERRY_METADATA=etcd://127.0.0.1:2379/x says 0 "metadata service: etcd://127.0.0.1:2379/x"
# Nothing false about device memory: no blanket "not supported".
if "$tool" 2>&1 | grep -F "not supported by this ferry release" >/dev/null; then
	fail "ferry_info still claims device memory is unsupported"
else
	echo "PASS: ferry_info makes no blanket claim about device memory"
fi

# Candidates are grouped by provider: one heading per provider however
# many domains and addresses it has, and limits a person can read.
"$tool" >"$tmp/text" 2>&1 || true
headings=$(grep -c "^  [* ] tcp;ofi_rxm: " "$tmp/text" || true)
if test "$headings" -eq 1; then
	echo "PASS: tcp;ofi_rxm is one group"
else
	cat "$tmp/text"
	fail "tcp;ofi_rxm appears as $headings headings, expected 1"
fi
if grep -E "up to unlimited|[0-9]{7,} GiB" "$tmp/text" >/dev/null; then
	grep -E "up to unlimited|[0-9]{7,} GiB" "$tmp/text"
	fail "limits printed as raw numbers"
else
	echo "PASS: limits are readable"
fi

# --json is one well-formed object.
if command -v python3 >/dev/null 2>&1; then
	"$tool" --json >"$tmp/json" 2>/dev/null
	if python3 -m json.tool "$tmp/json" >/dev/null; then
		echo "PASS: --json is valid JSON"
	else
		cat "$tmp/json"
		fail "ferry_info --json printed invalid JSON"
	fi
	# refused is a list of {provider, reason}.
	if python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["refused"]
assert isinstance(r, list) and r, r
assert all(set(e) == {"provider", "reason"} and e["reason"] for e in r), r
assert any(e["provider"] == "verbs" for e in r), r' "$tmp/json"; then
		echo "PASS: --json refused is a list of {provider, reason}"
	else
		fail "ferry_info --json: refused is not a list of {provider, reason}"
	fi
fi
exit $status
