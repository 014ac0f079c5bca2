#!/bin/sh
# The names each manual page documents, read from the NAME sections of the
# pages' sources (man/PAGE.SECTION.md), whose first paragraph reads
# "ferry_write, ferry_read, ... - what they do".
#
#   names.sh SRCDIR SOURCE...
#       one line per name: NAME SECTION PAGE ("ferry_write 3 ferry_xfer")
#   names.sh --so LINK SRCDIR SOURCE...
#       the text of the link page LINK (man/ferry_write.3):
#       ".so man3/ferry_xfer.3", naming the page that documents it
#
# SOURCE is relative to SRCDIR.  make runs the second form to make the link
# pages (man/include.am), so that `man ferry_write` finds ferry_xfer(3);
# test/man_pages.sh runs the first.
set -eu

link=
if test "${1-}" = --so; then
	link=$2
	shift 2
fi
srcdir=$1
shift

# names SOURCE: the NAME lines of one source.
names() {
	file=${1##*/}
	file=${file%.md}
	awk -v page="${file%.*}" -v section="${file##*.}" '
		/^# / { in_name = ($0 == "# NAME"); next }
		in_name && NF == 0 && text != "" { in_name = 0 }
		in_name { text = text " " $0 }
		END {
			# Only what precedes the " - " that starts the description.
			if (!sub(/ - .*/, "", text)) {
				printf "%s: its NAME section has no \"NAME, ... - description\" line\n", FILENAME > "/dev/stderr"
				exit 1
			}
			n = split(text, name, ",")
			for (i = 1; i <= n; i++) {
				gsub(/[ \t]/, "", name[i])
				if (name[i] != "")
					print name[i], section, page
			}
		}' "$srcdir/$1"
}

if test -z "$link"; then
	for src; do
		names "$src"
	done
	exit 0
fi

want=${link##*/}
want_section=${want##*.}
want=${want%.*}
for src; do
	names "$src"
done | awk -v want="$want" -v section="$want_section" -v link="$link" '
	$1 == want && $2 == section { print ".so man" section "/" $3 "." section; found = 1; exit }
	END {
		if (!found) {
			printf "%s: no page lists %s in its NAME section (man/*.%s.md)\n", link, want, section > "/dev/stderr"
			exit 1
		}
	}'
