#!/bin/bash
# ferry builds against every libfabric from 1.17 to 2.x, but CI has only
# Debian's 1.17.  This check fails when a C source of ferry names a
# libfabric identifier that is not part of the API all of them share:
#
#  - removed in 2.x: helpers and constants 1.17's public headers defined
#    that 2.x's no longer do (container_of: use ferry__container_of);
#  - deprecated in 2.x: 2.x marks them with a warning, so --enable-werror
#    fails there;
#  - libfabric's internals: ofi_* / OFI_* names come from headers
#    libfabric does not install.
#
# Comments and string literals are not looked at ("tcp;ofi_rxm" is a
# provider's name, not a call).  Each use is printed as FILE:LINE: NAME
# (why, what to use instead).
#
# Usage: test/fabric_api.sh [SRCDIR]   (default $abs_top_srcdir, else the
# directory above this script's).  It first checks itself on a planted
# tree (a use of each kind must be caught; comments and strings must not),
# then the sources; it prints "ok"/"not ok" lines and a last
# "N passed, M failed" line, and exits 1 when anything failed.

# Make check runs scripts with $(SHELL), which may be a plain sh.
if test -z "${BASH_VERSION:-}"; then
	exec bash "$0" "$@"
fi
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=${1:-${abs_top_srcdir:-$here/..}}

# NAME|why: the identifiers to refuse.  The removed ones are those 1.17's
# include/rdma defines and 2.6's does not (a diff of the two releases'
# headers); the deprecated ones are what 2.6 marks FI_DEPRECATED_FUNC or
# with a "deprecated" pragma.
forbidden='container_of|removed in libfabric 2.x; use ferry__container_of (base/defs.h)
count_of|removed in libfabric 2.x; use FERRY__ARRAY_LEN (base/defs.h)
dlist_entry|removed from the public headers in libfabric 2.x; keep a list of your own
FI_BUFFERED_RECV|removed in libfabric 2.x
FI_PRIORITY|removed in libfabric 2.x
FI_PROV_SPECIFIC|removed in libfabric 2.x
FI_XPU_TRIGGER|removed in libfabric 2.x
FI_MR_UNSPEC|deprecated in libfabric 2.x (a warning: -Werror fails); name the mr_mode bits
FI_MR_BASIC|deprecated in libfabric 2.x (a warning: -Werror fails); use FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY
FI_MR_SCALABLE|deprecated in libfabric 2.x (a warning: -Werror fails); use mr_mode 0
FI_LOCAL_MR|deprecated in libfabric 2.x (a warning: -Werror fails); use FI_MR_LOCAL
FI_ORDER_NONE|deprecated in libfabric 2.x (a warning: -Werror fails); use 0
FI_ORDER_STRICT|deprecated in libfabric 2.x (a warning: -Werror fails); name the order bits
FI_ORDER_DATA|deprecated in libfabric 2.x (a warning: -Werror fails)
FI_REG_MR|deprecated in libfabric 2.x (a warning: -Werror fails)
FI_WAIT_MUTEX_COND|deprecated in libfabric 2.x; use FI_WAIT_FD or FI_WAIT_UNSPEC
FI_WAIT_SET|wait sets are deprecated in libfabric 2.x; use FI_WAIT_FD or FI_WAIT_UNSPEC
fi_wait_open|deprecated in libfabric 2.x (wait sets)
fi_poll_open|deprecated in libfabric 2.x (poll sets)
fi_av_bind|deprecated in libfabric 2.x
fi_rx_size_left|deprecated in libfabric 2.x
fi_tx_size_left|deprecated in libfabric 2.x'

# code_of FILE: FILE with comments and string and character literals
# blanked, one output line per input line (so line numbers hold).
code_of() {
	awk '
	{
		out = ""; n = length($0); i = 1
		while (i <= n) {
			c = substr($0, i, 1); d = substr($0, i, 2)
			if (incomment) {
				if (d == "*/") { incomment = 0; i += 2 } else i++
				continue
			}
			if (d == "/*") { incomment = 1; i += 2; out = out " "; continue }
			if (d == "//") break
			if (c == "\"" || c == "\047") {
				q = c; i++
				while (i <= n && substr($0, i, 1) != q)
					i += (substr($0, i, 1) == "\\") ? 2 : 1
				i++; out = out " "; continue
			}
			out = out c; i++
		}
		print out
	}' "$1"
}

# uses DIR: every forbidden use in DIR's C sources, as FILE:LINE: NAME (why).
uses() {
	local dir=$1 file name why
	while IFS= read -r file; do
		code_of "$dir/$file" | awk -v file="$file" -v list="$forbidden" '
		BEGIN {
			n = split(list, rows, "\n")
			for (r = 1; r <= n; r++) {
				bar = index(rows[r], "|")
				why[substr(rows[r], 1, bar - 1)] = substr(rows[r], bar + 1)
			}
		}
		{
			line = $0
			while (match(line, /[A-Za-z_][A-Za-z0-9_]*/)) {
				word = substr(line, RSTART, RLENGTH)
				line = substr(line, RSTART + RLENGTH)
				if (word in why)
					printf "%s:%d: %s (%s)\n", file, NR, word, why[word]
				else if (word ~ /^(ofi|OFI)_/)
					printf "%s:%d: %s (libfabric-internal: its header is not installed and its name changes between releases)\n", file, NR, word
			}
		}'
	done < <(cd "$dir" && find lib include bench examples tools test python/src \
		\( -name '*.c' -o -name '*.h' \) 2>/dev/null | LC_ALL=C sort)
}

passed=0 failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() { echo "not ok - $1"; failed=$((failed + 1)); }

# The check on a planted tree: each kind of use is caught at its line;
# the same names in comments, strings and longer names are not.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fabric_api.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib/top"
cat >"$tmp/lib/top/planted.c" <<'EOF'
/* container_of in a comment,
 * FI_MR_BASIC over two lines */
static const char *name = "tcp;ofi_rxm container_of";
static char q = '"';
static int ferry__container_of_ok, my_count_of;
void *a = container_of(p, struct s, m);   // the 6th line
int b = FI_MR_BASIC | 2;
int c = ofi_genlock_held(l); /* ofi_ in code, then comment */
EOF
expected='lib/top/planted.c:6: container_of (removed in libfabric 2.x; use ferry__container_of (base/defs.h))
lib/top/planted.c:7: FI_MR_BASIC (deprecated in libfabric 2.x (a warning: -Werror fails); use FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY)
lib/top/planted.c:8: ofi_genlock_held (libfabric-internal: its header is not installed and its name changes between releases)'
got=$(uses "$tmp")
if [ "$got" = "$expected" ]; then
	ok "the planted uses are caught at their lines, and nothing in comments or strings"
else
	not_ok "the planted tree: expected"
	echo "$expected" | sed 's/^/#   /'
	echo "# got"
	echo "$got" | sed 's/^/#   /'
fi

if ! test -d "$srcdir/lib"; then
	not_ok "no lib/ under $srcdir"
else
	found=$(uses "$srcdir")
	if [ -z "$found" ]; then
		ok "ferry's C sources use only the libfabric API shared by 1.17 to 2.x"
	else
		not_ok "ferry's C sources use libfabric names that not every supported release has:"
		echo "$found" | sed 's/^/#   /'
	fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
