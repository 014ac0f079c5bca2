# Calls between objects, from `nm -A` output: one "A B SYMBOL" line a pair
# of modules, A's object using a symbol B's object defines (one such
# symbol).  An object is named by its member in an archive
# ("ARCHIVE:MEMBER:...") or by its file ("FILE:..."), less the directory,
# a libtool prefix (lib..._la-) and ".o": its stem.  Given srcs (source
# paths, one a line), a module is the one source of its object's stem, and
# an object without one is named on stderr and fails the run (exit 1);
# without srcs, the module is the stem.  Used by test/layers.sh (lib/) and
# test/python.sh (python/src).
BEGIN {
	n = split(srcs, s, "\n")
	for (i = 1; i <= n; i++) {
		stem = s[i]
		sub(/.*\//, "", stem)
		sub(/\.c$/, "", stem)
		# Two sources of one stem: their objects cannot be told apart.
		if (stem in src)
			src[stem] = ""
		else
			src[stem] = s[i]
	}
	by_source = n > 0
}
{
	parts = split($1, p, ":")
	object = parts >= 3 ? p[2] : p[1]
	stem = object
	sub(/.*\//, "", stem)
	sub(/^lib[A-Za-z0-9_]*_la-/, "", stem)
	sub(/\.o$/, "", stem)
	module = stem
	if (by_source) {
		if (!(stem in src) || src[stem] == "") {
			if (!(object in said))
				print "layers: FAIL: object " object " matches no single lib/ source" > "/dev/stderr"
			said[object] = 1
			bad = 1
			next
		}
		module = src[stem]
	}
	type = $(NF - 1)
	if (type == "U")
		uses[module, $NF] = 1
	else if (type ~ /^[TDBRC]$/)
		def[$NF] = module
}
END {
	for (k in uses) {
		split(k, q, SUBSEP)
		if ((q[2] in def) && def[q[2]] != q[1] && !((q[1], def[q[2]]) in done)) {
			done[q[1], def[q[2]]] = 1
			print q[1], def[q[2]], q[2]
		}
	}
	exit bad
}
