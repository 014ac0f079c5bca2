#!/bin/bash
# The commands the documents print for several machines, typed as
# printed between simulated hosts (test/rig.sh: a network namespace, a
# private /dev/shm and a hostname each; host I is 10.0.0.I, named rig-hI,
# and the tutorial's hosts A, B, C, E are hosts 1, 2, 3, 5):
#
#  - README.md: hello_write's server and client through the bootstrap
#    (HOST is the server's host), and through etcd at the addresses it
#    prints (etcd on 10.0.0.5; 10.0.0.6 has none, so the second endpoint
#    is there but refuses);
#  - docs/tutorial.md: every line that starts "X$ " (X a host), stage by
#    stage; `scp` is a stand-in that copies, since the rig's hosts share
#    one file system, and its /tmp is a directory of this run's own;
#  - python/examples: the two roles of weights.py and kv_disagg.py, as
#    their docstrings print them.
#
# No FERRY_PROVIDER, FERRY_PEER_HOST or FERRY_DOMAIN is set: what the
# documents print must be enough.  Each run must verify every byte, and
# each side must have chosen a network provider on eth0.  Needs root
# (exit 77 otherwise, from the rig, saying why).  Run by make check.

# Make check runs scripts with $(SHELL), which may be a plain sh.
if test -z "${BASH_VERSION:-}"; then
	exec bash "$0" "$@"
fi
set -u

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
src=$abs_top_srcdir
unset FERRY_PROVIDER FERRY_PEER_HOST FERRY_DOMAIN FI_PROVIDER FERRY_METADATA

. "$src/test/rig.sh"
rig_up 6
case $? in
0) ;;
77) exit 77 ;;
*) echo "FAIL: could not make the simulated hosts"; exit 1 ;;
esac
tmp=$rig_dir
passed=0 failed=0
ok() { echo "PASS: $1"; passed=$((passed + 1)); }
not_ok() { echo "FAIL: $1"; failed=$((failed + 1)); }

# The documents' /tmp, this run's own: two runs at once (make check and
# make distcheck on one machine) would share, and remove, the same files
# in the real one.
doc_tmp=$tmp/tmp
mkdir "$doc_tmp"

# documented FILE FRAGMENT: the first line of FILE that contains FRAGMENT,
# with the prompt ("B$ ") and a trailing comment taken off, and /tmp made
# $doc_tmp; fails the test when the document has no such line any more.
documented() {
	local line
	line=$(grep -m1 -F -- "$2" "$1" | sed 's/^ *\([A-Z]\$ \)\{0,1\}//; s/ *# .*$//')
	if [ -z "$line" ]; then
		not_ok "${1#"$src"/} no longer prints a line with \"$2\""
		return 1
	fi
	printf '%s\n' "${line//\/tmp/$doc_tmp}"
}

# start NAME HOST CMD: the command line CMD on rig host HOST, in the
# background, its output in $tmp/NAME.
start() {
	rig_bg "$2" "$tmp/$1" timeout 120 bash -c "$3"
	eval "pid_$1=\$rig_pid"
}

# says NAME WORDS: waits up to 60 s until NAME's output has WORDS.
says() {
	local t
	for ((t = 0; t < 600; t++)); do
		grep -q -F -- "$2" "$tmp/$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# ends NAME WORDS...: NAME exits 0 and said each of WORDS.
ends() {
	local name=$1 pid rc=0 w
	shift
	eval "pid=\$pid_$name"
	wait "$pid" || rc=$?
	for w in "$@"; do
		grep -q -F -- "$w" "$tmp/$name" || rc=${rc/#0/missing}
	done
	if [ "$rc" = 0 ]; then
		ok "$run: $name says \"$*\""
	else
		sed "s/^/    $name: /" "$tmp/$name"
		not_ok "$run: $name (exit $rc) did not say \"$*\""
	fi
}

# network NAME: NAME chose a network provider on the hosts' link; the
# line names it (tcp;ofi_rxm on libfabric 1.17, tcp from 1.18 on).
network() {
	local prov
	prov=$(sed -n 's/.*chose \(.*\) on domain eth0 .*/\1/p' "$tmp/$1" | head -n 1)
	if [ -n "$prov" ]; then
		ok "$run: $1 chose the network ($prov on domain eth0)"
	else
		sed "s/^/    $1: /" "$tmp/$1"
		not_ok "$run: $1 did not choose domain eth0"
	fi
}

export PATH=$abs_top_builddir/examples:$PATH

# ---- README.md ----------------------------------------------------------

readme=$src/README.md
# The README wraps the two commands inside one paragraph.
flat=$tmp/readme.flat
tr '\n' ' ' <"$readme" | sed 's/  */ /g' >"$flat"
server=$(grep -o 'FERRY_OOB_TOKEN=S hello_write server :18515' "$flat" | head -n 1)
client=$(grep -o 'FERRY_OOB_TOKEN=S hello_write client HOST:18515' "$flat" | head -n 1)
if [ -z "$server" ] || [ -z "$client" ]; then
	not_ok "README.md no longer prints the two bootstrap commands"
else
	run="README, bootstrap"
	start server 1 "$server --size 16M"
	if says server "published as"; then
		start client 2 "${client/HOST/rig-h1} --size 16M"
		ends client "then 7 x 16.0 MiB in"
		network client
	fi
	ends server "bytes verified: OK"
	network server
fi

if server=$(documented "$readme" "hello_write server --metadata etcd://") &&
	client=$(documented "$readme" "hello_write client kv0 --metadata etcd://"); then
	run="README, etcd"
	# Not in $(...): rig_bg records etcd's pid in this shell, to stop it
	# below (a subshell's record was lost, and etcd outlived the test).
	rig_etcd 5 >/dev/null || not_ok "$run: etcd on host 5"
	readme_etcd=$rig_pid
	start server 3 "$server --size 16M"
	if says server "published as"; then
		start client 4 "$client --size 16M"
		ends client "then 7 x 16.0 MiB in"
		network client
	fi
	ends server "bytes verified: OK"
	network server
	# Gone before the tutorial's etcd listens at the same address.
	kill "$readme_etcd" 2>/dev/null
	wait "$readme_etcd" 2>/dev/null
fi

# ---- docs/tutorial.md ---------------------------------------------------

tutorial=$src/docs/tutorial.md
bin=$tmp/tutorial/bin
if sh "$src/test/doc_tutorial.sh" --build-only "$tmp/tutorial" >"$tmp/build.log" 2>&1; then
	# scp HOST:DIR stand-in: the rig's hosts share this file system.
	printf '#!/bin/sh\n# scp SRC... HOST:DIR, as cp\nfor d; do :; done\nn=$(($# - 1))\nwhile [ "$n" -gt 0 ]; do cp "$1" "${d#*:}"; shift; n=$((n - 1)); done\n' >"$bin/scp"
	chmod +x "$bin/scp"
	cd "$bin" || exit 1
	export PATH=$bin:$PATH
	written="prefill: sequence 7: 32 blocks written into"
	verified="sequence 7: checked 32 slots with blocks and 224 without: OK"

	# decode_then_prefill DECODE READY PREFILL [BETWEEN]: decode's command
	# on host B until it says READY, then BETWEEN on B (the blobs' copy),
	# then prefill's on host A; both must say that every block arrived.
	decode_then_prefill() {
		start decode 2 "$1"
		if says decode "$2"; then
			[ -z "${4:-}" ] || rig_on 2 bash -c "$4" || not_ok "$run: $4"
			start prefill 1 "$3"
			ends prefill "$written decode's pool"
			network prefill
		fi
		ends decode "decode: $verified"
	}

	run="tutorial stage 1 (files)"
	if decode=$(documented "$tutorial" "B\$ mkdir -p /tmp/kv && ./decode_files") &&
		copy=$(documented "$tutorial" "B\$ scp /tmp/kv/decode.addr") &&
		prefill=$(documented "$tutorial" "A\$ ./prefill_files"); then
		decode_then_prefill "$decode" "decode: ready" "$prefill" "$copy"
	fi

	run="tutorial stage 2 (bootstrap)"
	if decode=$(documented "$tutorial" "B\$ FERRY_OOB_TOKEN=s3cret ./decode_boot :18515") &&
		prefill=$(documented "$tutorial" "A\$ FERRY_OOB_TOKEN=s3cret ./prefill_boot 10.0.0.2:18515"); then
		decode_then_prefill "$decode" "decode: joined bootstrap://" "$prefill"
	fi

	run="tutorial stage 3 (etcd)"
	if etcd=$(documented "$tutorial" "E\$ etcd --data-dir") &&
		decode0=$(documented "$tutorial" "B\$ ./decode_meta etcd://10.0.0.5:2379/kv decode-0") &&
		decode1=$(documented "$tutorial" "C\$ ./decode_meta etcd://10.0.0.5:2379/kv decode-1") &&
		prefill=$(documented "$tutorial" "A\$ ./prefill_meta etcd://10.0.0.5:2379/kv 2"); then
		start etcd 5 "exec $etcd"
		etcd_pid=$rig_pid
		for ((t = 0; t < 200; t++)); do
			rig_on 1 bash -c 'exec 3<>/dev/tcp/10.0.0.5/2379' 2>/dev/null && break
			sleep 0.1
		done
		start decode0 2 "$decode0"
		start decode1 3 "$decode1"
		start prefill 1 "$prefill"
		ends prefill "$written decode-"
		network prefill
		ends decode0 "decode-0: $verified"
		ends decode1 "decode-1: $verified"
		kill "$etcd_pid" 2>/dev/null
	fi
	cd "$tmp" || exit 1
else
	cat "$tmp/build.log"
	not_ok "the tutorial's programs did not build"
fi

# ---- python/examples ----------------------------------------------------

. "$src/test/python_env.sh"
if [ ! -e "$abs_top_builddir/lib/.libs/libferry.so" ] || [ -z "${PYTHON:-}" ]; then
	echo "SKIP: python/examples: no shared libferry or no \$PYTHON"
elif [ -n "$python_skip" ]; then
	echo "SKIP: python/examples: $python_skip"
elif ! bash "$src/test/python.sh" --build-only "$tmp/py" >"$tmp/py.log" 2>&1; then
	cat "$tmp/py.log"
	not_ok "the Python module did not build"
else
	export PYTHONPATH=$tmp/py/lib
	cd "$src" || exit 1
	# example: listener role, what it says once it listens and at the
	# end, the connector's role and what it says at the end.
	while read -r example listener ready done connector sent; do
		file=$src/python/examples/$example.py
		run="python/examples/$example.py"
		if receiver=$(documented "$file" "--role $listener --metadata bootstrap://:") &&
			sender=$(documented "$file" "--role $connector --metadata bootstrap://HOST:"); then
			start listener 1 "${receiver/python3 /$PYTHON }"
			if says listener "${ready//_/ }"; then
				sender=${sender/HOST/rig-h1}
				start connector 2 "${sender/python3 /$PYTHON }"
				ends connector "${sent//_/ }"
			fi
			ends listener "${done//_/ }"
		fi
	done <<-'EOT'
	weights receiver published tensors_equal_to_the_sender's sender sender:_wrote
	kv_disagg decode published decode:_verified prefill prefill:_pushed
	EOT
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
