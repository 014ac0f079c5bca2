#!/bin/sh
# lib/README.md's table from each public function to the file that
# defines it, against the code: every FERRY_API function of include/ must
# have its row, naming the one lib/ file whose definition starts a line,
# and the table must name nothing else.  Run by `make check`.
#   test/function_table.sh           check (exit 1 naming each wrong row)
#   test/function_table.sh --print   print the rows the table should have
set -eu

srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
readme=$srcdir/lib/README.md
tmp=$(mktemp -d "${TMPDIR:-/tmp}/function-table.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The rows the code says: "| `name` | `lib/...c` |", sorted by name.
cd "$srcdir"
grep -ho 'FERRY_API [^;]*[ *]ferry_[a-z0-9_]*(' include/ferry.h include/ferry/*.h |
	sed 's/.*[ *]\(ferry_[a-z0-9_]*\)($/\1/' | sort -u >"$tmp/names"
if ! test -s "$tmp/names"; then
	echo "FAIL: no FERRY_API function found in include/"
	exit 1
fi
status=0
while read -r name; do
	files=$(grep -rlE --include='*.c' "^[a-z].*[ *]$name\(" lib | sort)
	case $files in
	"")
		echo "FAIL: $name: no definition starts a line in lib/" >&2
		status=1
		;;
	*"
"*)
		echo "FAIL: $name: defined in more than one file: $(echo $files)" >&2
		status=1
		;;
	*) echo "| \`$name\` | \`$files\` |" ;;
	esac
done <"$tmp/names" >"$tmp/want"
test "$status" -eq 0 || exit 1
if test "${1:-}" = --print; then
	cat "$tmp/want"
	exit 0
fi

# The rows the document has, between its two markers.
sed -n '/^<!-- public functions: begin -->$/,/^<!-- public functions: end -->$/p' \
	"$readme" | grep '^| `ferry_' >"$tmp/have" || true
if ! test -s "$tmp/have"; then
	echo "FAIL: lib/README.md has no rows between <!-- public functions: begin --> and <!-- public functions: end -->"
	exit 1
fi
if ! diff -u "$tmp/have" "$tmp/want" >"$tmp/diff"; then
	cat "$tmp/diff"
	echo "FAIL: lib/README.md's function table differs from the code (- the document, + the code); test/function_table.sh --print gives the rows"
	exit 1
fi
echo "PASS: lib/README.md names the file of each of the $(wc -l <"$tmp/want") public functions"
