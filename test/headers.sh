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
. "$srcdir/test/cxx.sh"

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

# Every FERRY_..._INIT macro in C++11 code (the first C++ with lambdas):
# without a warning -- g++ -Wextra warned of every member a braced list
# leaves out, before C++20 a designated one is not C++ at all -- and with
# the struct's size in its size field.
inits=0
if test -n "$cxx"; then
	defs=$(grep -h '^#define FERRY_[A-Z_]*_INIT ' ferry/*.h)
	inits=$(printf '%s\n' "$defs" | wc -l)
	{
		printf '#include <ferry.h>\n#include <cstdio>\nint main()\n{\n    int bad = 0;\n'
		printf '%s\n' "$defs" | sed -n 's/^#define \(FERRY_[A-Z_]*_INIT\) FERRY__SIZED_INIT(\(struct [a-z_]*\))$/    { \2 v = \1; if (v.size != sizeof(v)) { std::puts("FAIL: \1: size not set"); bad = 1; } }/p'
		printf '    return bad;\n}\n'
	} >"$tmp/inits.cc"
	if test "$(grep -c '_INIT; ' "$tmp/inits.cc")" -ne "$inits"; then
		echo "FAIL: of $inits FERRY_..._INIT macros, some are not FERRY__SIZED_INIT(struct NAME)"
		status=1
	elif ! $cxx -std=c++11 -Wall -Wextra -pedantic -Werror -I"$srcdir/include" \
		"$tmp/inits.cc" -o "$tmp/inits" 2>"$tmp/err"; then
		head -n 20 "$tmp/err"
		echo "FAIL: the FERRY_..._INIT macros do not compile as C++11 without warnings ($cxx)"
		status=1
	elif ! "$tmp/inits"; then
		status=1
	fi
fi
test "$status" -eq 0 || exit 1
echo "PASS: $n public headers compile alone as C11${cxx:+ and as C++ ($cxx)}"
test "$inits" -eq 0 || echo "PASS: $inits FERRY_..._INIT macros in C++11, without a warning, each setting its size"
