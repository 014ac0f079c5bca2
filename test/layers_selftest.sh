#!/bin/bash
# Self-test of test/layers.sh: builds small fake trees in a temporary
# directory, plants one fault in each, and checks that layers.sh passes the
# clean tree and refuses each fault with exit status 1 and a message that
# names it.  Prints one "ok - ..." or "not ok - ..." line a case and a last
# "N passed, M failed" line; exits 1 when a case failed.  Runs from any
# directory; layers.sh is found beside this script, else in
# $abs_top_srcdir/test.

# Make check runs scripts with $(SHELL), which may be a plain sh.
if test -z "${BASH_VERSION:-}"; then
	exec bash "$0" "$@"
fi
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
layers=$here/layers.sh
if ! test -f "$layers" && test -n "${abs_top_srcdir:-}"; then
	layers=$abs_top_srcdir/test/layers.sh
fi
if ! test -f "$layers"; then
	echo "not ok - layers.sh not found beside $0 nor in \$abs_top_srcdir/test"
	echo "0 passed, 1 failed"
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/layers_selftest.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# put FILE LINE...: write the lines to FILE (under the current tree).
put() {
	local file=$1
	shift
	mkdir -p "$(dirname "$tree/$file")"
	printf '%s\n' "$@" >"$tree/$file"
}

# add FILE LINE...: append the lines to FILE.
add() {
	local file=$1
	shift
	printf '%s\n' "$@" >>"$tree/$file"
}

# A clean tree with a file in every layer, oob, test/api, test/unit and
# bench/fbench.  It has the awkward spellings layers.sh must read: CRLF,
# "#  include", includes inside #if, comments after an include, includes
# in comments.
tree=$tmp/clean
put include/ferry.h '#pragma once'
put include/ferry/errno.h '#pragma once'
put lib/base/a.h '#include "config.h"' '#include "ferry.h"' '#include <stdio.h>'
printf '#include "a.h"\r\n#include "ferry/errno.h"\r\n' >"$tree/lib/base/a.c"
put lib/dev/d.h '#  include "base/a.h" /* why: errors */'
put lib/dev/d.c '#include "d.h"' '#include "base/a.h" // same'
put lib/fabric/f.h '#include "dev/d.h"'
put lib/reg/m.h '#include "fabric/f.h"'
put lib/reg/m.c '#include "config.h"' '#include "m.h"' '#if HAVE_X' '# include "base/a.h"' '#endif'
put lib/xfer/x.h '#include "reg/m.h"'
put lib/xfer/x.c '#include "x.h"' '/* not an include:' '#include "top.h"' '*/'
put lib/top.h '#include "xfer/x.h"'
put lib/progress.c '#include "top.h"' '#include "ferry.h"'
put lib/oob/o.h '#include "base/a.h"'
put lib/oob/o.c '#include "o.h"' '#include "ferry.h"'
put test/testutil.h '#include "ferry.h"'
put test/api/t.c '#include "testutil.h"' '#include "ferry.h"' '#include "config.h"'
put test/unit/u.c '#include "testutil.h"' '#include "reg/m.h"' '#include "top.h"'
put bench/fbench/fbench.h '#include <ferry.h>'
put bench/fbench/main.c '#include "fbench.h"'
put bench/fbench/stats.c '#include "fbench.h"'

passed=0
failed=0

# new_tree NAME: a fresh copy of the clean tree, made the current tree.
new_tree() {
	tree=$tmp/$1
	cp -R "$tmp/clean" "$tree"
}

# check DESCRIPTION STATUS TEXT [BUILDDIR]: run layers.sh on the current
# tree (from another directory), with BUILDDIR's objects if given (never
# make check's own build); it must exit with STATUS and print TEXT (a
# fixed string).
check() {
	local what=$1 want=$2 text=$3 build=${4:-} out rc
	out=$(cd / && abs_top_builddir= bash "$layers" "$tree" $build 2>&1)
	rc=$?
	if test "$rc" -eq "$want" && printf '%s\n' "$out" | grep -q -F -e "$text"; then
		echo "ok - $what"
		passed=$((passed + 1))
	else
		echo "not ok - $what"
		echo "#   wanted exit $want and the text: $text"
		echo "#   got exit $rc and:"
		printf '%s\n' "$out" | sed 's/^/#     /'
		failed=$((failed + 1))
	fi
}

tree=$tmp/clean
check "a clean tree passes" 0 \
	'layers: 13 files, 8 modules, 20 includes: no upward include, no circle; bench/fbench: 3 files, no circle; test/api: only public and test headers'

new_tree upward
put lib/base/x.c '#include "a.h"' '' '#include "reg/m.h"'
check "upward include is refused" 1 \
	'lib/base/x.c:3: includes "reg/m.h" (layer reg): layer base may include base only'

new_tree upward_awkward
printf '#include "d.h"\r\n#ifdef FOO\r\n  #  include "xfer/x.h" /* later */\r\n#endif\r\n' >"$tree/lib/dev/y.c"
check "upward include inside #if, spaced, CRLF, is refused" 1 \
	'lib/dev/y.c:3: includes "xfer/x.h" (layer xfer): layer dev may include base, dev only'

new_tree circle
put lib/reg/p.h '#include "q.h"'
put lib/reg/p.c '#include "p.h"'
put lib/reg/q.h '#pragma once'
put lib/reg/q.c '#include "q.h"' '#include "p.h"'
check "circle inside one folder is refused" 1 \
	'circle: reg/p -> reg/q -> reg/p (lib/reg/p.h:1 includes "q.h"; lib/reg/q.c:2 includes "p.h")'

new_tree oob
add lib/oob/o.c '#include "reg/m.h"'
check "oob including a reg header is refused" 1 \
	'lib/oob/o.c:3: includes "reg/m.h" (layer reg): layer oob may include base, fabric, oob only'

new_tree api
add test/api/t.c '#include "base/a.h"'
check "test/api including a lib header is refused" 1 \
	'test/api/t.c:4: includes "base/a.h" (lib/base/a.h): files under test/api may include only'

new_tree api_via
add test/testutil.h '#include "top.h"'
check "a test header test/api includes may not include a lib header" 1 \
	'test/testutil.h:2: includes "top.h" (lib/top.h): files under test/api may include only'

new_tree unresolved
add lib/reg/m.c '#include "nowhere.h"'
check "unresolvable include is refused" 1 \
	'lib/reg/m.c:6: cannot resolve "nowhere.h"'

new_tree bench
put bench/fbench/stats.h '#include "fbench.h"' '#include "report.h"'
put bench/fbench/report.h '#include "fbench.h"'
put bench/fbench/report.c '#include "report.h"' '#include "stats.h"'
check "bench/fbench circle is refused" 1 \
	'circle: fbench/report -> fbench/stats -> fbench/report (bench/fbench/report.c:2 includes "stats.h"; bench/fbench/stats.h:2 includes "report.h")'

# objects BUILDDIR STEM:CODE...: an archive of one object a STEM (named
# as libtool names the core's) compiled from CODE, as rule 5 reads it.
objects() {
	local build=$1 spec stem
	shift
	mkdir -p "$build/lib/.libs" "$build/src"
	for spec in "$@"; do
		stem=${spec%%:*}
		printf '%s\n' "${spec#*:}" >"$build/src/$stem.c"
		${CC:-cc} -c -o "$build/src/libferry_core_la-$stem.o" "$build/src/$stem.c" ||
			return 1
	done
	ar rc "$build/lib/.libs/libferry-core.a" "$build"/src/*.o
}

# Rule 5: calls, from the objects.  The clean tree's reg/m and xfer/x,
# calling each other through declarations written in place: no include
# says so.
tree=$tmp/clean
objects "$tmp/calls_ok" 'm:void m_fn(void); void m_fn(void) {}' \
	'x:void m_fn(void); void x_fn(void); void x_fn(void) { m_fn(); }'
check "calls one way pass, and are counted" 0 \
	'calls: 1 module pairs, no circle' "$tmp/calls_ok"

objects "$tmp/calls_circle" \
	'm:void x_fn(void); void m_fn(void); void m_fn(void) { x_fn(); }' \
	'x:void m_fn(void); void x_fn(void); void x_fn(void) { m_fn(); }'
check "a call circle the includes do not show is refused" 1 \
	'lib/xfer/x.c calls m_fn (lib/reg/m.c)' "$tmp/calls_circle"
check "and named as a circle" 1 'circle: ' "$tmp/calls_circle"

objects "$tmp/calls_stranger" 'nosuch:void n_fn(void); void n_fn(void) {}'
check "an object of no lib/ source is refused" 1 \
	'object libferry_core_la-nosuch.o matches no single lib/ source' \
	"$tmp/calls_stranger"

echo "$passed passed, $failed failed"
test "$failed" -eq 0
