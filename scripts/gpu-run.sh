# shellcheck shell=bash disable=SC2154  # me, here: set by gpu-check.sh
# Sourced by scripts/gpu-check.sh for --bundle DIR: builds ferry from the
# bundle's tarball twice and runs the GPU checks (docs/gpu.md says what
# each one shows).
#
#   debian  against Debian 12's libfabric 1.17, built without CUDA:
#           device memory is staged through pinned host buffers
#   cuda    against the bundle's libfabric built with CUDA: FI_HMEM
#           (by virtual address, or dmabuf where ferry and libfabric
#           have it)
#
# Each tree finds its libraries in the bundle through pkg-config files
# rewritten to point there (PKG_CONFIG_LIBDIR: nothing of the machine's
# own), and CPPFLAGS/LDFLAGS with run paths into it (tree_env).  Every
# step runs under `timeout`, with its output in a log of its own; the
# report quotes the lines that matter and gpu-logs.tar.gz holds the logs.

run_trees=(debian cuda)
# shm and tcp; from libfabric 2.0 tcp is itself reliable-datagram, and the
# provider ferry picks by default, so the cuda tree runs it too.
run_providers_debian=(shm "tcp;ofi_rxm")
run_providers_cuda=(shm tcp "tcp;ofi_rxm")

# tree_providers TREE: sets provs, the providers TREE's runs use.
tree_providers() {
	if [[ $1 == cuda ]]; then
		provs=("${run_providers_cuda[@]}")
	else
		provs=("${run_providers_debian[@]}")
	fi
}

run_sizes=(64K 1M 64M)
# The suites with CUDA cases: the backend (check_hmem_cuda, which also
# checks that a cached registration of a freed allocation is not used
# for a new one at the same address), what the public calls say with a
# real GPU (check_hmem, check_stage, check_mem), staging from inside.
run_suites="test/unit/check_hmem_cuda test/api/check_hmem test/api/check_stage test/unit/check_stage test/api/check_mem test/unit/check_mem"

run_failed=0 run_skipped=0

# say LINE...: one line to the report and to stdout.
say() {
	printf '%s\n' "$@" | tee -a "$report"
}

# step NAME LIMIT_S CMD...: CMD (a command, or one of the functions
# exported in run_main) with its output in $logs/NAME.log, under timeout,
# within what is left of the run's budget; returns its status (124: it
# ran out of time, or there was none left to start it).
step() {
	local name=$1 limit=$2 rc=0 left=$((run_deadline - SECONDS))
	shift 2
	((left < limit)) && limit=$left
	if ((limit < 5)); then
		echo "gpu-check: not run: the run's budget (--budget) is spent" >"$logs/$name.log"
		return 124
	fi
	timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" >"$logs/$name.log" 2>&1 </dev/null || rc=$?
	((rc != 124 && rc != 137)) || echo "gpu-check: TIMEOUT after $limit s" >>"$logs/$name.log"
	return "$rc"
}

# verdict RC: the word for a step's status.
verdict() {
	case $1 in
	0) echo PASS ;;
	77) echo SKIP ;;
	124 | 137) echo "FAIL (timeout)" ;;
	*) echo "FAIL (exit $1)" ;;
	esac
}

# record WHAT RC [SKIPPED]: a result line; a failure makes the run fail.
# SKIPPED names what a passing step skipped inside (a suite, a test): a
# skip is said as one, never counted as a pass.
record() {
	if [[ $2 == 0 && -n ${3-} ]]; then
		say "- $1: PASS, but skipped: $3"
		run_skipped=1
		return
	fi
	say "- $1: $(verdict "$2")"
	[[ $2 != 77 ]] || run_skipped=1
	[[ $2 == 0 || $2 == 77 ]] || run_failed=1
}

# quote LOG PATTERN [N]: the log's first N (12) lines that match,
# indented, into the report.
quote() {
	grep -E -- "$2" "$logs/$1.log" 2>/dev/null | head -"${3:-12}" | sed 's/^/      /' | tee -a "$report" || true
}

# The machine, as far as it tells.
run_header() {
	say "# ferry on a GPU: gpu-check report" ""
	say "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	say "- host: $(uname -srm); $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo 'no /etc/os-release'); glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2); $(nproc) CPUs"
	say "- bundle: made by $(sed -n 's/^Made by //p' "$bundle/MANIFEST.md")"
	if command -v nvidia-smi >/dev/null; then
		say "- nvidia-smi: $(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2 | paste -sd';' || true)"
	else
		say "- nvidia-smi: not found"
	fi
	nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	say "- nvcc: $nvcc, $("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([^,]*\).*/release \1/p' || echo 'does not run')"
	say "- python3: $(command -v python3 || echo none); torch: $(timeout 120 python3 -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1 || true)"
}

# The tools the build needs: the machine's, else the bundle's make and
# pkg-config.  Sets cc, make_cmd, pkg_config.
run_tools() {
	cc=$(command -v cc || command -v gcc || true)
	[[ -n $cc ]] || { say "- STOP: no C compiler (cc, gcc) on this machine"; exit 1; }
	make_cmd=$(command -v make || echo "$deb_root/usr/bin/make")
	pkg_config=$(command -v pkg-config || true)
	if [[ -z $pkg_config ]]; then
		# The bundle's, with its library beside it.
		pkg_config=$work/bin/pkg-config
		mkdir -p "$work/bin"
		printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' \
			"$deb_root/usr/lib/x86_64-linux-gnu" "$deb_root/usr/bin/pkgconf" >"$pkg_config"
		chmod +x "$pkg_config"
	fi
	say "- tools: cc $cc ($($cc -dumpversion)), make $make_cmd, pkg-config $pkg_config"
	local glibc
	glibc=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
	if [[ $(printf '%s\n' 2.36 "$glibc" | sort -V | head -1) != 2.36 ]]; then
		say "- STOP: glibc $glibc is older than Debian 12's 2.36, which the bundle's libraries need"
		exit 1
	fi
}

# The directory that holds libcudart.so, which libfabric's CUDA support
# dlopens by that name (a link to a versioned one is made if need be).
run_cudart_dir() {
	local d f
	for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
		[[ -e $d/libcudart.so ]] && { echo "$d"; return; }
	done
	f=$( (ldconfig -p 2>/dev/null | sed -n 's/.*libcudart\.so\.[0-9]* .*=> //p'; ls /usr/local/cuda/lib64/libcudart.so.* 2>/dev/null) | head -1)
	if [[ -n $f ]]; then
		mkdir -p "$work/cudart"
		ln -sf "$f" "$work/cudart/libcudart.so"
		echo "$work/cudart"
	fi
}

# pkg-config files of the bundle, rewritten to point into it: TREE's
# folder has Debian's, with the CUDA libfabric's libfabric.pc for cuda.
run_pc_dirs() {
	local t pc
	for t in "${run_trees[@]}"; do
		mkdir -p "$work/pc/$t"
		for pc in "$deb_root"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$deb_root"/usr/share/pkgconfig/*.pc; do
			[[ -f $pc ]] || continue
			[[ $t == cuda && ${pc##*/} == libfabric.pc ]] && continue
			sed "s|/usr/|$deb_root/usr/|g; s|=/usr\$|=$deb_root/usr|" "$pc" >"$work/pc/$t/${pc##*/}"
		done
	done
	sed "s|/usr/|$cuda_root/usr/|g; s|=/usr\$|=$cuda_root/usr|" \
		"$cuda_root/usr/lib/x86_64-linux-gnu/pkgconfig/libfabric.pc" >"$work/pc/cuda/libfabric.pc"
}

# tree_env TREE: sets tenv, the environment TREE builds in.  Its run
# paths are DT_RPATH (--disable-new-dtags), which the loader also
# searches for what those libraries need in turn (libfabric's
# libibverbs, its dlopen of libcudart.so), so nothing runs with
# LD_LIBRARY_PATH, and the machine's own libraries stay the machine's
# for every other program (python3, torch, nvcc).
tree_env() {
	local deb_lib=$deb_root/usr/lib/x86_64-linux-gnu cuda_lib=$cuda_root/usr/lib/x86_64-linux-gnu
	local libs incs l ldflags=-Wl,--disable-new-dtags
	if [[ $1 == cuda ]]; then
		libs=("$cuda_lib" "$deb_lib" ${cudart_dir:+"$cudart_dir"})
		incs=("$cuda_root/usr/include" "$deb_root/usr/include")
	else
		libs=("$deb_lib")
		incs=("$deb_root/usr/include")
	fi
	for l in "${libs[@]}"; do
		ldflags+=" -L$l -Wl,-rpath,$l"
	done
	tenv=(PKG_CONFIG="$pkg_config" PKG_CONFIG_LIBDIR="$work/pc/$1" PKG_CONFIG_PATH=
		CPPFLAGS="${incs[*]/#/-I}" LDFLAGS="$ldflags")
	# The simulated device is a module of the build, not installed here;
	# make check finds it by this variable, and so must the programs run
	# outside it.
	[[ $simulate == no ]] ||
		tenv+=(FERRY_SIM_LIBRARY="$work/build-$1/lib/.libs/libferry-sim.so")
}

# build_tree TREE: configure, make, and the suites' programs.
build_tree() {
	local t=$1 b=$work/build-$1
	tree_env "$t"
	mkdir -p "$b"
	# shellcheck disable=SC2086  # $run_suites: the suites, one word each
	(cd "$b" && env "${tenv[@]}" "$src/configure" --with-cuda=/usr/local/cuda --without-python &&
		env "${tenv[@]}" "$make_cmd" -j"$jobs" &&
		env "${tenv[@]}" "$make_cmd" -j"$jobs" $run_suites)
}

# run_ldd TREE: where TREE's libferry.so finds its libraries, by its run
# paths alone: libfabric's, and every library that does not come from
# the bundle (glibc's are expected; any other would be the machine's).
run_ldd() {
	local lines
	lines=$(env -u LD_LIBRARY_PATH ldd "$work/build-$1/lib/.libs/libferry.so")
	say "    libferry.so loads $(awk '/libfabric/ {print $3}' <<<"$lines")"
	say "    and from outside the bundle: $(grep -v -F "$bundle/" <<<"$lines" |
		awk '{print $1}' | grep -v -E '^(linux-vdso|/)' | paste -sd' ')"
}

run_build() {
	local t pids=() rc
	say "" "## Build (ferry from the bundle's tarball, twice)"
	for t in "${run_trees[@]}"; do
		step "build-$t" 420 build_tree "$t" &
		pids+=($!)
	done
	for t in "${run_trees[@]}"; do
		rc=0
		wait "${pids[0]}" || rc=$?
		pids=("${pids[@]:1}")
		record "build against the $t libfabric" "$rc"
		quote "build-$t" '^  (libfabric|CUDA|hwloc|etcd backend):'
		if ((rc != 0)); then
			tail -20 "$logs/build-$t.log" | sed 's/^/      /' | tee -a "$report"
			say "- STOP: the build failed; nothing else can run"
			exit 1
		fi
		run_ldd "$t"
	done
}

# in_tree TREE CMD...: CMD in the build tree TREE, in its environment.
in_tree() {
	local t=$1
	shift
	tree_env "$t"
	(cd "$work/build-$t" && env "${tenv[@]}" "$@")
}

run_info() {
	local t rc
	say "" "## ferry_info and ferry_topo"
	for t in "${run_trees[@]}"; do
		rc=0
		step "ferry_info-$t" 60 in_tree "$t" tools/ferry_info || rc=$?
		record "ferry_info ($t libfabric)" "$rc"
		quote "ferry_info-$t" '^ferry |^  \* |^  chose|device backend|device memory' 8
	done
	rc=0
	step ferry_topo 60 in_tree debian tools/ferry_topo || rc=$?
	record "ferry_topo" "$rc"
	quote ferry_topo '.' 30
}

# Whether ferry's CUDA backend loads here; stops the run (exit 77) if not.
# With --simulate, ferry's simulated device stands in (FERRY_SIM_DEVICES).
run_gpu_gate() {
	local status want=cuda
	[[ $simulate == yes ]] && want=simulated
	status=$(in_tree cuda timeout 120 test/unit/check_hmem_cuda --print-status 2>&1 || true)
	say "" "## GPU" "- ferry's device backend: $(echo "$status" | head -1) ($(echo "$status" | sed 1d | paste -sd' ' -))"
	if [[ $(echo "$status" | head -1) != "$want" ]]; then
		say "" "NO GPU: ferry's CUDA backend is not available on this machine ($(echo "$status" | tail -1)); the GPU checks were not run."
		exit 77
	fi
	[[ $simulate == no ]] ||
		say "" "SIMULATED: --simulate runs the checks on ferry's simulated device (FERRY_SIM_DEVICES=1): they test this script, and say nothing of a GPU."
}

run_suites_check() {
	local t rc f
	say "" "## Unit and API suites with CUDA cases"
	for t in "${run_trees[@]}"; do
		rc=0
		step "suites-$t" 240 in_tree "$t" env CK_VERBOSITY=verbose \
			"$make_cmd" -j"$jobs" check TESTS="$run_suites" check_PROGRAMS="$run_suites" || rc=$?
		record "suites ($t libfabric): $run_suites" "$rc" \
			"$(sed -n 's/^SKIP: //p' "$logs/suites-$t.log" | paste -sd' ')"
		quote "suites-$t" '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):' 12
		for f in "$work/build-$t"/test/*/check_*.log; do
			grep -E '^[0-9]+%: Checks|test_rcache|:[EF]:' "$f" | sed "s|^|${f#"$work/build-$t/"}: |"
		done 2>/dev/null | head -24 | sed 's/^/      /' | tee -a "$report" || true
	done
}

run_gpu_write() {
	local t p rc name provs
	say "" "## examples/gpu_write: GPU to GPU, two processes"
	for t in "${run_trees[@]}"; do
		tree_providers "$t"
		for p in "${provs[@]}"; do
			name="gpu_write-$t-${p//;/-}"
			rc=0
			step "$name" 60 in_tree "$t" env FERRY_PROVIDER="$p" examples/gpu_write || rc=$?
			# It falls back to the simulated device where CUDA fails it.
			if ((rc == 0)) && [[ $simulate == no ]] &&
				grep -q "NOTICE: running on ferry's simulated device" "$logs/$name.log"; then
				echo "gpu-check: gpu_write ran on the simulated device, not the GPU" >>"$logs/$name.log"
				rc=1
			fi
			record "gpu_write, $t libfabric, $p" "$rc"
			quote "$name" 'device memory|registered as|verified|staged|gpu_write|gpu-check:'
		done
	done
}

# bench_line LOG: "GB/s, mean us, device path" from ferry_bench --json
# (its one line of JSON; the human summary went to stderr, in the log too).
bench_line() {
	python3 - "$1" <<-'EOF' 2>/dev/null || echo "no result"
		import json, sys
		line = next(l for l in open(sys.argv[1]) if l.startswith('{"tool"'))
		j = json.loads(line)
		r = j["runs"][0]
		mean = r["latency_us"]["mean"]
		print("%.2f GB/s, mean %s a request; %s"
		      % (r["gb_per_s"], "-" if mean is None else "%.1f us" % mean,
		         j["device_path"]))
	EOF
}

run_bench() {
	local t p s rc name provs
	say "" "## ferry_bench --mem cuda --target-mem cuda (loopback, 2 s a size)"
	for t in "${run_trees[@]}"; do
		tree_providers "$t"
		for p in "${provs[@]}"; do
			for s in "${run_sizes[@]}"; do
				name="bench-$t-${p//;/-}-$s"
				rc=0
				step "$name" 30 in_tree "$t" bench/ferry_bench --provider "$p" --mem cuda \
					--target-mem cuda --block-size "$s" --duration 2 --warmup 0.5 --validate --json || rc=$?
				say "- $t libfabric, $p, $s: $(verdict "$rc"): $(bench_line "$logs/$name.log")"
				[[ $rc == 0 ]] || run_failed=1
			done
		done
	done
}

# The yardsticks: cudaMemcpy device to device, and staged through host.
run_reference() {
	local rc=0
	say "" "## Reference: cudaMemcpy on GPU 0 (scripts/gpu-copy-ref.cu)"
	if [[ $simulate == yes ]]; then
		say "- SKIP: --simulate: there is no GPU to measure"
		run_skipped=1
		return
	fi
	step ref-build 120 "$nvcc" -O2 -o "$work/gpu-copy-ref" "$here/gpu-copy-ref.cu" || rc=$?
	if ((rc == 0)); then
		step ref 60 "$work/gpu-copy-ref" 65536 1048576 67108864 || rc=$?
	fi
	record "cudaMemcpy reference" "$rc"
	quote ref '^ref ' 6
}

run_python() {
	local t rc py
	say "" "## Python suite, CUDA tests (pytest -k cuda, the machine's PyTorch)"
	py=$(command -v python3 || true)
	for t in "${run_trees[@]}"; do
		rc=0
		step "python-$t" 180 in_tree "$t" env PYTEST_ADDOPTS="-k cuda" abs_top_srcdir="$src" \
			abs_top_builddir="$work/build-$t" PYTHON="$py" CC="$cc" FERRY_TEST_CFLAGS= \
			sh "$src/test/python.sh" || rc=$?
		# The machine's lack, not ferry's: say so, and go on.
		if ((rc != 0)) && grep -q 'Python.h: No such file' "$logs/python-$t.log"; then
			say "- python ($t libfabric): SKIP: the extension does not build here: no Python.h for $py"
			run_skipped=1
			continue
		fi
		record "python ($t libfabric)" "$rc" \
			"$(sed -n 's/^SKIPPED \[[0-9]*\] \([^:]*:[0-9]*\).*/\1/p' "$logs/python-$t.log" | paste -sd' ')"
		quote "python-$t" 'passed|failed|skipped|SKIP|FAIL|[Ee]rror|No module' 6
	done
}

# At the end, whatever happened: the logs beside the report; the work
# folder goes unless it was given.
run_finish() {
	local rc=$?
	tar -czf "$out/gpu-logs.tar.gz" -C "$work" logs 2>/dev/null || true
	[[ $keep_work == yes ]] || rm -rf "$work"
	echo "gpu-check: report: $report (logs: $out/gpu-logs.tar.gz)"
	exit "$rc"
}

run_main() {
	bundle=$(cd "$1" && pwd)
	out=$2 work=$3 jobs=$4 budget=$5 simulate=$6
	deb_root=$bundle/debs cuda_root=$bundle/fabric-cuda
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	report=$out/gpu-report.md
	keep_work=yes
	[[ -n $work ]] || { work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-gpu-check.XXXXXX"); keep_work=no; }
	mkdir -p "$work/logs"
	work=$(cd "$work" && pwd)
	logs=$work/logs
	: >"$report"
	trap run_finish EXIT
	run_deadline=$((SECONDS + budget))
	run_header
	run_tools
	cudart_dir=$(run_cudart_dir)
	say "- libcudart.so for libfabric's CUDA support: ${cudart_dir:-not found}"
	mkdir -p "$work/src"
	tar -xzf "$bundle"/ferry-*.tar.gz -C "$work/src" --strip-components=1
	src=$work/src
	export work deb_root cuda_root cudart_dir pkg_config make_cmd src jobs run_suites
	# The device comes from the run's mode, never from the caller.
	if [[ $simulate == yes ]]; then export FERRY_SIM_DEVICES=1; else unset FERRY_SIM_DEVICES; fi
	export -f tree_env build_tree in_tree
	run_pc_dirs
	run_build
	run_info
	run_gpu_gate
	run_suites_check
	run_gpu_write
	run_bench
	run_reference
	run_python
	say "" "## Verdict" ""
	if ((run_failed)); then
		say "FAILED: at least one check above failed (logs in gpu-logs.tar.gz)"
		exit 1
	fi
	if ((run_skipped)); then
		say "PASSED, with skips: nothing failed, but what is marked skipped above did not run"
	else
		say "PASSED: every check above ran and passed"
	fi
}
