#!/bin/sh
# Check that libferry.so exports the public API and nothing else: every
# defined dynamic symbol must start with ferry_ (and not ferry__, the
# internal prefix); and that a C++ program links every exported function
# through <ferry.h>.  Run by `make check`; exit 77 (SKIP) when there is no
# shared library to look at.
set -eu

builddir=${abs_top_builddir:-${top_builddir:-.}}
so=$builddir/lib/.libs/libferry.so
NM=${NM:-nm}

if ! test -e "$so"; then
	echo "SKIP: $so not found (static-only build, --disable-shared?)"
	exit 77
fi

# "nm -D --defined-only" prints "value type name[@@version]".  Type A is
# the version node itself (FERRY_1.0).  _init/_fini/_edata/_end/__bss_start
# are put there by the linker when there is no version script to hide them.
table=$("$NM" -D --defined-only "$so")
syms=$(printf '%s\n' "$table" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u)

bad=$(printf '%s\n' "$syms" | grep -v -E '^(ferry_[^_]|_init$|_fini$|_edata$|_end$|__bss_start$)' || true)
count=$(printf '%s\n' "$syms" | grep -c -E '^ferry_[^_]' || true)

echo "$so exports $count ferry_ symbols"
status=0
if test "$count" -eq 0; then
	echo "FAIL: no ferry_ symbol is exported: is FERRY_API missing from include/ferry.h and include/ferry/*.h?"
	status=1
fi
if test -n "$bad"; then
	echo "FAIL: exported symbols outside the public ferry_ API (make them static, or ferry__ without FERRY_API):"
	printf '  %s\n' $bad
	status=1
fi

# Each exported function is declared by <ferry.h> with C linkage: a C++
# program that takes every one's address compiles and links (a header
# without its extern "C" guard would leave C++-mangled names unresolved).
srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
. "$srcdir/test/cxx.sh"
funcs=$(printf '%s\n' "$table" | awk '$2 == "T" && $3 ~ /^ferry_[^_]/ { sub(/@.*/, "", $3); print $3 }' | sort -u)
if test -n "$cxx" && test -n "$funcs"; then
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/symbols.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	{
		printf '#include <ferry.h>\n#include <cstdio>\nint main()\n{\n'
		printf '%s\n' "$funcs" | sed 's/.*/    std::printf("%p\\n", (void *)\&&);/'
		printf '    return 0;\n}\n'
	} >"$tmp/link.cc"
	if $cxx -Wall -Wextra -Werror -I"$srcdir/include" "$tmp/link.cc" \
		-o "$tmp/link" -L"$builddir/lib/.libs" -lferry 2>"$tmp/err"; then
		echo "PASS: $(printf '%s\n' "$funcs" | wc -l) exported functions link from C++ ($cxx)"
	else
		head -n 20 "$tmp/err"
		echo "FAIL: exported functions that a C++ program cannot link through <ferry.h> (undeclared, or without extern \"C\")"
		status=1
	fi
fi
exit $status
