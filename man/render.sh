#!/bin/sh
# render.sh PANDOC VERSION SOURCE PAGE: makes the manual page PAGE
# (man/ferry_xfer.3) from its pandoc Markdown SOURCE (man/ferry_xfer.3.md).
# The page's name and section come from its file name, the footer names
# ferry VERSION, and the date is SOURCE_DATE_EPOCH's (reproducible builds)
# or else the source's.  Run by make (man/include.am).
set -eu

pandoc=$1 version=$2 src=$3 page=$4

# Reached only where no page came with the sources: a build from git.
if test -z "$pandoc"; then
	echo "$page: the manual pages are made from man/*.md by pandoc, which configure did not find: install it (Debian: apt-get install pandoc) and run configure again, or build from a release tarball, which carries the pages made" >&2
	exit 1
fi

name=${page##*/}
section=${name##*.}
name=${name%.*}
case $section in
1) header="ferry User Commands" ;;
3) header="ferry Library Functions" ;;
7) header="ferry Overview" ;;
*)
	echo "$page: no manual section $section in ferry (1, 3 or 7)" >&2
	exit 1
	;;
esac
if test -n "${SOURCE_DATE_EPOCH-}"; then
	date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
else
	date=$(date -u -r "$src" +%Y-%m-%d)
fi

# Without "smart" punctuation, -- stays two hyphens (options) rather than
# a dash, and without hyphenation identifiers are never cut at a line's
# end.  Through a temporary file: a page pandoc left half-written would
# look up to date to make.
"$pandoc" --standalone --from markdown-smart --to man \
	--metadata hyphenate=false \
	--metadata title="$name" --metadata section="$section" \
	--metadata header="$header" --metadata footer="ferry $version" \
	--metadata date="$date" --output "$page.tmp" "$src"
mv "$page.tmp" "$page"
