#!/bin/sh
# ferry_metrics_text on real traffic (test/metrics_dump: writes, reads, a
# notification and a stale write, on shm and tcp) is valid Prometheus
# text: `promtool check metrics` (Debian's prometheus package) passes it,
# and the families a fleet relies on are there.  Run by `make check`.
set -u

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

if ! command -v promtool >/dev/null 2>&1; then
	echo "SKIP: promtool not found (apt-get install prometheus)"
	exit 77
fi
dump=$abs_top_builddir/test/metrics_dump
out=$(mktemp -d "${TMPDIR:-/tmp}/ferry-metrics.XXXXXX")
trap 'rm -rf "$out"' EXIT
status=0

for prov in shm "tcp"; do
	if ! "$dump" "$prov" >"$out/$prov.prom" 2>"$out/$prov.err"; then
		echo "FAIL: metrics_dump $prov: $(cat "$out/$prov.err")"
		status=1
		continue
	fi
	# promtool prints its findings (names, units, help) and exits 1 on
	# any; a clean text prints nothing.
	if ! promtool check metrics <"$out/$prov.prom" >"$out/$prov.check" 2>&1 ||
		test -s "$out/$prov.check"; then
		echo "FAIL: promtool check metrics ($prov):"
		cat "$out/$prov.check"
		status=1
	else
		echo "PASS: promtool check metrics ($prov): $(grep -c '^ferry_' "$out/$prov.prom") samples"
	fi
	for family in ferry_bytes_total ferry_requests_total \
		ferry_request_duration_seconds ferry_request_size_bytes \
		ferry_requests_in_flight ferry_peer_up \
		ferry_registration_cache_hits_total ferry_notifications_sent_total; do
		if ! grep -q "^# TYPE $family " "$out/$prov.prom"; then
			echo "FAIL: $prov: no $family family"
			status=1
		fi
	done
	if ! grep -q 'ferry_requests_total{.*op="write",outcome="stale"} 1$' "$out/$prov.prom"; then
		echo "FAIL: $prov: the stale write is not counted under outcome=\"stale\""
		status=1
	fi
done
exit $status
