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

if ! test -e "$abs_top_builddir/lib/.libs/libferry.so"; then
	echo "SKIP: no libferry.so (static-only build, --disable-shared?): this test checks the shared library"
	exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/root

echo "== make install DESTDIR=$dest"
if ! $MAKE -C "$abs_top_builddir" install DESTDIR="$dest" >"$tmp/install.out" 2>&1; then
	cat "$tmp/install.out"
	echo "FAIL: make install DESTDIR=$dest"
	exit 1
fi

pc=$(find "$dest" -name ferry.pc -path '*/pkgconfig/*' | head -n 1)
if test -z "$pc"; then
	echo "FAIL: make install did not install ferry.pc"
	exit 1
fi
echo "installed $pc"

# Point ferry.pc at the DESTDIR copy.  pkgconf's --define-variable would
# also change prefix in libfabric.pc and hwloc.pc (Requires.private), and
# PKG_CONFIG_SYSROOT_DIR would prefix their -I/-L too, so relocate a copy of
# ferry.pc instead: each of its directory variables that is absolute (not
# written in terms of another) gets $dest in front.
mkdir "$tmp/pc"
sed -e "s|^prefix=/|prefix=$dest/|" \
    -e "s|^exec_prefix=/|exec_prefix=$dest/|" \
    -e "s|^libdir=/|libdir=$dest/|" \
    -e "s|^includedir=/|includedir=$dest/|" "$pc" >"$tmp/pc/ferry.pc"
PKG_CONFIG_PATH=$tmp/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_PATH

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

echo "== run install_probe"
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
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
echo "PASS: the installed ferry builds and runs a program"
