# Sourced by the script tests that run programs as a person would
# (examples.sh, meta_programs.sh, opcount.sh, ab.sh).  The caller sets
# $tmp, a scratch directory (scratch makes one), and $status (0), which a
# failure sets to 1; the test ends with `exit $status`.

# scratch NAME: $tmp, removed on exit, and $status.
scratch() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-$1.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	status=0
}

pass() { echo "PASS: $1"; }
# fail WHAT: the output of the command that failed ($tmp/out), then why.
fail() {
	cat "$tmp/out"
	echo "FAIL: $1"
	status=1
}

# exits CODE WORDS CMD...: CMD exits CODE within 300 s and prints WORDS.
exits() {
	code=$1 words=$2
	shift 2
	rc=0
	timeout 300 "$@" >"$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -eq "$code" ] && grep -F -- "$words" "$tmp/out" >/dev/null; then
		pass "$* (exit $rc, \"$words\")"
	else
		fail "$* (exit $rc; expected $code and \"$words\")"
	fi
}

# runs WORDS CMD...: CMD exits 0 within 300 s and prints WORDS.
runs() { exits 0 "$@"; }
