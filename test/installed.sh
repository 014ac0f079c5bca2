# Sourced by test/install.sh and test/pip_install.sh: installs ferry
# into a scratch DESTDIR ($tmp/root, removed at exit) and points
# PKG_CONFIG_PATH at a copy of its ferry.pc relocated there.  Needs
# abs_top_builddir, MAKE and PKG_CONFIG; exits 77 without a shared
# library.

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

