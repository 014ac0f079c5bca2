#!/bin/sh
# docs/tutorial.md, compiled and run as a reader would.  Every ```c block
# must follow a "<!-- file: NAME -->" line, and the blocks of each file are
# joined in order; a C block without that line fails the test, so none
# escapes compilation.  Each file is compiled as plain C11 with the
# build's warnings and -Werror against the build tree's libferry; each .c
# file with a main() is a program, linked with the .c files without one.
# Then the programs of the three stages run as two (or three) processes
# over loopback and must say that every byte arrived; stage 3 starts a
# private etcd, and is skipped (with the reason) only when etcd is not
# installed or ferry was built without its etcd backend.  Run by make
# check.  With --build-only DIR it compiles and links the programs into
# DIR/bin and stops there (test/hosts.sh runs them between hosts).
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
CC=${CC:-cc}

doc=$abs_top_srcdir/docs/tutorial.md
build_only=
if test "${1:-}" = --build-only; then
	build_only=yes
	tmp=${2:?--build-only DIR}
	mkdir -p "$tmp"
else
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-tutorial.XXXXXX")
fi
etcd_pid=

# stop NAME...: ends those of the programs started as NAME (below) that
# still run; timeout passes the signal on.
stop() {
	for n; do
		if test -e "$tmp/$n.pid" && ! test -e "$tmp/$n.code"; then
			echo "(stopped by the test)" >>"$tmp/$n.out"
			kill "$(cat "$tmp/$n.pid")" 2>/dev/null || true
		fi
	done
}

cleanup() {
	for f in "$tmp"/*.pid; do
		f=${f##*/}
		stop "${f%.pid}"
	done
	test -z "$etcd_pid" || kill -9 "$etcd_pid" 2>/dev/null || true
	# Quietly: the shell would report etcd as killed.
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

# ---- the code blocks, into one file each --------------------------------

mkdir "$tmp/src" "$tmp/obj" "$tmp/bin"
# An HTML comment that spans lines is skipped (the note for editors at
# the top of the page shows the marker in prose).  The paragraph before a
# marker must name the file, so the reader knows where the block goes.
if ! awk -v dir="$tmp/src" '
function complain(msg) {
	printf "%s:%d: %s\n", FILENAME, FNR, msg
	bad = 1
}
infence {
	if ($0 ~ closing) {
		infence = 0
		out = ""
		para = ""
	} else if (out != "") {
		print > out
	}
	next
}
incomment {
	if (index($0, "-->"))
		incomment = 0
	next
}
/^ *(```|~~~)/ {
	match($0, /(```|~~~)/)
	fence = substr($0, RSTART, 3)
	closing = "^ *" fence "+[ \t]*$"
	lang = substr($0, RSTART + 3)
	sub(/^[`~]*[ \t{.]*/, "", lang)
	sub(/[^A-Za-z0-9+]+.*$/, "", lang)
	lang = tolower(lang)
	infence = 1
	if (lang == "c" || lang == "h") {
		if (pending == "")
			complain("a ```" lang " block without a <!-- file: NAME --> line just before it: every C block must belong to a file this test compiles")
		else if (RSTART > 1)
			complain("an indented ```c block: keep C blocks at the left margin")
		else {
			out = dir "/" pending
			blocks++
		}
	} else if (pending != "") {
		complain("<!-- file: " pending " --> is followed by a ```" lang " block, not ```c")
	}
	pending = ""
	next
}
/^<!--.*file:/ {
	if (pending != "")
		complain("<!-- file: " pending " --> has no ```c block after it")
	if ($0 !~ /^<!-- file: [A-Za-z0-9_.-]+\.[ch] -->$/) {
		complain("malformed marker: write <!-- file: NAME.c --> or NAME.h")
		pending = ""
		next
	}
	pending = $3
	if (index(para, "`" pending "`") == 0)
		complain("the paragraph before <!-- file: " pending " --> does not name `" pending "`: say which file the block goes in")
	next
}
/^<!--/ && !index($0, "-->") {
	incomment = 1
	next
}
{
	if (pending != "") {
		complain("text between <!-- file: " pending " --> and its block")
		pending = ""
	}
	if ($0 ~ /^[ \t]*$/) {
		blank = 1
		next
	}
	if (blank)
		para = ""
	para = para " " $0
	blank = 0
}
END {
	if (pending != "")
		complain("<!-- file: " pending " --> has no ```c block after it")
	if (infence)
		complain("a code block is not closed")
	if (blocks == 0)
		complain("no ```c blocks at all")
	exit bad
}' "$doc"; then
	echo "FAIL: $doc: the C blocks cannot all be compiled (above)"
	exit 1
fi
echo "PASS: every C block of docs/tutorial.md belongs to a file: $(cd "$tmp/src" && echo *)"

# ---- compiled, then linked ----------------------------------------------

# FERRY_TEST_CFLAGS carries the build's warnings and sanitizers.  The
# tutorial promises plain C11, so no GNU extensions either.
# shellcheck disable=SC2086 # the flags are lists of words
set -- ${FERRY_TEST_CFLAGS:--Wall -Wextra} -Werror -std=c11 -pedantic-errors \
	-I"$abs_top_srcdir/include"
for h in "$tmp"/src/*.h; do
	test -e "$h" || continue
	if ! $CC "$@" -fsyntax-only -x c "$h"; then
		fail "${h##*/} does not compile on its own"
	fi
done
progs=
libs=
for c in "$tmp"/src/*.c; do
	name=${c##*/}
	name=${name%.c}
	if ! $CC "$@" -c -o "$tmp/obj/$name.o" "$c"; then
		fail "$name.c (from docs/tutorial.md) does not compile"
	elif grep '^int main(' "$c" >/dev/null; then
		progs="$progs $name"
	else
		libs="$libs $tmp/obj/$name.o"
	fi
done
test "$status" -eq 0 || exit 1
# -no-install: a real executable that finds the build's libferry, not a
# libtool wrapper (two copies of which could relink at once).
for p in $progs; do
	# shellcheck disable=SC2086 # $CC and $libs are lists of words
	if ! "$abs_top_builddir/libtool" --quiet --tag=CC --mode=link $CC "$@" \
		-no-install -o "$tmp/bin/$p" "$tmp/obj/$p.o" $libs \
		"$abs_top_builddir/lib/libferry.la"; then
		fail "$p (from docs/tutorial.md) does not link"
	fi
done
test "$status" -eq 0 || exit 1
echo "PASS: compiled and linked:$progs"
if test -n "$build_only"; then
	trap - EXIT
	exit 0
fi

# ---- run ----------------------------------------------------------------

bin=$tmp/bin
# Every peer is on this host: the loopback interface comes first.
FERRY_PEER_HOST=127.0.0.1
export FERRY_PEER_HOST

# start NAME CMD...: CMD in the background for at most 60 s.  Its output
# goes to $tmp/NAME.out, its pid to $tmp/NAME.pid, and its exit status to
# $tmp/NAME.code once it has ended.
start() {
	name=$1
	shift
	# Now, not in the background: nothing may read an earlier run's files.
	rm -f "$tmp/$name.pid" "$tmp/$name.code"
	: >"$tmp/$name.out"
	# The pid and the code appear whole (written aside, then renamed):
	# stop and ends read them as soon as they exist, which could be
	# between the background shell's creating the file and writing it.
	(
		timeout 60 "$@" >"$tmp/$name.out" 2>&1 &
		echo $! >"$tmp/$name.pid.new"
		mv "$tmp/$name.pid.new" "$tmp/$name.pid"
		code=0
		wait $! || code=$?
		echo "$code" >"$tmp/$name.code.new"
		mv "$tmp/$name.code.new" "$tmp/$name.code"
	) &
}

# ready NAME WORDS: waits until NAME says WORDS (0), or ends without
# saying them (1).
ready() {
	until grep -F -- "$2" "$tmp/$1.out" >/dev/null 2>&1; do
		test -e "$tmp/$1.code" && return 1
		sleep 0.1
	done
}

# ends NAME WORDS [PARTNER...]: NAME exits 0 and has said WORDS; if not,
# its partners are stopped rather than left waiting for it.  $run names
# the run.
ends() {
	name=$1
	words=$2
	shift 2
	until test -e "$tmp/$name.code"; do
		sleep 0.1
	done
	code=$(cat "$tmp/$name.code")
	if test "$code" -eq 0 && grep -F -- "$words" "$tmp/$name.out" >/dev/null; then
		echo "PASS: $run: $name says \"$words\""
	else
		sed "s/^/    $name: /" "$tmp/$name.out"
		fail "$run: $name exited with $code, expected 0 and \"$words\""
		stop "$@"
	fi
}

written="prefill: sequence 7: 32 blocks written into"
verified="sequence 7: checked 32 slots with blocks and 224 without: OK"

# Stage 1: the blobs through files in a directory.
for provider in tcp shm; do
	run="stage 1 (files) over $provider"
	FERRY_PROVIDER=$provider
	export FERRY_PROVIDER
	mkdir "$tmp/blobs-$provider"
	start decode "$bin/decode_files" "$tmp/blobs-$provider"
	if ready decode "decode: ready"; then
		start prefill "$bin/prefill_files" "$tmp/blobs-$provider"
		ends prefill "$written decode's pool" decode
	fi
	ends decode "decode: $verified"
done
FERRY_PROVIDER=tcp

# Stage 2: the bootstrap, on loopback without a token (as on one
# machine), then on every address with one (as on two): decode comes
# first, on a free port, which it names.  Then prefill first, as the hub,
# at a free port the test chooses: either side may come first.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
unset FERRY_OOB_TOKEN
for listen in 127.0.0.1:0 :0; do
	if test "$listen" = :0; then
		FERRY_OOB_TOKEN=tutorial-secret
		export FERRY_OOB_TOKEN
	fi
	run="stage 2 (bootstrap) decode first on $listen${FERRY_OOB_TOKEN:+ with a token}"
	start decode "$bin/decode_boot" "$listen"
	if ready decode "decode: joined bootstrap://"; then
		port=$(sed -n 's|^decode: joined bootstrap://[^ ]*:\([0-9]*\)$|\1|p' "$tmp/decode.out")
		start prefill "$bin/prefill_boot" "127.0.0.1:$port"
		ends prefill "$written decode's pool" decode
	fi
	ends decode "decode: $verified"
done
unset FERRY_OOB_TOKEN
run="stage 2 (bootstrap) prefill first"
port=$(free_port)
start prefill "$bin/prefill_boot" "127.0.0.1:$port"
if ready prefill "prefill: joined bootstrap://127.0.0.1:$port"; then
	start decode "$bin/decode_boot" "127.0.0.1:$port"
	ends decode "decode: $verified" prefill
fi
ends prefill "$written decode's pool"

# Stage 3: etcd on free loopback ports, two decode workers, and a prefill
# that serves both as they join.
etcd=${FERRY_TEST_ETCD_DIR:-/usr/bin}/etcd
etcdctl=${FERRY_TEST_ETCD_DIR:-/usr/bin}/etcdctl
if ! grep '^#define FERRY_HAVE_ETCD 1' "$abs_top_builddir/config.h" >/dev/null; then
	echo "SKIP: stage 3: this ferry was built without its etcd backend (configure found no libcurl or json-c)"
	exit $status
fi
if ! test -x "$etcd" || ! test -x "$etcdctl"; then
	echo "SKIP: stage 3: no $etcd or no $etcdctl (apt-get install etcd-server etcd-client, or set FERRY_TEST_ETCD_DIR)"
	exit $status
fi
client=127.0.0.1:$(free_port)
peer=127.0.0.1:$(free_port)
"$etcd" --name tutorial --data-dir "$tmp/etcd" \
	--listen-client-urls "http://$client" --advertise-client-urls "http://$client" \
	--listen-peer-urls "http://$peer" --initial-advertise-peer-urls "http://$peer" \
	--initial-cluster "tutorial=http://$peer" >"$tmp/etcd.log" 2>&1 &
etcd_pid=$!
tries=0
until ETCDCTL_API=3 "$etcdctl" --endpoints "$client" endpoint health >/dev/null 2>&1; do
	tries=$((tries + 1))
	if test "$tries" -gt 150; then
		cat "$tmp/etcd.log"
		fail "etcd did not become healthy on $client within 30 s"
		exit 1
	fi
	sleep 0.2
done
run="stage 3 (etcd)"
url=etcd://$client/tutorial
start decode0 "$bin/decode_meta" "$url" decode-0
start decode1 "$bin/decode_meta" "$url" decode-1
start prefill "$bin/prefill_meta" "$url" 2
# Exit 0 means it served both workers, in whichever order they joined.
ends prefill "$written decode-" decode0 decode1
ends decode0 "decode-0: $verified"
ends decode1 "decode-1: $verified"
exit $status
