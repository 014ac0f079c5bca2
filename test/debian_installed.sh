#!/bin/sh
# The installed Debian packages (libferry1, libferry-dev, ferry-tools,
# python3-ferry) as a user meets them: a program built with nothing but
# `pkg-config --cflags --libs ferry` runs and loads /usr's libferry, so
# do the examples libferry-dev ships, the tools run from /usr/bin and move
# data, the manual pages are found, and Debian's python3 imports the
# module from /usr.  Not part of make check:
# scripts/debian.sh installs the packages and runs it, from outside the
# source tree, in an environment with no LD_LIBRARY_PATH or PYTHONPATH.
# Exit 0 pass, 1 fail, 77 when the packages are not installed.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
CC=${CC:-cc}

for p in libferry1 libferry-dev ferry-tools python3-ferry; do
	if test "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed; then
		echo "SKIP: $p is not installed (scripts/debian.sh builds and installs the packages)"
		exit 77
	fi
done

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$multiarch
if ! dpkg-query -S "$libdir/libferry.so.1" 2>/dev/null | grep -q '^libferry1:'; then
	echo "FAIL: $libdir/libferry.so.1 does not belong to libferry1"
	exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

# loads_from FILE: FILE's libferry is libferry1's.  (With /usr merged,
# ldd may name it through /lib: compare the files the names lead to.)
loads_from() {
	resolved=$(ldd "$1" | awk '$1 ~ /^libferry\.so/ { print $3 }')
	if test -n "$resolved" &&
		test "$(readlink -f "$resolved")" = "$(readlink -f "$libdir/libferry.so.1")"; then
		echo "PASS: ${1##*/} loads $resolved"
	else
		fail "${1##*/} loads libferry from '${resolved:-nowhere}', not libferry1's $libdir/libferry.so.1"
	fi
}

# runs WORDS CMD...: CMD exits 0 and prints WORDS.
runs() {
	words=$1
	shift
	code=0
	timeout 120 "$@" >"$tmp/out" 2>&1 || code=$?
	if test "$code" -ne 0; then
		cat "$tmp/out"
		fail "$* exited with $code"
	elif ! grep -F -- "$words" "$tmp/out" >/dev/null; then
		cat "$tmp/out"
		fail "$*: the output does not say \"$words\""
	else
		echo "PASS: $* says \"$words\""
	fi
}

# pkg-config must read libferry-dev's ferry.pc, not one a make install
# left in /usr/local (searched first).
pcdir=$(pkg-config --variable=pcfiledir ferry) || pcdir="(none)"
if test "$pcdir" != "$libdir/pkgconfig"; then
	fail "pkg-config reads ferry.pc from $pcdir, not $libdir/pkgconfig (libferry-dev)"
fi
cflags=$(pkg-config --cflags ferry)
libs=$(pkg-config --libs ferry)
echo "pkg-config --cflags --libs ferry: $cflags $libs"
case " $libs " in
*-rpath*) fail "ferry.pc in /usr sets a run path: $libs" ;;
esac
# shellcheck disable=SC2086 # the flags are lists of words
if $CC $cflags -o install_probe "$srcdir/test/install_probe.c" $libs; then
	runs "ferry_version_string() = ferry $(pkg-config --modversion ferry) (" ./install_probe
	loads_from install_probe
else
	fail "test/install_probe.c does not build with pkg-config's flags"
fi

# The examples' sources, built as README.Debian says, and one run.
examples=/usr/share/doc/libferry-dev/examples
if cp -r "$examples" examples && make -C examples >make.out 2>&1; then
	runs "demo: OK" examples/hello_write demo --size 1M --iterations 2
	loads_from examples/hello_write
else
	cat make.out 2>/dev/null || true
	fail "the examples in $examples do not build with their Makefile"
fi

for tool in ferry_info ferry_topo ferry_bench; do
	where=$(command -v "$tool" || true)
	if test "$where" != "/usr/bin/$tool"; then
		fail "$tool is ${where:-not on PATH}, not /usr/bin/$tool"
	fi
	loads_from "/usr/bin/$tool"
done
runs ": ferry would use this one" ferry_info
runs "NICs for host memory" ferry_topo
runs "usage: ferry_bench" ferry_bench --help
# Two processes on this host, a write with notifications, every byte
# checked: the library, its dependencies and the tool work together.
runs "result       OK" ferry_bench --validate --notify --duration 0.3 --warmup 0.1

# The tools' pages (ferry-tools), a function's and the overview
# (libferry-dev).
for page in 1/ferry_info 1/ferry_topo 1/ferry_bench 3/ferry_write 7/ferry; do
	if path=$(man -w "${page%/*}" "${page#*/}" 2>/dev/null); then
		echo "PASS: man ${page%/*} ${page#*/}: $path"
	else
		fail "no manual page ${page#*/}(${page%/*})"
	fi
done

# Debian's interpreter, not one earlier on PATH; from $tmp, so nothing
# beside it can shadow the module.
if /usr/bin/python3 -c 'import ferry; print(ferry.__version__, ferry.__file__)' >"$tmp/py" 2>&1; then
	read -r pyversion pyfile <"$tmp/py"
	case $pyfile in
	/usr/lib/python3/dist-packages/ferry/*) echo "PASS: python3 imports ferry $pyversion from $pyfile" ;;
	*) fail "python3 imports ferry from $pyfile, not /usr/lib/python3/dist-packages (python3-ferry)" ;;
	esac
	if test "$pyversion" != "$(pkg-config --modversion ferry)"; then
		fail "ferry.__version__ is $pyversion, libferry-dev's ferry.pc says $(pkg-config --modversion ferry)"
	fi
	loads_from "${pyfile%/*}"/_ferry*.so
else
	cat "$tmp/py"
	fail "/usr/bin/python3 cannot import ferry"
fi
exit $status
