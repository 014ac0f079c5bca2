#!/bin/sh
# docs/troubleshooting.md against the code.  Fails naming
#  - each code of ferry's error table (FERRY_ERRNO_MAP, include/ferry/
#    errno.h) without its section "### FERRY_NAME (value)", or whose
#    section lacks its ferry_strerror() text or its Python class;
#  - each such section naming a code the table lacks, or the wrong value;
#  - each sentence the document quotes as ferry's (a line "> `...`") that
#    no string of lib/, tools/, bench/ or python/src prints any more.  A
#    quote must match one whole format string, where each conversion
#    (%s, %zu...) stands for a <placeholder> or for one word.
# Run by `make check` (also inside `make distcheck`: read-only srcdir).
set -eu

: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
CC=${CC:-cc}
doc=$abs_top_srcdir/docs/troubleshooting.md
tmp=$(mktemp -d "${TMPDIR:-/tmp}/doc-errors.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

# The table as the compiler sees it, one "NAME|VALUE|KIND|TEXT" per line:
# the preprocessor gives the errno-derived values their numbers.
# shellcheck disable=SC2086 # CC may carry flags
if ! printf '%s\n' '#include <ferry/errno.h>' \
	'#define ROW(name, value, kind, text) @#name|(value)|#kind|text' \
	'FERRY_ERRNO_MAP(ROW)' |
	$CC -E -P -I"$abs_top_srcdir/include" - >"$tmp/cpp" 2>"$tmp/cpp.err"; then
	cat "$tmp/cpp.err"
	echo "SKIP: $CC cannot preprocess include/ferry/errno.h, so the table's values are unknown"
	exit 77
fi
tr '@' '\n' <"$tmp/cpp" |
	sed -n 's/^"\([A-Z0-9]*\)"|\(.*\)|"\([A-Za-z]*\)"|"\(.*\)" *$/\1|\2|\3|\4/p' |
	while IFS='|' read -r name value kind text; do
		# shellcheck disable=SC2004 # value is an expression, "(-(1000 + 1))"
		echo "$name|$(($value))|$kind|$text"
	done >"$tmp/table"
if ! test -s "$tmp/table"; then
	echo "FAIL: no rows read from FERRY_ERRNO_MAP in include/ferry/errno.h"
	exit 1
fi

# Each code section: "@NAME VALUE" from its heading, then its lines.
: >"$tmp/sections"
awk -v out="$tmp/sections" '
/^#+ FERRY_/ {
	if ($0 !~ /^### FERRY_[A-Z0-9]+ \(-[0-9]+\)$/) {
		printf "FAIL: docs/troubleshooting.md:%d: a code section is headed \"### FERRY_NAME (value)\", not \"%s\"\n", NR, $0
		bad = 1
	}
	name = $2; sub(/^FERRY_/, "", name)
	value = $3; gsub(/[()]/, "", value)
	print "@" name " " value > out
	insec = 1
	next
}
/^#/ { insec = 0 }
insec { print > out }
END { exit bad }' "$doc" || status=1

# Every code has one section with its value, its text and its class.
while IFS='|' read -r name value kind text; do
	n=$(grep -c "^@$name " "$tmp/sections" || true)
	if test "$n" -ne 1; then
		echo "FAIL: FERRY_$name ($value) has $n sections in docs/troubleshooting.md, expected 1"
		status=1
		continue
	fi
	if ! grep -q "^@$name $value\$" "$tmp/sections"; then
		echo "FAIL: the section of FERRY_$name gives another value than the table's $value"
		status=1
	fi
	# The section as one line: Markdown may wrap a phrase anywhere.
	awk -v name="$name" '/^@/ { on = $1 == "@" name; next } on' \
		"$tmp/sections" | tr -s '\n ' '  ' >"$tmp/body"
	for want in "ferry.${kind}Error" "$text"; do
		if ! grep -qF -- "$want" "$tmp/body"; then
			echo "FAIL: the section of FERRY_$name does not say $want"
			status=1
		fi
	done
done <"$tmp/table"
# ... and every section is of a code the table has.
sed -n 's/^@\([^ ]*\) .*/\1/p' "$tmp/sections" >"$tmp/names"
while read -r name; do
	if ! grep -q "^$name|" "$tmp/table"; then
		echo "FAIL: docs/troubleshooting.md has a section for FERRY_$name, which is not in FERRY_ERRNO_MAP"
		status=1
	fi
done <"$tmp/names"

# Every string literal of the sources, adjacent ones joined ("a" "b", and
# "%" PRIu64 as "%u"), escapes undone, one line of text per line.
find "$abs_top_srcdir/lib" "$abs_top_srcdir/tools" "$abs_top_srcdir/bench" \
	"$abs_top_srcdir/python/src" -name '*.[ch]' -exec cat {} + | awk '
function flush(n, i, part) {
	if (have) {
		n = split(cur, part, "\n")
		for (i = 1; i <= n; i++)
			print part[i]
	}
	cur = ""
	have = 0
}
{
	line = $0
	len = length(line)
	i = 1
	while (i <= len) {
		c = substr(line, i, 1)
		if (incomment) {
			if (substr(line, i, 2) == "*/") {
				incomment = 0
				i++
			}
		} else if (instring) {
			if (c == "\\") {
				c = substr(line, ++i, 1)
				cur = cur (c == "n" ? "\n" : c == "t" ? " " : c)
			} else if (c == "\"") {
				instring = 0
			} else {
				cur = cur c
			}
		} else if (substr(line, i, 2) == "/*") {
			incomment = 1
			i++
		} else if (substr(line, i, 2) == "//") {
			break
		} else if (c == "\"") {
			instring = 1
			have = 1
		} else if (c == "'\''") {
			flush()
			i += substr(line, i + 1, 1) == "\\" ? 3 : 2
		} else if (have && match(substr(line, i), /^PRI[a-zA-Z]/)) {
			cur = cur substr(line, i + 3, 1)
			i += RLENGTH - 1
			while (substr(line, i + 1, 1) ~ /[A-Za-z0-9_]/)
				i++
		} else if (c != " " && c != "\t") {
			flush()
		}
		i++
	}
}
END { flush() }' >"$tmp/strings"

# The quotes, and any other quoted line (they must all be checked ones).
awk '/^>/ {
	if ($0 ~ /^> `[^`]+`$/)
		print NR "\t" substr($0, 4, length($0) - 4)
	else
		printf "FAIL: docs/troubleshooting.md:%d: a quote is one sentence of ferry in a code span, \"> `...`\"\n", NR > "/dev/stderr"
}' "$doc" >"$tmp/quotes" 2>"$tmp/quote-errors"
if test -s "$tmp/quote-errors"; then
	cat "$tmp/quote-errors"
	status=1
fi
if ! test -s "$tmp/quotes"; then
	echo "FAIL: docs/troubleshooting.md quotes none of ferry's sentences"
	status=1
fi

# Each quote against every format: anchored, a conversion matching a
# <placeholder> or a word; the literal text before a format's first
# conversion picks the formats worth a regular expression.
awk -F '\t' -v strings="$tmp/strings" '
function to_regex(f, re, i, c) {
	re = "^"
	for (i = 1; i <= length(f); i++) {
		c = substr(f, i, 1)
		if (c == "%" && substr(f, i + 1, 1) == "%") {
			re = re "%"
			i++
		} else if (c == "%" && match(substr(f, i), "^" conv)) {
			re = re "(<[^<>]*>|[^ <>]*)"
			i += RLENGTH - 1
		} else if (c ~ /[][\\^$.|?*+(){}]/) {
			re = re "\\" c
		} else {
			re = re c
		}
	}
	return re "$"
}
BEGIN {
	# A printf conversion: %s, %zu, %.*s, %016llx...
	conv = "%[-+ #0]*[0-9*]*(\\.[0-9*]*)?(hh|h|ll|l|L|j|z|t)?[diouxXeEfgGaAcspn]"
	while ((getline f < strings) > 0) {
		# A format must say something itself: "%zu %u %.3f" would
		# match any three words.
		lit = f
		gsub(conv, "", lit)
		if (lit !~ /[A-Za-z]/)
			continue
		n++
		lead[n] = f
		sub(/%.*/, "", lead[n])
		format[n] = f
	}
}
{
	found = 0
	for (k = 1; k <= n && !found; k++) {
		if (index($2, lead[k]) != 1)
			continue
		if (!(k in regex))
			regex[k] = to_regex(format[k])
		found = $2 ~ regex[k]
	}
	if (found) {
		checked++
	} else {
		printf "FAIL: docs/troubleshooting.md:%d: ferry prints no such sentence: `%s`\n", $1, $2
		bad = 1
	}
}
END {
	printf "%d quoted sentences found in the sources\n", checked
	exit bad
}' "$tmp/quotes" || status=1

test "$status" -ne 0 || echo "PASS: docs/troubleshooting.md covers every error code and quotes ferry as it is"
exit $status
