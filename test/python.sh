#!/bin/sh
# The Python module's test suite: builds python/ in the build tree
# (python-build/, never in the source tree, which distcheck makes
# read-only) against this build's libferry, with the build's warning and
# sanitizer flags, then runs its pytest suite.  Run by make check when
# configure found a Python that can (--with-python).
set -eu

srcdir=${abs_top_srcdir:?run by make check}
builddir=${abs_top_builddir:?run by make check}
PYTHON=${PYTHON:?run by make check}
out=$builddir/python-build
# --build-only DIR: build the module into DIR/lib and stop (test/hosts.sh).
if test "${1:-}" = --build-only; then
	out=${2:?--build-only DIR}
fi
libs=$builddir/lib/.libs

if ! test -e "$libs/libferry.so"; then
	echo "SKIP: $libs/libferry.so not found: the module needs the shared library (--disable-shared?)"
	exit 77
fi
flags=${FERRY_TEST_CFLAGS:-}
. "$srcdir/test/python_env.sh"
if test -n "$python_skip"; then
	echo "SKIP: $python_skip"
	exit 77
fi

rm -rf "$out"
mkdir -p "$out"
echo "building the module in $out against $libs"
(cd "$srcdir/python" &&
	FERRY_INCLUDE_DIR=$srcdir/include FERRY_LIB_DIR=$libs FERRY_PY_CFLAGS=$flags \
	PYTHONDONTWRITEBYTECODE=1 "$PYTHON" setup.py -q build \
		--build-base "$out/tmp" --build-lib "$out/lib" 2>&1 |
	grep -v -e 'Deprecat' -e '^ *\*\*\*' -e 'setup.py install' -e 'standards-based' -e 'pypa' -e 'See https' -e '^ *$' -e 'warnings.warn' -e '^ *!!' -e 'byte-compiling is disabled' || true)
test -e "$out"/lib/ferry/_ferry*.so || { echo "FAIL: the module did not build"; exit 1; }

# No circle of calls among the module's files (python/src/*.c), from its
# objects: "A B SYMBOL" when A's object uses a symbol B's defines; tsort
# names the files of a loop.
edges=$(find "$out/tmp" -name '*.o' -print | sort | xargs nm -A |
	awk -f "$srcdir/test/call_edges.awk" | sort)
if test -z "$edges"; then
	echo "FAIL: no calls read from the module's objects under $out/tmp"
	exit 1
fi
if ! loop=$(printf '%s\n' "$edges" | cut -d' ' -f1,2 | tsort 2>&1 >/dev/null) ||
	test -n "$loop"; then
	echo "FAIL: python/src has a circle of calls: $loop"
	echo "the calls (file, file it calls, a symbol):"
	printf '%s\n' "$edges" | sed 's/^/  /'
	exit 1
fi
echo "python/src: $(printf '%s\n' "$edges" | cut -d' ' -f1,2 | sort -u | wc -l) pairs of files call one way, no circle"
test "${1:-}" != --build-only || exit 0

cd "$out"
PYTHONPATH=$out/lib PYTHONDONTWRITEBYTECODE=1 exec "$PYTHON" -m pytest \
	-p no:cacheprovider -q -rs --rootdir "$out" "$srcdir/python/tests"
