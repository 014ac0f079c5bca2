#!/bin/sh
# Every public header compiles on its own (a user may include just
# <ferry/meta.h>), as C11 with -Wall -Wextra -pedantic -Werror, and as
# C++ when a C++ compiler is there: each brings what it uses and guards
# itself with extern "C".  Run by `make check`.
set -eu

srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/headers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cxx=
for c in "${CXX:-}" c++ g++ clang++; do
	if test -n "$c" && command -v "$c" >/dev/null 2>&1; then
		cxx=$c
		break
	fi
done

status=0
n=0
cd "$srcdir/include"
for h in ferry.h ferry/*.h; do
	n=$((n + 1))
	printf '#include <%s>\n#include <%s>\n' "$h" "$h" >"$tmp/t.c"
	# shellcheck disable=SC2086 # CC may carry flags
	if ! $CC -std=c11 -Wall -Wextra -pedantic -Werror -fsyntax-only \
		-I"$srcdir/include" "$tmp/t.c" 2>"$tmp/err"; then
		cat "$tmp/err"
		echo "FAIL: <$h> does not compile alone as C11 (included twice)"
		status=1
	fi
	if test -n "$cxx"; then
		cp "$tmp/t.c" "$tmp/t.cc"
		if ! $cxx -Wall -Wextra -Werror -fsyntax-only -I"$srcdir/include" \
			"$tmp/t.cc" 2>"$tmp/err"; then
			cat "$tmp/err"
			echo "FAIL: <$h> does not compile alone as C++ ($cxx)"
			status=1
		fi
	fi
done
test "$status" -eq 0 || exit 1
echo "PASS: $n public headers compile alone as C11${cxx:+ and as C++ ($cxx)}"
