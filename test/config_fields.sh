#!/bin/sh
# The docs against FERRY_CONFIG_FIELDS (<ferry/core.h>), the one list of
# struct ferry_config's fields that ferry's defaults and its Python
# binding are made from: every field must be named in ferry_context(3)
# (as *field*), every variable ferry_config_init reads in the README's
# table and in ferry(7).  Run by `make check`.
set -eu

srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/config-fields.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# One "name variable" line a field, from the list as the compiler sees it.
# shellcheck disable=SC2086 # CC may carry flags
if ! printf '%s\n' '#include <ferry/core.h>' \
	'#define ROW(name, kind, def, var) @ROW name var' \
	'FERRY_CONFIG_FIELDS(ROW)' |
	$CC -E -P -I"$srcdir/include" -x c - >"$tmp/cpp" 2>"$tmp/err"; then
	cat "$tmp/err"
	echo "FAIL: $CC cannot preprocess FERRY_CONFIG_FIELDS"
	exit 1
fi
tr '@' '\n' <"$tmp/cpp" | sed -n 's/^ROW \([a-z_]*\) "\([A-Z_]*\)" *$/\1 \2/p' >"$tmp/rows"
n=$(wc -l <"$tmp/rows")
if test "$n" -lt 20; then
	echo "FAIL: read $n fields from FERRY_CONFIG_FIELDS; expected every field of struct ferry_config"
	exit 1
fi
status=0
while read -r name var; do
	if ! grep -q "\*$name\*" "$srcdir/man/ferry_context.3.md"; then
		echo "FAIL: config.$name is not described in man/ferry_context.3.md (*$name*)"
		status=1
	fi
	test -n "$var" || continue
	for doc in README.md man/ferry.7.md; do
		if ! grep -q "$var" "$srcdir/$doc"; then
			echo "FAIL: $var (config.$name) is not in $doc"
			status=1
		fi
	done
done <"$tmp/rows"
test "$status" -eq 0 || exit 1
echo "PASS: the $n fields of FERRY_CONFIG_FIELDS and their variables are documented"
