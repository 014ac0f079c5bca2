# shellcheck shell=bash disable=SC2154
# compare-table.sh: the markdown tables of bench/compare.sh, which sources
# it after its runs; not a program of its own.
#
# It reads compare.sh's state (hence SC2154 off): vals[ROW COLUMN] (the values of the runs,
# x for a failed one), runs, the lists it went through (provs, ops,
# size_list), pairs, want, and the settings the method line reports.
# tables prints every table of the groups that ran, then the method.

# "median min max count" of the numbers given
stats() {
	printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | sort -g | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "- - - 0"; exit }
			m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			print m, v[1], v[NR], NR
		}'
}

# Three significant digits; ops/s and other large numbers in k or M.
fmt() {
	awk -v v="$1" 'BEGIN {
		if (v == "-") print "-"
		else if (v >= 1e6) printf "%.3gM\n", v / 1e6
		else if (v >= 1e4) printf "%.3gk\n", v / 1e3
		else if (v >= 1000) printf "%.0f\n", v
		else printf "%.3g\n", v
	}'
}

# 8 B, 4 KiB, 16 MiB
size_name() {
	awk -v b="$1" 'BEGIN {
		if (b >= 1048576 && b % 1048576 == 0) printf "%d MiB\n", b / 1048576
		else if (b >= 1024 && b % 1024 == 0) printf "%d KiB\n", b / 1024
		else printf "%d B\n", b
	}'
}

# The median of a column in a row, or - when it has no value.
median() { # ROW COLUMN
	local m _
	# The values are separate words on purpose.
	# shellcheck disable=SC2086
	read -r m _ <<< "$(stats ${vals[$1 $2]:-})"
	echo "$m"
}

# "median (min-max)", with the count when runs failed; - when the column
# did not run in the row.
cell() { # ROW COLUMN
	local v=${vals[$1 $2]:-} m lo hi n
	[[ -n $v ]] || { echo "-"; return; }
	# shellcheck disable=SC2086
	read -r m lo hi n <<< "$(stats $v)"
	((n > 0)) || { echo "failed"; return; }
	printf '%s (%s-%s)%s\n' "$(fmt "$m")" "$(fmt "$lo")" "$(fmt "$hi")" \
		"$( ((n == runs)) || echo " $n/$runs")"
}

# ferry over the other column, to two decimals, or -: the median of the
# rounds' ratios, each of two runs of the same round.  This machine
# switches between two rates for minutes at a time (docs/performance.md),
# and a ratio of medians then compares one tool's runs in one mode with
# the other's in the other; the runs of a round are seconds apart.
ratio() { # ROW FERRY_COLUMN OTHER_COLUMN
	local m _
	# One ratio per round where both runs gave a value; their median.
	# shellcheck disable=SC2046 # the ratios are separate words on purpose
	read -r m _ <<< "$(stats $(awk -v a="${vals[$1 $2]:-}" -v b="${vals[$1 $3]:-}" 'BEGIN {
		n = split(a, x, " "); split(b, y, " "); num = "^[0-9.eE+-]+$"
		for (i = 1; i <= n; i++)
			if (x[i] ~ num && y[i] ~ num && y[i] + 0 > 0) printf "%.6g\n", x[i] / y[i] }'))"
	awk -v m="$m" 'BEGIN { if (m == "-") print "-"; else printf "%.2f\n", m }'
}

# One row of a group's table: the leading fields, then ferry's cell and
# each other column's cell with its ratio.
md_row() { # ROW FERRY_COLUMN "OTHER_COLUMN..." LEADING_FIELD...
	local row=$1 fc=$2 c line others
	read -ra others <<< "$3"
	shift 3
	line="| $(printf '%s | ' "$@")$(cell "$row" "$fc")"
	for c in "${others[@]}"; do
		line+=" | $(cell "$row" "$c") | $(ratio "$row" "$fc" "$c")"
	done
	echo "$line |"
}

stream_table() {
	local p op size
	echo "One-way streams, GB/s (higher is better), $depth blocks in flight; ratio = ferry / other."
	echo
	echo "| provider | op | block | ferry | rma_raw | ratio | UCX | ratio | UCX sysv | ratio | memcpy | ratio | ferry, target polls | ratio to rma_raw | rma_raw -f | ratio |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for p in ${provs//,/ }; do
		for op in ${ops//,/ }; do
			for size in "${size_list[@]}"; do
				row="stream $p $op $size"
				echo "$(md_row "$row" s_ferry "s_raw s_ucx s_ucx_sysv s_memcpy" \
					"$p" "$op" "$(size_name "$size")") $(cell "$row" s_ferry_polled)" \
					"| $(ratio "$row" s_ferry_polled s_raw)" \
					"| $(cell "$row" s_raw_fd) | $(ratio "$row" s_ferry s_raw_fd) |"
			done
		done
	done
	echo
	echo "UCX: UCX_TLS=tcp on tcp, posix,cma,self on shm (sysv,cma,self: UCX sysv), heap buffers (UCX_ALLOC_PRIO=heap)."
	echo "ferry's target runs ferry's progress thread, which sleeps on the CQ's descriptor after 50 us without"
	echo "work (tcp); \"target polls\": ferry_bench --target-polls, the target's own thread busy-polls, as rma_raw's does."
	echo "rma_raw -f (tcp): the target's CQ has a file descriptor, as ferry's progress thread needs to sleep on it,"
	echo "and is still busy-polled; its ratio is ferry's (progress thread) over it."
}

pingpong_table() {
	local p size
	echo "Ping-pong, mean half round trip in us (lower is better); ratio = ferry / other."
	echo
	echo "| provider | size | ferry | rma_raw | ratio | UCX | ratio | UCX sysv | ratio | fi_pingpong | ratio |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for p in ${provs//,/ }; do
		for size in 8 4096; do
			md_row "pingpong $p $size" p_ferry "p_raw p_ucx p_ucx_sysv p_fipp" "$p" "$(size_name "$size")"
		done
	done
}

small_table() {
	local p size batch row
	echo "Small blocks, ops/s (blocks; higher is better), one request in flight: ferry_bench"
	echo "--batch-size B --inflight 1, which posts neighbouring blocks as one operation, and with"
	echo "--descending, one operation per block, against rma_raw -W B (B operations, wait for all,"
	echo "repeat); ratio = ferry / rma_raw; on tcp rma_raw -f, its target's CQ with a file descriptor"
	echo "as ferry's, and ferry --descending over it."
	echo
	echo "| provider | block | batch | rma_raw | ferry | ratio | ferry --descending | ratio | rma_raw -f | ratio |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for p in ${provs//,/ }; do
		for size in 4096 16384; do
			for batch in 64 256; do
				row="small $p $size $batch"
				echo "| $p | $(size_name "$size") | $batch | $(cell "$row" b_raw)" \
					"| $(cell "$row" b_ferry) | $(ratio "$row" b_ferry b_raw)" \
					"| $(cell "$row" b_ferry_desc) | $(ratio "$row" b_ferry_desc b_raw)" \
					"| $(cell "$row" b_raw_fd) | $(ratio "$row" b_ferry_desc b_raw_fd) |"
			done
		done
	done
}

fabtests_table() {
	local p size row
	echo "One-way writes of one block, GB/s (higher is better), $depth in flight, against fabtests' fi_rma_bw"
	echo "-o writedata -W $depth; ratio = ferry (one block) / other, and ferry cycling through the block x $depth over fi_rma_bw."
	echo
	echo "| provider | block | ferry, one block | fi_rma_bw | ratio | fi_rma_bw -U | ratio | rma_raw -i -e | ratio | rma_raw | ratio | ferry, cycling | ratio to fi_rma_bw |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for p in ${provs//,/ }; do
		for size in "${size_list[@]}"; do
			row="fabtests $p $size"
			echo "$(md_row "$row" f_ferry_same "f_fab f_fab_dc f_raw_count f_raw" "$p" "$(size_name "$size")")" \
				"$(cell "$row" f_ferry) | $(ratio "$row" f_ferry f_fab) |"
		done
	done
	echo
	echo "fi_rma_bw: the provider's default completion (a write completes once its buffer may be reused);"
	echo "-U: FI_DELIVERY_COMPLETE, ferry's. rma_raw -i -e: remote CQ data on every write, the provider's default"
	echo "completion, DEPTH in flight (what ordering notifications by counting writes at the target could reach);"
	echo "rma_raw: FI_DELIVERY_COMPLETE, DEPTH in flight, one block."
}

pair_table() {
	local row name unit fl rl better fc rc
	echo "ferry_bench against one reference each; ratio = ferry / reference."
	echo
	echo "| case | unit | ferry | reference | ratio |"
	echo "|---|---|---:|---:|---:|"
	for row in "${pairs[@]}"; do
		IFS='|' read -r name unit fl rl better fc rc <<< "$row"
		[[ -n ${vals[$name $fc]:-} ]] || continue # -R: a row that did not run
		echo "| $name | $unit | $fl $(cell "$name" "$fc") | $rl $(cell "$name" "$rc") |" \
			"$(ratio "$name" "$fc" "$rc")$([[ $better == lower ]] && echo ' (lower is better)') |"
	done
}

version_of() { # TOOL: a one-word version, or ?
	case $1 in
	libfabric) # the one the run loaded (-L), else the one it was built against
		fi_info --version 2> /dev/null | awk '/^libfabric:/ { print $2; f = 1 } END { exit !f }' ||
			pkg-config --modversion libfabric 2> /dev/null || echo "?" ;;
	ucx) ucx_info -v 2> /dev/null | awk '/Version/ { print $NF; exit }' ;;
	esac
}

method() {
	if [[ -n ${reread:-} ]]; then
		printf '%s Tables made again from the raw runs (\x60bench/compare.sh -R\x60).\n' \
			"$(grep '^Method:' "$reread" | tail -1)"
		return
	fi
	local dur=$(($(date +%s) - t_start))
	printf 'Method: \x60bench/compare.sh -n %s -t %s -d %s%s -c %s -P %s -O %s -s %s%s\x60, %s, on %s (%s CPUs, %s), %s' \
		"$runs" "$secs" "$depth" "${footprint:+ -f $footprint}${one_block:+ -1}" "$groups" "$provs" "$ops" "$sizes" \
		"${lf_prefix:+ -L $lf_prefix}${fab_dir:+ -F $fab_dir}" \
		"$(date +%F)" "$(hostname)" "$(nproc)" "$(uname -r)" "libfabric $(version_of libfabric)"
	[[ -z $have_ucx ]] || printf ', UCX %s' "$(version_of ucx)"
	printf '. Each cell is the median of %s runs (min-max; n/%s where some failed), the tools of a row' "$runs" "$runs"
	printf ' taking turns in every round and the order reversed every other round. Throughput runs measure %s s' "$secs"
	if [[ -n $one_block ]]; then
		printf ' after a warmup, ping-pongs %s s; in the streams every operation moves the same block (-1),' "$lsecs"
	else
		printf ' after a warmup, ping-pongs %s s; each side cycles through %sthe block x %s in the streams,' "$lsecs" \
			"${footprint:+$footprint or, where larger, }" "$depth"
	fi
	printf ' the block x the batch in the small group; a ratio is the median of the rounds'"'"' ratios.'
	printf ' Load average %s at the start, %s at the end; the whole run took %d min %d s.\n' \
		"$load0" "$(load)" $((dur / 60)) $((dur % 60))
}

tables() {
	if want stream; then stream_table; echo; fi
	if want pingpong; then pingpong_table; echo; fi
	if want small; then small_table; echo; fi
	if want fabtests; then fabtests_table; echo; fi
	if ((${#pairs[@]} > 0)); then pair_table; echo; fi
	method
}
