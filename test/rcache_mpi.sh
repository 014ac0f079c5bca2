#!/bin/sh
# Open MPI and ferry's registration cache under an allocator that gives
# memory back eagerly: test/rcache_mpi.c, built here with mpicc against
# this build's libferry.so, runs on 2 ranks with mimalloc preloaded
# (purging at once) and must verify every byte on both providers.  Run by
# `make check`; exit 77 (SKIP) with the reason when Open MPI, mimalloc or
# the shared library is missing, or in a sanitizer build (a preloaded
# allocator cannot sit under ASan's or TSan's).
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"
: "${abs_top_srcdir:?run by make check, which sets abs_top_srcdir}"
iterations=${RCACHE_MPI_ITERATIONS:-150}

skip() {
	echo "SKIP: $*"
	exit 77
}

case "${FERRY_TEST_CFLAGS:-}" in
*-fsanitize=*) skip "sanitizer build: mimalloc cannot be preloaded under ASan/TSan" ;;
esac
command -v mpicc >/dev/null 2>&1 || skip "mpicc not found (Debian: apt-get install libopenmpi-dev)"
command -v mpirun >/dev/null 2>&1 || skip "mpirun not found (Debian: apt-get install openmpi-bin)"
lib=$abs_top_builddir/lib/.libs
test -e "$lib/libferry.so" || skip "no $lib/libferry.so (static-only build?)"

mimalloc=
for f in $( (ldconfig -p 2>/dev/null || true) | awk '/libmimalloc\.so\.2 / { print $NF }') \
	/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 /usr/lib64/libmimalloc.so.2 \
	/usr/local/lib/libmimalloc.so.2; do
	if test -e "$f"; then
		mimalloc=$f
		break
	fi
done
test -n "$mimalloc" || skip "libmimalloc.so.2 not installed (Debian: apt-get install libmimalloc2.0)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-rcache-mpi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== mpicc test/rcache_mpi.c"
mpicc -Wall -Wextra -I"$abs_top_srcdir/include" -o "$tmp/rcache_mpi" \
	"$abs_top_srcdir/test/rcache_mpi.c" -L"$lib" -Wl,-rpath,"$lib" -lferry

# Keep Open MPI on its own TCP and shared-memory paths, away from libfabric
# (its ofi components would initialise libfabric before ferry could turn
# libfabric's MR cache off).
OMPI_MCA_pml=ob1
OMPI_MCA_btl=self,tcp
OMPI_MCA_mtl=^ofi
OMPI_MCA_btl_tcp_if_include=lo
OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_pml OMPI_MCA_btl OMPI_MCA_mtl OMPI_MCA_btl_tcp_if_include \
	OMPI_MCA_oob_tcp_if_include

status=0
for prov in "tcp;ofi_rxm" shm; do
	# FERRY_DOMAIN only where there is one (an empty value names the
	# domain '').
	case $prov in
	tcp*) set -- -x FERRY_DOMAIN=lo ;;
	*) set -- ;;
	esac
	echo "== mpirun -np 2, $prov, LD_PRELOAD=$mimalloc, $iterations iterations"
	# mimalloc 2.0 names (PAGE_RESET, DECOMMIT_DELAY and its old name
	# RESET_DELAY, SEGMENT_DECOMMIT_DELAY) and 2.1+ ones (PURGE_*): purge
	# freed memory at once.
	if ! timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
		-x LD_PRELOAD="$mimalloc" \
		-x RCACHE_MPI_EXPECT_PRELOAD=libmimalloc \
		-x MIMALLOC_PAGE_RESET=1 -x MIMALLOC_DECOMMIT_DELAY=0 \
		-x MIMALLOC_RESET_DELAY=0 -x MIMALLOC_SEGMENT_DECOMMIT_DELAY=0 \
		-x MIMALLOC_PURGE_DELAY=0 -x MIMALLOC_PURGE_DECOMMITS=1 \
		-x FERRY_PROVIDER="$prov" "$@" \
		"$tmp/rcache_mpi" "$iterations"; then
		echo "FAIL: rcache_mpi on $prov"
		status=1
	fi
done
exit $status
