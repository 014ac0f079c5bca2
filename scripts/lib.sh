# Shell functions shared by scripts/demo.sh, scripts/test.sh and .ci/run.
# Source it from the repository root; it sets nothing else.

export DEBIAN_FRONTEND=noninteractive
JOBS=${JOBS:-2}

packages=(
	build-essential pkg-config autoconf automake libtool
	libfabric-dev libfabric-bin libhwloc-dev hwloc
	check libsubunit-dev iproute2 libmimalloc-dev libmimalloc2.0
	openmpi-bin libopenmpi-dev
	etcd-server etcd-client openssl libcurl4-openssl-dev libjson-c-dev nettle-dev
	python3-dev python3-setuptools python3-pip python3-numpy python3-torch python3-pytest
	pandoc groff-base man-db
	gdb # a test about to time out prints its stacks (test/api/watchdog.c)
	valgrind strace # bench/opcount.sh counts what an operation costs (test/opcount.sh)
	prometheus python3-prometheus-client # metrics: promtool checks them (test/metrics.sh), Python's collector
	gnuplot-nox # plots of ferry_bench --sweep and bench/compare.sh
	debhelper dh-python fakeroot lintian
)

log() { printf '\n=== %s\n' "$*"; }

# apt-get only what is missing: a prepared image needs no network.
install_deps() {
	local p missing=()
	for p in "${packages[@]}"; do
		if [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) != installed ]]; then
			missing+=("$p")
		fi
	done
	if ((${#missing[@]} == 0)); then
		log "dependencies already installed"
		return
	fi
	log "installing: ${missing[*]}"
	if ((EUID != 0)); then
		echo "not root: install these packages first: ${missing[*]}" >&2
		exit 1
	fi
	apt-get update -qq </dev/null
	apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
}

# Print the .log of every test whose .trs records a failure.
print_failed_logs() {
	local dir=$1 trs
	while IFS= read -r trs; do
		if grep -q -E '^:test-result: (FAIL|XPASS|ERROR)' "$trs"; then
			log "${trs%.trs}.log"
			cat "${trs%.trs}.log"
		fi
	done < <(find "$dir" -name '*.trs' | sort)
}

# Check's own counts ("100%: Checks: 12, Failures: 0, Errors: 0").
print_check_summary() {
	local dir=$1
	log "Check summary ($dir)"
	find "$dir" -name '*.log' ! -name test-suite.log -exec grep -H -E '^[0-9]+%: Checks' {} + |
		sed "s|^$dir/||" | sort || echo "(no Check suites ran)"
}

# Check's line for each failed check ("file:line:F:case:test:i: message"),
# last, so that an output cut short in its middle still shows them.
print_check_failures() {
	local dir=$1 lines
	log "Check failures ($dir)"
	lines=$(find "$dir" -name '*.log' ! -name test-suite.log -exec grep -H -E '^[^ ]+:[0-9]+:[FE]:[^:]*:[^:]*:[0-9]+: ' {} + |
		sed "s|^$dir/||" | sort || true)
	echo "${lines:-(none in the format of Check: the failing logs above say why)}"
}

# Totals over every test of a make check run, as one plain line.
# (grep -c exits 1 when it counts nothing: that is not a failure here.)
print_totals() {
	local dir=$1 results pass fail skip
	results=$(find "$dir" -name '*.trs' -exec cat {} + 2>/dev/null || true)
	pass=$(grep -c -E '^:test-result: PASS' <<<"$results" || true)
	fail=$(grep -c -E '^:test-result: (FAIL|ERROR|XPASS)' <<<"$results" || true)
	skip=$(grep -c -E '^:test-result: SKIP' <<<"$results" || true)
	echo "$dir: $pass passed, $fail failed, $skip skipped"
}

# configure_and_make DIR CONFIGURE-FLAGS...: a build tree in DIR, built.
configure_and_make() {
	local dir=$1
	shift
	[[ -x configure ]] || { log "autogen"; ./autogen.sh; }
	if [[ ! -f $dir/Makefile ]]; then
		log "$dir: configure $*"
		mkdir -p "$dir"
		(cd "$dir" && ../configure "$@")
	fi
	log "$dir: make"
	make -C "$dir" -j"$JOBS"
}

# run_check DIR [TESTS]: make check in a built DIR (only the tests named in
# TESTS, a space-separated list, if given); prints failing logs and exits 1
# on a failure.
run_check() {
	local dir=$1 tests=${2:-}
	local args=()
	[[ -n $tests ]] && args=("TESTS=$tests")
	log "$dir: make check ${args[*]}"
	if ! make -C "$dir" -j"$JOBS" check "${args[@]}"; then
		print_failed_logs "$dir"
		print_check_summary "$dir"
		print_check_failures "$dir"
		print_totals "$dir"
		log "$dir: make check FAILED"
		exit 1
	fi
	print_check_summary "$dir"
	print_totals "$dir"
}
