#!/bin/sh
# Install ferry into a scratch DESTDIR, then build test/install_probe.c with
# only what `pkg-config --cflags --libs ferry` says about that copy, run it,
# and check with ldd that it loaded the installed libferry.  Run by
# `make check` (also inside `make distcheck`: VPATH, read-only srcdir).
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
MAKE=${MAKE:-make}
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}

. "$abs_top_srcdir/test/installed.sh"

cflags=$($PKG_CONFIG --cflags ferry)
libs=$($PKG_CONFIG --libs ferry)
libdir=$($PKG_CONFIG --variable=libdir ferry)
echo "pkg-config --cflags ferry: $cflags"
echo "pkg-config --libs ferry:   $libs"

# FERRY_TEST_CFLAGS carries the build's warnings (-Werror included) and
# sanitizer flags: the public header must compile cleanly in a user's
# program, and a sanitized libferry needs a sanitized executable.
echo "== build install_probe"
# shellcheck disable=SC2086 # the flags are lists of words
$CC ${FERRY_TEST_CFLAGS:-} $cflags -o "$tmp/install_probe" \
	"$abs_top_srcdir/test/install_probe.c" $libs

# Outside /usr ferry.pc records libdir as the run path (configure's
# --disable-pc-rpath aside): the program must start as built, with no
# LD_LIBRARY_PATH, which is what a user outside /usr used to have to set.
case " $libs " in
*" -Wl,-rpath,$libdir "*)
	echo "== run install_probe (run path from ferry.pc, no LD_LIBRARY_PATH)"
	unset LD_LIBRARY_PATH
	;;
*)
	echo "== run install_probe (ferry.pc sets no run path: LD_LIBRARY_PATH=$libdir)"
	LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LD_LIBRARY_PATH
	;;
esac
"$tmp/install_probe"

resolved=$(ldd "$tmp/install_probe" | awk '$1 ~ /^libferry\.so/ { print $3 }')
echo "libferry resolved to: ${resolved:-nothing}"
case $resolved in
"$libdir"/*) ;;
*)
	echo "FAIL: install_probe did not load libferry from $libdir"
	exit 1
	;;
esac

# The examples' sources are installed with a Makefile that builds them
# with pkg-config alone; build a copy, as a user would, and run one.
examples=$(find "$dest" -type d -path '*/doc/ferry/examples' | head -n 1)
if test -z "$examples" || ! test -f "$examples/Makefile"; then
	echo "FAIL: make install did not install the examples and their Makefile under share/doc/ferry/examples"
	exit 1
fi
cp -r "$examples" "$tmp/examples"
echo "== make -C <copy of $examples>"
if ! $MAKE -C "$tmp/examples" CFLAGS="-O0 ${FERRY_TEST_CFLAGS:-}" >"$tmp/examples.out" 2>&1; then
	cat "$tmp/examples.out"
	echo "FAIL: the installed examples do not build with their Makefile"
	exit 1
fi
"$tmp/examples/hello_write" --help >"$tmp/hello.out" 2>&1 || true
if ! grep -q -i usage "$tmp/hello.out"; then
	cat "$tmp/hello.out"
	echo "FAIL: the installed hello_write did not print its usage"
	exit 1
fi
# A user's project may compile as strict C11: the examples (and so the
# code copied from them) build so too, POSIX calls and all.
$MAKE -C "$tmp/examples" clean >/dev/null
if ! $MAKE -C "$tmp/examples" CFLAGS="-O0 -std=c11 -pedantic ${FERRY_TEST_CFLAGS:-}" >"$tmp/examples.out" 2>&1; then
	cat "$tmp/examples.out"
	echo "FAIL: the installed examples do not build with -std=c11 -pedantic"
	exit 1
fi
echo "PASS: the installed ferry builds and runs a program, and its installed examples build (also as strict C11)"
