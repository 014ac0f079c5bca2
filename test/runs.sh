# Sourced by the script tests that run programs as a person would
# (examples.sh, meta_programs.sh).  The caller sets $tmp (a scratch
# directory) and $status (0), which a failure sets to 1.

# runs WORDS CMD...: CMD exits 0 within 120 s and prints WORDS.
runs() {
	words=$1
	shift
	if timeout 120 "$@" >"$tmp/out" 2>&1 && grep -F -- "$words" "$tmp/out" >/dev/null; then
		echo "PASS: $* says \"$words\""
	else
		cat "$tmp/out"
		echo "FAIL: $* (expected \"$words\" and exit 0)"
		status=1
	fi
}
