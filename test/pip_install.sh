#!/bin/sh
# What the README tells Python users to do, checked: make install (into a
# scratch DESTDIR), then `pip install --no-build-isolation ./python`
# against that ferry through pkg-config, offline, into a scratch target;
# the installed module must load the installed libferry (its run path)
# and move data.  Run by make check when configure found a Python that
# can build the module (--with-python).
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
PYTHON=${PYTHON:?run by make check, which sets PYTHON}
MAKE=${MAKE:-make}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}

case ${FERRY_TEST_CFLAGS:-} in
*-fsanitize=*)
	echo "SKIP: a sanitized libferry cannot be loaded by an uninstrumented $PYTHON without preloading its runtime; test/python.sh covers the module in this build, the plain build runs this test"
	exit 77 ;;
esac
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
	echo "SKIP: $PYTHON has no pip (Debian: apt-get install python3-pip)"
	exit 77
fi

. "$abs_top_srcdir/test/installed.sh"
libdir=$($PKG_CONFIG --variable=libdir ferry)

# A copy of the sources: pip builds in place, and distcheck's source
# tree is read-only.  setup.py reads the version from ../VERSION.
mkdir "$tmp/src"
cp -pR "$abs_top_srcdir/python" "$abs_top_srcdir/VERSION" "$tmp/src/"
chmod -R u+w "$tmp/src"
rm -rf "$tmp/src/python/build" "$tmp/src/python/ferry/"*.so

echo "== pip install --no-build-isolation ./python"
if ! (cd "$tmp/src" && "$PYTHON" -m pip install --no-build-isolation \
	--no-index --no-deps --disable-pip-version-check \
	--target "$tmp/site" ./python) >"$tmp/pip.out" 2>&1; then
	cat "$tmp/pip.out"
	echo "FAIL: pip install --no-build-isolation ./python"
	exit 1
fi

so=$(find "$tmp/site/ferry" -name '_ferry*.so' | head -n 1)
resolved=$(ldd "$so" | awk '$1 ~ /^libferry\.so/ { print $3 }')
echo "the module's libferry resolves to: ${resolved:-nothing}"
case $resolved in
"$libdir"/*) ;;
*)
	echo "FAIL: the installed module does not load libferry from $libdir"
	exit 1 ;;
esac

echo "== import ferry and write 1 MiB over shm"
cd "$tmp"
PYTHONPATH=$tmp/site PYTHONDONTWRITEBYTECODE=1 "$PYTHON" - <<'PY'
import ferry

src = bytearray(range(256)) * 4096
dst = bytearray(len(src))
with ferry.Context(provider="shm", local_only=True) as a, \
        ferry.Context(provider="shm", local_only=True, progress_thread=True) as b:
    ms, md = a.register(src), b.register(dst)
    peer = a.add_peer(b.address())
    rm = peer.import_region(md.export())
    peer.write(ms, rm, notify=(1, 1)).wait(timeout=10)
    b.counter_wait(1, 1, timeout=10)
    assert dst == src, "the data moved differs"
print("ferry", ferry.__version__, "from", ferry.__file__, ": 1 MiB written and checked")
PY
echo "PASS: pip installed the module against the installed ferry, and it moves data"
