#!/bin/sh
# The manual pages (man/*.md, made into man/*.[137] by man/include.am)
# against what they document, as `make install` installs them.  Fails
#  (a) for a FERRY_API (or FERRY_INLINE) function of include/ferry.h or include/ferry/*.h
#      that no page lists in its NAME section, whose prototype, as the
#      header declares it, is not in that page's SYNOPSIS, or that
#      `man FUNCTION` would not find (no link page);
#  (b) for a page that documents a function that does not exist, and for
#      a page source that is not installed as a page;
#  (c) for a page groff warns about;
#  (d) for an installed program without a page, a page without its
#      program, and a long option a tool's --help prints that its page
#      does not mention.
# Run by `make check` (also in `make distcheck`, where the pages come from
# the tarball).
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
MAKE=${MAKE:-make}
src=$abs_top_srcdir
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-man.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

# The pages as make installs them: what `man` would find.
if ! $MAKE -C "$abs_top_builddir" install-man DESTDIR="$tmp/root" \
	>"$tmp/install.out" 2>&1; then
	cat "$tmp/install.out"
	echo "FAIL: make install-man DESTDIR=$tmp/root"
	exit 1
fi
man3=$(find "$tmp/root" -type d -name man3)
mandir=${man3%/man3}
if test -z "$man3" || ! test -d "$mandir/man1" || ! test -d "$mandir/man7"; then
	find "$tmp/root"
	echo "FAIL: make install-man installed no man1, man3 and man7 directories"
	exit 1
fi

# norm(): a declaration on one line, spaced one way, so that the header's
# layout and the page's may differ.
norm_awk='function norm(s) {
	gsub(/[ \t\n]+/, " ", s)
	gsub(/\( /, "(", s)
	gsub(/ \)/, ")", s)
	gsub(/ ,/, ",", s)
	gsub(/ ;/, ";", s)
	sub(/^ /, "", s)
	sub(/ $/, "", s)
	return s
}'

# Every FERRY_API declaration of the public headers as "NAME DECLARATION",
# without FERRY_API, however many lines it spans.  Comments and
# preprocessor lines (continuations included) go first, then the text is
# cut at each semicolon.
(cd "$src" && awk "$norm_awk"'
	{ text = text $0 "\n" }
	END {
		while ((i = index(text, "/*")) > 0) {
			rest = substr(text, i + 2)
			text = substr(text, 1, i - 1) " " substr(rest, index(rest, "*/") + 2)
		}
		n = split(text, line, "\n")
		text = ""
		for (k = 1; k <= n; k++) {
			if (cont || line[k] ~ /^[ \t]*#/) {
				cont = line[k] ~ /\\$/
				continue
			}
			text = text " " line[k]
		}
		n = split(text, decl, ";")
		for (k = 1; k <= n; k++) {
			d = decl[k]
			# FERRY_INLINE: defined in the header; its declaration
			# ends where its body begins.
			if (sub(/^.*(^|[^A-Za-z0-9_])FERRY_INLINE[ \t]+/, "", d))
				sub(/[ \t]*[{].*$/, "", d)
			else if (!sub(/^.*(^|[^A-Za-z0-9_])FERRY_API[ \t]+/, "", d))
				continue
			if (!match(d, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
				print "cannot find the name in: " d > "/dev/stderr"
				exit 1
			}
			name = substr(d, RSTART, RLENGTH - 1)
			sub(/[ \t]+$/, "", name)
			print name, norm(d) ";"
		}
	}' include/ferry.h include/ferry/*.h) >"$tmp/api"
cut -d' ' -f1 "$tmp/api" | sort >"$tmp/functions"
if ! test -s "$tmp/functions"; then
	fail "found no FERRY_API function in include/ferry.h and include/ferry/*.h"
	exit 1
fi
echo "$(wc -l <"$tmp/functions") FERRY_API functions"

# NAME SECTION PAGE for every name in the NAME sections of the sources.
sources=$(cd "$src" && echo man/*.md)
# shellcheck disable=SC2086 # a list of file names without spaces
sh "$src/man/names.sh" "$src" $sources >"$tmp/names"

# synopsis SOURCE: its SYNOPSIS section on one line, normalised.
synopsis() {
	awk "$norm_awk"'
		/^# / { in_synopsis = $0 == "# SYNOPSIS"; next }
		in_synopsis && !/^```/ { text = text " " $0 }
		END { print norm(text) }' "$1"
}

# (a) Each function: its page, its prototype there, its link page.
while read -r name decl; do
	page=$(awk -v f="$name" '$1 == f && $2 == 3 { printf "%s%s", sep, $3; sep = " " }' "$tmp/names")
	case $page in
	"")
		fail "$name: no page lists it in its NAME section (man/*.3.md)"
		continue
		;;
	*" "*)
		fail "$name: several pages list it in their NAME section: $page"
		continue
		;;
	esac
	if ! synopsis "$src/man/$page.3.md" | grep -F -- "$decl" >/dev/null; then
		fail "$name: the SYNOPSIS of man/$page.3.md lacks its prototype as the header declares it: $decl"
	fi
	if test "$name" = "$page"; then
		test -f "$mandir/man3/$name.3" ||
			fail "$name: its page $name.3 is not installed"
	elif test "$(cat "$mandir/man3/$name.3" 2>/dev/null)" != ".so man3/$page.3"; then
		fail "$name: no link page $name.3 (\".so man3/$page.3\") is installed: add man/$name.3 to ferry_man_links in man/include.am"
	fi
done <"$tmp/api"

# (b) Pages that document functions that are gone: in NAME sections, in
# SYNOPSIS sections, and as link pages.
awk '$2 == 3 { print $1 }' "$tmp/names" | sort -u | comm -23 - "$tmp/functions" |
	while read -r name; do
		echo "FAIL: $name: a NAME section lists it, but no FERRY_API function has that name"
	done >"$tmp/stale"
for page in "$src"/man/*.3.md; do
	synopsis "$page" | grep -o 'ferry_[a-z0-9_]*(' | tr -d '(' | sort -u |
		comm -23 - "$tmp/functions" | while read -r name; do
			echo "FAIL: ${page#"$src"/}: its SYNOPSIS declares $name, which is no FERRY_API function"
		done
done >>"$tmp/stale"
for link in "$mandir"/man3/*.3; do
	name=${link##*/}
	name=${name%.3}
	if head -n 1 "$link" | grep '^\.so ' >/dev/null &&
		! grep -x "$name" "$tmp/functions" >/dev/null; then
		echo "FAIL: man3/$name.3 is a link page, but no FERRY_API function has that name: drop it from ferry_man_links"
	fi
done >>"$tmp/stale"
if test -s "$tmp/stale"; then
	cat "$tmp/stale"
	status=1
fi
for page in $sources; do
	name=${page#man/}
	name=${name%.md}
	section=${name##*.}
	if ! test -f "$mandir/man$section/$name" ||
		head -n 1 "$mandir/man$section/$name" | grep '^\.so ' >/dev/null; then
		fail "$page is not installed as man$section/$name: add it to ferry_man_sources in man/include.am"
	fi
done

# (c) Every installed page, link pages included, rendered from the top of
# the manual tree as man does (".so man3/ferry_xfer.3" is relative to it).
if command -v groff >/dev/null 2>&1; then
	for page in "$mandir"/man*/*; do
		rel=${page#"$mandir"/}
		if ! (cd "$mandir" && groff -man -t -Tutf8 -ww -z "$rel") \
			>"$tmp/groff.out" 2>&1 || test -s "$tmp/groff.out"; then
			cat "$tmp/groff.out"
			fail "groff warns about $rel"
		fi
	done
	echo "groff rendered $(find "$mandir" -type f | wc -l) pages"
else
	groff_missing=yes
fi

# (d) The programs make installs, each with its page, and every long
# option their --help prints in that page.  make says what bin_PROGRAMS
# is, configure's substitutions applied, into a file: under a parallel
# make check its stdout also carries "Entering directory" lines.
# shellcheck disable=SC2016 # $(bin_PROGRAMS) is for make to expand
if ! printf 'ferry-print-bin-programs:\n\t@echo $(bin_PROGRAMS) >$(FERRY_PROGRAMS_TO)\n' |
	$MAKE -s --no-print-directory -C "$abs_top_builddir" -f Makefile -f - \
		FERRY_PROGRAMS_TO="$tmp/programs.line" ferry-print-bin-programs \
		>"$tmp/make.out" 2>&1; then
	cat "$tmp/make.out"
	echo "FAIL: make could not say what bin_PROGRAMS is"
	exit 1
fi
tr ' ' '\n' <"$tmp/programs.line" | grep . >"$tmp/programs"
while read -r prog; do
	name=${prog##*/}
	page=$src/man/$name.1.md
	if ! test -f "$page"; then
		fail "$prog is installed but has no manual page (man/$name.1.md)"
		continue
	fi
	"$abs_top_builddir/$prog" --help </dev/null >"$tmp/help" 2>&1 || true
	options=$(grep -o -- '--[a-z][a-z0-9-]*' "$tmp/help" | sort -u)
	if test -z "$options"; then
		cat "$tmp/help"
		fail "$prog --help names no option"
	fi
	for option in $options; do
		grep -E -- "(^|[^a-z0-9-])$option([^a-z0-9-]|\$)" "$page" >/dev/null ||
			fail "$prog --help prints $option, which man/$name.1.md does not mention"
	done
done <"$tmp/programs"
for page in "$src"/man/*.1.md; do
	name=${page##*/}
	name=${name%.1.md}
	grep -E "(^|/)$name\$" "$tmp/programs" >/dev/null ||
		fail "man/$name.1.md documents a program make does not install"
done

if test "$status" -eq 0 && test "${groff_missing-}" = yes; then
	echo "SKIP: groff is not installed, so the pages could not be checked for troff warnings (Debian: apt-get install groff-base); everything else passed"
	exit 77
fi
test "$status" -eq 0 && echo "PASS: the manual pages match the API and the tools"
exit "$status"
