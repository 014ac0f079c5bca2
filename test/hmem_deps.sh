#!/bin/sh
# Check that libferry.so has no link-time dependency on the CUDA driver or
# runtime: no DT_NEEDED entry for libcuda, libcudart or libnvidia-*.  ferry
# loads libcuda.so.1 with dlopen at run time (lib/dev/hmem_cuda.c), so one
# build runs on machines with and without an NVIDIA driver.  Also says
# whether this build has CUDA support, and for one that has, checks that
# the dlopen path was compiled in.  Run by `make check`; exit 77 (SKIP)
# only when there is no shared library to look at.
set -eu

builddir=${abs_top_builddir:-${top_builddir:-.}}
so=$builddir/lib/.libs/libferry.so
config=$builddir/config.h
READELF=${READELF:-readelf}
OBJDUMP=${OBJDUMP:-objdump}

if ! test -e "$so"; then
	echo "SKIP: $so not found (static-only build, --disable-shared?)"
	exit 77
fi

# The dynamic section's NEEDED entries, one soname a line.
if command -v "$READELF" >/dev/null 2>&1; then
	if ! "$READELF" -h "$so" 2>/dev/null | grep -q 'Type:[[:space:]]*DYN'; then
		echo "SKIP: $so is not an ELF shared object"
		exit 77
	fi
	needed=$("$READELF" -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
elif command -v "$OBJDUMP" >/dev/null 2>&1; then
	if ! "$OBJDUMP" -p "$so" >/dev/null 2>&1; then
		echo "SKIP: $so is not an object file objdump can read"
		exit 77
	fi
	needed=$("$OBJDUMP" -p "$so" | awk '$1 == "NEEDED" { print $2 }')
else
	echo "FAIL: neither $READELF nor $OBJDUMP found: install binutils"
	exit 1
fi

status=0
echo "$so needs: $(printf '%s\n' "$needed" | tr '\n' ' ')"
bad=$(printf '%s\n' "$needed" | grep -i -E '^(libcuda|libcudart|libnvidia)' || true)
if test -n "$bad"; then
	echo "FAIL: libferry.so is linked against the CUDA driver or runtime; it must load libcuda.so.1 with dlopen at run time instead (do not add -lcuda or -lcudart to the library's LIBADD):"
	printf '  %s\n' $bad
	status=1
fi

# What configure decided, from config.h: "#define HAVE_CUDA 1" or "... 0".
cuda=$(sed -n 's/^#define HAVE_CUDA \([01]\).*/\1/p' "$config" 2>/dev/null || true)
case $cuda in
1)
	# The loader looks the driver's calls up by name: their names are in
	# the .so when the dlopen path was compiled (not the stub that cuda.h
	# older than 11.3 gets).
	if grep -a -q 'cuPointerGetAttributes' "$so"; then
		echo "CUDA support: yes (HAVE_CUDA 1): libferry.so loads libcuda.so.1 with dlopen at run time"
	else
		echo "FAIL: config.h has HAVE_CUDA 1 but libferry.so does not look up cuPointerGetAttributes: the dlopen backend was not compiled (cuda.h older than 11.3?)"
		status=1
	fi
	;;
0)
	echo "CUDA support: no (HAVE_CUDA 0, configure --without-cuda or no cuda.h): device memory calls answer FERRY_ENOTSUP"
	;;
*)
	echo "CUDA support: unknown ($config has no HAVE_CUDA line)"
	;;
esac
test "$status" -eq 0 && echo "PASS: no link-time dependency on libcuda, libcudart or libnvidia"
exit $status
