#!/bin/bash
# Check the include and call structure of the tree.
# Usage: test/layers.sh [SRCDIR [BUILDDIR]]
# (SRCDIR defaults to $abs_top_srcdir, else the directory above this
# script's; it is only read, so a read-only srcdir under distcheck is fine.
# BUILDDIR defaults to $abs_top_builddir; rule 5 needs it built.)
#
#  1. No upward include: lib/ is a stack of layers (LAYERS below, lowest
#     first; the files directly in lib/ are layer "top").  A file may include
#     headers of its own layer and of the layers below it, the public headers
#     (include/) and "config.h".  lib/oob sits beside the stack, above the
#     public API: it may include only OOB_MAY_INCLUDE (and include/).
#  2. No circle among lib's modules.  A module is folder + file stem
#     (lib/reg/mem.c and lib/reg/mem.h are module reg/mem); every quoted
#     include of a .c or .h file is an edge.
#  3. Files under test/api, and the test headers they include, include only
#     public headers and test headers (test/, test/api/), never a lib/ header.
#     test/unit may include anything.  Skipped when there is no test/api.
#  4. No circle among bench/fbench's modules.
#  5. No circle of calls among lib's modules: module A calls module B when
#     A's object refers to a symbol B's object defines (nm on
#     BUILDDIR/lib/.libs/libferry-core.a, the objects of every lib/ file).
#     An include-only check misses a call made through a declaration
#     written in place, or a function pointer named in a table.  Without a
#     built BUILDDIR the summary says the calls were not looked at.
#
# A quoted include resolves in the including file's directory, then (for
# files under test/api and test/unit) test/api/, (for files under test/)
# test/, then lib/, then include/; one that resolves
# nowhere is an error.  "config.h" (made by configure) is always fine.
# System includes (<...>) are not looked at.  Includes inside #if blocks
# count; includes inside comments do not.
#
# Exit 0 with a one-line summary when all is well; otherwise print every
# problem and exit 1.  test/layers_selftest.sh checks this script.

# The layers of lib/, lowest first.  lib/NAME/ is layer NAME; the files
# directly in lib/ are layer "top".  A new layer is one word here.
LAYERS="base dev fabric reg xfer progress fan top"
# lib/oob is above the public API and beside the stack: what it may include
# (fabric: the context's configuration, for the shared secret).
OOB_MAY_INCLUDE="base fabric oob"

# Make check runs scripts with $(SHELL), which may be a plain sh.
if test -z "${BASH_VERSION:-}"; then
	exec bash "$0" "$@"
fi
set -eu
export LC_ALL=C

case " $LAYERS " in
*" top "*) ;;
*)
	echo "layers: FAIL: LAYERS in $0 must name top, the layer of the files directly in lib/" >&2
	exit 1
	;;
esac

if test $# -gt 2 || { test $# -ge 1 && case $1 in -*) true ;; *) false ;; esac; }; then
	echo "usage: $0 [SRCDIR [BUILDDIR]]" >&2
	exit 2
fi
builddir=${2:-${abs_top_builddir:-}}
case $builddir in
"" | /*) ;;
*) builddir=$(pwd)/$builddir ;;
esac
if test $# -ge 1; then
	srcdir=$1
elif test -n "${abs_top_srcdir:-}"; then
	srcdir=$abs_top_srcdir
else
	here=$(dirname "${BASH_SOURCE[0]}")
	srcdir=$here/..
fi
# Rule 5's reader of nm's output, beside this script (found before the cd
# below, which a relative path would not survive).
call_edges=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/call_edges.awk
if ! cd "$srcdir" 2>/dev/null; then
	echo "layers: FAIL: cannot enter source directory $srcdir" >&2
	exit 1
fi
if ! test -d lib; then
	echo "layers: FAIL: $(pwd) has no lib/ directory (wrong SRCDIR?)" >&2
	exit 1
fi

# Regular files under the given directories, hidden ones (.libs, .deps, .git)
# left out, one path a line, sorted.  With -ch: only .c and .h files.
list_files() {
	local only=
	if test "$1" = -ch; then
		only=1
		shift
	fi
	local dirs=()
	local d
	for d in "$@"; do
		test -d "$d" && dirs+=("$d")
	done
	test ${#dirs[@]} -eq 0 && return 0
	if test -n "$only"; then
		find "${dirs[@]}" -name '.?*' -prune -o -type f \( -name '*.c' -o -name '*.h' \) -print
	else
		find "${dirs[@]}" -name '.?*' -prune -o -type f -print
	fi | sort
}

# What is scanned: lib/, bench/fbench/, and when test/api exists, test/api,
# test/unit and the headers directly in test/.
scan=()
while IFS= read -r f; do
	scan+=("$f")
done < <(
	list_files -ch lib
	list_files -ch bench/fbench
	if test -d test/api; then
		list_files -ch test/api test/unit
		find test -maxdepth 1 -type f -name '*.h' | sort
	fi
)
if test ${#scan[@]} -eq 0; then
	echo "layers: FAIL: no .c or .h file under $(pwd)/lib (wrong SRCDIR?)" >&2
	exit 1
fi
# Every file an include may resolve to.
LAYERS_KNOWN=$(list_files lib include test bench)
export LAYERS_KNOWN

# Rule 5's edges, one "CALLER CALLEE SYMBOL" a line (lib/ source paths),
# from the core library's archive: "ARCHIVE:MEMBER:... TYPE SYMBOL" lines,
# a member named libferry_core_la-STEM.o for lib/.../STEM.c.
LAYERS_CALLS=
core=${builddir:+$builddir/lib/.libs/libferry-core.a}
if test -n "$core" && test -f "$core"; then
	if ! LAYERS_CALLS=$(set -o pipefail; nm -A "$core" |
		awk -v srcs="$(list_files -ch lib | grep '\.c$')" \
			-f "$call_edges" | sort); then
		echo "layers: FAIL: cannot read the calls from $core" >&2
		exit 1
	fi
fi
export LAYERS_CALLS

IFS= read -r -d '' prog <<'EOF' || true
BEGIN {
	nlayers = split(layer_list, layer_name, " ")
	for (i = 1; i <= nlayers; i++)
		layer_idx[layer_name[i]] = i
	n = split(oob_list, a, " ")
	for (i = 1; i <= n; i++)
		oob_may[a[i]] = 1
	order = layer_name[1]
	for (i = 2; i <= nlayers; i++)
		order = order " < " layer_name[i]
	n = split(ENVIRON["LAYERS_KNOWN"], a, "\n")
	for (i = 1; i <= n; i++)
		known[a[i]] = 1
	nfiles = 0
	for (i = 1; i < ARGC; i++) {
		files[++nfiles] = ARGV[i]
		scanned[ARGV[i]] = 1
	}
	ninc = 0
	nproblems = 0
	upward = 0
	has_api = (api == "1")
}

FNR == 1 {
	incomment = 0
}

{
	line = $0
	sub(/\r$/, "", line)
	if (incomment || index(line, "/"))
		line = strip_comments(line)
	if (line !~ /^[ \t]*#[ \t]*include[ \t]*"/)
		next
	name = line
	sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", name)
	q = index(name, "\"")
	ninc++
	inc_file[ninc] = FILENAME
	inc_line[ninc] = FNR
	inc_name[ninc] = (q == 0) ? "" : substr(name, 1, q - 1)
	# No closing quote: reported with the others, in order.
	if (q == 0)
		malformed[ninc] = trim(line)
	if (!(FILENAME in first_inc))
		first_inc[FILENAME] = ninc
	last_inc[FILENAME] = ninc
}

# The line with its comments replaced by a space; a /* comment left open
# carries over to the next line (incomment).  Strings and character
# constants are skipped over, so "a//b" is not a comment.
function strip_comments(s,    out, tok, c) {
	out = ""
	while (s != "") {
		if (incomment) {
			c = index(s, "*/")
			if (c == 0)
				return out
			s = substr(s, c + 2)
			incomment = 0
			out = out " "
			continue
		}
		if (!match(s, /\/\*|\/\/|"|'/))
			return out s
		out = out substr(s, 1, RSTART - 1)
		tok = substr(s, RSTART, RLENGTH)
		s = substr(s, RSTART + RLENGTH)
		if (tok == "//")
			return out
		if (tok == "/*") {
			incomment = 1
			continue
		}
		out = out tok
		while (s != "") {
			c = substr(s, 1, 1)
			s = substr(s, 2)
			out = out c
			if (c == "\\") {
				out = out substr(s, 1, 1)
				s = substr(s, 2)
			} else if (c == tok)
				break
		}
	}
	return out
}

function trim(s) {
	sub(/^[ \t]+/, "", s)
	sub(/[ \t]+$/, "", s)
	return s
}

function problem(msg) {
	print msg
	nproblems++
}

# p with "." and ".." components folded away ("" when it climbs out).
function norm(p,    n, k, i, out) {
	n = split(p, comp, "/")
	k = 0
	for (i = 1; i <= n; i++) {
		if (comp[i] == "" || comp[i] == ".")
			continue
		if (comp[i] == "..") {
			if (k == 0)
				return ""
			k--
			continue
		}
		stk[++k] = comp[i]
	}
	out = ""
	for (i = 1; i <= k; i++)
		out = out (i > 1 ? "/" : "") stk[i]
	return out
}

function dirname(p) {
	if (!sub(/\/[^\/]*$/, "", p))
		return "."
	return p
}

function is_test(f) {
	return f ~ /^test\//
}

# Where the include name of file f is searched, in order, as "d1/ d2/ ...".
function search_dirs(f,    d, s) {
	d = dirname(f)
	s = d "/"
	# test/unit suites share the helpers of test/api (their -I).
	if (f ~ /^test\/(api|unit)\// && d != "test/api")
		s = s " test/api/"
	if (is_test(f) && d != "test")
		s = s " test/"
	if (d != "lib")
		s = s " lib/"
	return s " include/"
}

# The path name resolves to from file f, "config.h" for it, or "".
function resolve(f, name,    n, d, i, p) {
	if (name == "config.h")
		return "config.h"
	if (name == "" || name ~ /^\//)
		return ""
	n = split(search_dirs(f), d, " ")
	for (i = 1; i <= n; i++) {
		p = norm(d[i] name)
		if (p != "" && (p in known))
			return p
	}
	return ""
}

# The layer of a path under lib/: a name from the table, "oob", or "?".
function layer_of(p,    rest, k) {
	rest = substr(p, 5)
	k = index(rest, "/")
	if (k == 0)
		return "top"
	rest = substr(rest, 1, k - 1)
	if ((rest in layer_idx) || rest == "oob")
		return rest
	return "?"
}

function folder_of(p,    rest) {
	rest = substr(p, 5)
	return "lib/" substr(rest, 1, index(rest, "/"))
}

# The module of a path: relative to lib/ (or bench/), extension dropped.
function module_of(p) {
	sub(/^(lib|bench)\//, "", p)
	sub(/\.[^.\/]*$/, "", p)
	return p
}

function may_include(from, to) {
	if (from == "oob")
		return (to in oob_may)
	return to != "oob" && layer_idx[to] <= layer_idx[from]
}

function allowed_list(from,    s, i) {
	s = ""
	if (from == "oob") {
		for (i = 1; i <= nlayers; i++)
			if (layer_name[i] in oob_may)
				s = s (s == "" ? "" : ", ") layer_name[i]
		if ("oob" in oob_may)
			s = s (s == "" ? "" : ", ") "oob"
		return s
	}
	for (i = 1; i <= layer_idx[from]; i++)
		s = s (i > 1 ? ", " : "") layer_name[i]
	return s
}

# A node of graph g ("L" lib, "B" bench); nodes keep their first-seen order.
function add_node(g, m) {
	if (!((g, m) in is_node)) {
		is_node[g, m] = 1
		node[g, ++nnodes[g]] = m
	}
}

function add_edge(g, a, b, why) {
	add_node(g, a)
	add_node(g, b)
	if (a == b || ((g, a, b) in edge_why))
		return
	edge_why[g, a, b] = why
	adj[g, a, ++nadj[g, a]] = b
}

# Depth-first search; every edge back into the path is a circle.
function dfs(g, u,    i, v, k, s, why) {
	color[g, u] = 1
	path[++depth] = u
	at[g, u] = depth
	for (i = 1; i <= nadj[g, u]; i++) {
		v = adj[g, u, i]
		if (color[g, v] == 1) {
			s = ""
			why = ""
			for (k = at[g, v]; k < depth; k++) {
				s = s path[k] " -> "
				why = why edge_why[g, path[k], path[k + 1]] "; "
			}
			s = s u " -> " v
			why = why edge_why[g, u, v]
			problem("circle: " s " (" why ")")
		} else if (color[g, v] == 0)
			dfs(g, v)
	}
	depth--
	color[g, u] = 2
}

function find_circles(g,    i) {
	depth = 0
	for (i = 1; i <= nnodes[g]; i++)
		if (color[g, node[g, i]] == 0)
			dfs(g, node[g, i])
}

# A test header a test/api file may include: in test/ itself or under test/api.
function is_test_header(r,    d) {
	d = dirname(r)
	return d == "test" || d ~ /^test\/api(\/|$)/
}

# Rule 3: the include number i of a file that test/api reaches.
function check_api(i, via,    f, r) {
	f = inc_file[i]
	r = resolved[i]
	if (r == "" || r == "config.h" || r ~ /^include\// || is_test_header(r))
		return
	problem(f ":" inc_line[i] ": includes \"" inc_name[i] "\" (" r "): " \
	    "files under test/api may include only public headers (include/) and test headers (test/, test/api/)" \
	    (via == "" ? "" : "; " f " is included from " via))
}

END {
	nlib = 0
	nlibinc = 0
	nbench = 0
	# Files in folders that are not layers.
	for (i = 1; i <= nfiles; i++) {
		f = files[i]
		if (f ~ /^lib\//) {
			nlib++
			add_node("L", module_of(f))
			if (layer_of(f) == "?" && !(folder_of(f) in bad_folder)) {
				bad_folder[folder_of(f)] = 1
				problem(folder_of(f) ": not a layer folder (layers, lowest first: " order "; and oob)")
			}
		} else if (f ~ /^bench\//) {
			nbench++
			add_node("B", module_of(f))
		}
	}
	if (nlib == 0)
		problem("lib/: no .c or .h file (wrong SRCDIR?)")
	# Resolve every include.
	for (i = 1; i <= ninc; i++)
		resolved[i] = (i in malformed) ? "" : resolve(inc_file[i], inc_name[i])
	# The files rule 3 holds for: test/api's, and the test headers they
	# reach (breadth first; reached[f] says from where).
	ntodo = 0
	for (i = 1; i <= nfiles; i++)
		if (files[i] ~ /^test\/api\//) {
			todo[++ntodo] = files[i]
			reached[files[i]] = ""
		}
	for (t = 1; t <= ntodo; t++) {
		f = todo[t]
		if (!(f in first_inc))
			continue
		for (i = first_inc[f]; i <= last_inc[f]; i++) {
			r = resolved[i]
			if (is_test_header(r) && (r in scanned) && !(r in reached)) {
				reached[r] = f ":" inc_line[i]
				todo[++ntodo] = r
			}
		}
	}
	# Every include in file order: resolution, rules 1 and 3, the edges.
	for (i = 1; i <= ninc; i++) {
		f = inc_file[i]
		r = resolved[i]
		where = f ":" inc_line[i]
		if (f ~ /^lib\//)
			nlibinc++
		if (i in malformed) {
			problem(where ": malformed include: " malformed[i])
			continue
		}
		if (r == "") {
			problem(where ": cannot resolve \"" inc_name[i] "\" (looked in " search_dirs(f) ")")
			continue
		}
		if (r == "config.h")
			continue
		why = where " includes \"" inc_name[i] "\""
		if (f in reached)
			check_api(i, reached[f])
		if (f ~ /^lib\//) {
			if (r ~ /^include\//)
				continue
			if (r !~ /^lib\//) {
				problem(where ": includes \"" inc_name[i] "\" (" r "): a library file may include only lib/ and include/ headers")
				continue
			}
			add_edge("L", module_of(f), module_of(r), why)
			from = layer_of(f)
			to = layer_of(r)
			if (from == "?" || to == "?" || may_include(from, to))
				continue
			desc = ("lib/" inc_name[i] == r) ? "" : r ", "
			problem(where ": includes \"" inc_name[i] "\" (" desc "layer " to "): layer " from " may include " allowed_list(from) " only")
			upward++
		} else if (f ~ /^bench\// && r ~ /^bench\/fbench\//)
			add_edge("B", module_of(f), module_of(r), why)
	}
	# Rules 2 and 4.
	find_circles("L")
	find_circles("B")
	# Rule 5.
	ncalls = split(ENVIRON["LAYERS_CALLS"], call, "\n")
	for (i = 1; i <= ncalls; i++) {
		split(call[i], c, " ")
		add_edge("C", module_of(c[1]), module_of(c[2]),
		    c[1] " calls " c[3] " (" c[2] ")")
	}
	find_circles("C")

	if (upward > 0) {
		print "layer order, lowest first: " order " (files directly in lib/ are top); " \
		    "lib/oob may include " allowed_list("oob") "; every layer may include include/ and \"config.h\""
	}
	if (nproblems > 0) {
		print "layers: FAIL: " nproblems " problem" (nproblems == 1 ? "" : "s")
		exit 1
	}
	summary = "layers: " nlib " files, " nnodes["L"] " modules, " nlibinc " includes: no upward include, no circle"
	if (nbench > 0)
		summary = summary "; bench/fbench: " nbench " files, no circle"
	summary = summary (has_api ? "; test/api: only public and test headers" : "; no test/api, test rules skipped")
	summary = summary (ncalls > 0 ? "; calls: " ncalls " module pairs, no circle" : "; calls not checked (no built lib/.libs/libferry-core.a)")
	print summary
	exit 0
}
EOF

api=0
test -d test/api && api=1
awk -v layer_list="$LAYERS" -v oob_list="$OOB_MAY_INCLUDE" -v api="$api" \
	"$prog" "${scan[@]}"
