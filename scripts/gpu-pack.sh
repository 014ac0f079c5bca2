# shellcheck shell=bash disable=SC2154  # me, top: set by gpu-check.sh
# Sourced by scripts/gpu-check.sh for --pack DIR: the bundle a GPU machine
# without a package registry needs to build and run ferry (docs/gpu.md).
#
#   DIR/ferry-VERSION.tar.gz   make dist of this tree: configure is made,
#                              so no autotools are needed there
#   DIR/debs/                  Debian 12's packages unpacked (dpkg-deb -x),
#                              /lib merged into /usr/lib, with the
#                              libraries they need but glibc's and GCC's;
#                              no docs, manual pages or static libraries
#                              (but Check's, which Debian ships static only)
#   DIR/fabric-cuda/           libfabric built here from Debian's source
#                              package with --with-cuda --enable-cuda-dlopen,
#                              installed under usr/ as debs/ is
#   DIR/MANIFEST.md            what is in it, versions, checksums, sizes
#
# Needs: apt-get and dpkg-deb with Debian's archive reachable, autoreconf,
# make, cc, readelf, and CUDA's headers in /usr/local/cuda (libfabric's
# CUDA support is built with them and loads CUDA at run time).

arch_dir=usr/lib/x86_64-linux-gnu

# Debian's packages ferry builds and runs against (README.md), the two
# tools a bare image may lack (make, pkg-config), and what -dev packages'
# links point to (libhogweed6).  The libraries these need follow by
# their ELF dependencies (pack_closure).
pack_roots=(
	libfabric1 libfabric-dev libhwloc15 libhwloc-dev
	check libsubunit0 libsubunit-dev
	libcurl4 libcurl4-openssl-dev libjson-c5 libjson-c-dev
	libnettle8 libhogweed6 nettle-dev
	pkgconf pkgconf-bin libpkgconf3 make
)

# What every x86-64 glibc system has: never packed (a copy of Debian's
# glibc would fight the machine's own).
pack_base_sonames=" ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1 libanl.so.1 libgcc_s.so.1 libstdc++.so.6 "

# The source of the CUDA libfabric: Debian's own package, from the suite
# named here.  Debian 12's libfabric (1.17) predates FI_MR_DMABUF (1.20),
# so a build of it could not show ferry's dmabuf path; Debian 13's can.
# The newest libfabric source in the lists is taken: Debian 13's.
pack_fabric_suite=trixie
pack_fabric_configure=(
	--prefix=/usr --libdir=/usr/lib/x86_64-linux-gnu --disable-static
	--with-cuda=/usr/local/cuda --enable-cuda-dlopen
	# Only the providers ferry uses on one host, and what they need:
	# nothing beyond glibc then, wherever the bundle goes.
	--enable-only --enable-shm --enable-sm2 --enable-tcp --enable-rxm
	--enable-udp --enable-rxd
	--with-uring=no --with-numa=no --with-dsa=no
)

pack_log() { printf '%s: %s\n' "$me" "$*"; }
pack_fail() {
	echo "$me: --pack: $*" >&2
	exit 1
}

# Apt with lists of its own under $work/apt (this machine's sources, with
# deb-src added, and Debian 13's sources for libfabric), so that nothing
# of the system's apt state changes and no root is needed.
pack_apt_setup() {
	local a=$work/apt system=/etc/apt/sources.list.d/debian.sources
	[[ -f $system ]] || pack_fail "$system not found: this expects Debian 12's deb822 sources"
	mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$a/parts"
	sed 's/^Types: deb$/Types: deb deb-src/' "$system" >"$a/parts/debian.sources"
	cat >"$a/parts/fabric-src.sources" <<-EOF
		Types: deb-src
		URIs: http://deb.debian.org/debian
		Suites: $pack_fabric_suite
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$a/parts"
		-o "Dir::State::Lists=$a/lists" -o "Dir::Cache=$a/cache"
		-o APT::Sandbox::User=root -q)
	pack_log "apt-get update (lists of its own in $a)"
	apt-get "${apt_opts[@]}" update >"$work/apt-update.log" 2>&1 ||
		{ cat "$work/apt-update.log" >&2; pack_fail "apt-get update failed"; }
}

# ferry's release tarball, made in a build tree of its own.
pack_ferry_tarball() {
	local b=$work/ferry-dist
	pack_log "ferry: make dist"
	if [[ ! -x $top/configure ]]; then
		(cd "$top" && ./autogen.sh) >"$work/autogen.log" 2>&1 ||
			{ cat "$work/autogen.log" >&2; pack_fail "./autogen.sh failed"; }
	fi
	mkdir -p "$b"
	(cd "$b" && "$top/configure" --with-cuda=no --without-python &&
		make dist) >"$work/dist.log" 2>&1 ||
		{ tail -30 "$work/dist.log" >&2; pack_fail "make dist failed (log: $work/dist.log)"; }
	mv "$b"/ferry-*.tar.gz "$1/"
}

# pack_debs ROOT PACKAGE...: download and unpack into ROOT.
pack_debs() {
	local root=$1 pkg deb
	shift
	mkdir -p "$work/debs"
	(cd "$work/debs" && apt-get "${apt_opts[@]}" download "$@") >>"$work/download.log" 2>&1 ||
		{ tail -5 "$work/download.log" >&2; pack_fail "apt-get download $* failed"; }
	for pkg in "$@"; do
		deb=$(compgen -G "$work/debs/${pkg}_*.deb" | head -1)
		[[ -n $deb ]] || pack_fail "no .deb of $pkg after apt-get download"
		dpkg-deb -x "$deb" "$root"
		# shellcheck disable=SC2016  # dpkg's fields, not the shell's
		dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" >>"$work/packages.txt"
	done
	pack_merge_lib "$root"
}

# Debian 12 is only half /usr-merged: its lib/x86_64-linux-gnu goes into
# usr/lib/x86_64-linux-gnu, so that one folder holds every library.
pack_merge_lib() {
	local root=$1
	if [[ -d $root/lib/x86_64-linux-gnu ]]; then
		mkdir -p "$root/$arch_dir"
		cp -a "$root/lib/x86_64-linux-gnu/." "$root/$arch_dir/"
		rm -rf "$root/lib/x86_64-linux-gnu"
	fi
}

# The sonames ELF files under ROOT need that neither ROOT nor glibc has.
pack_missing_sonames() {
	local root=$1 f so
	find "$root" -type f \( -name '*.so*' -o -path '*/bin/*' \) -print0 |
		while IFS= read -r -d '' f; do
			readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
		done | sort -u | while read -r so; do
			[[ $pack_base_sonames == *" $so "* ]] && continue
			[[ -e $root/$arch_dir/$so ]] && continue
			echo "$so"
		done
}

# The package that holds the library SONAME on this machine, found
# through its file (an alternative's link followed: libpsm_infinipath).
pack_owner() {
	local real
	real=$(readlink -f "/$arch_dir/$1") || return 0
	[[ -f $real ]] || return 0
	{ dpkg-query -S "$real" || dpkg-query -S "${real#/usr}"; } 2>/dev/null | head -1 | cut -d: -f1
}

# The library packages ROOT's ELF files need, found through this
# machine's installed files, until none is missing.  A library that is
# not in ROOT/usr/lib/x86_64-linux-gnu itself (an alternative) gets its
# soname link there, as update-alternatives makes it here.
pack_closure() {
	local root=$1 so pkg missing new real
	while :; do
		missing=$(pack_missing_sonames "$root")
		[[ -z $missing ]] && return 0
		new=()
		for so in $missing; do
			pkg=$(pack_owner "$so")
			[[ -n $pkg ]] || pack_fail "no installed package has $so, which the bundle needs: apt-get install the library that provides it, then pack again"
			if grep -q "^$pkg " "$work/packages.txt"; then
				real=$(readlink -f "/$arch_dir/$so")
				[[ -f $root$real ]] || pack_fail "$pkg is unpacked, yet $so is still missing from $root/$arch_dir"
				ln -s "$(realpath --relative-to="$root/$arch_dir" "$root$real")" "$root/$arch_dir/$so"
				continue
			fi
			[[ " ${new[*]} " == *" $pkg "* ]] || new+=("$pkg")
		done
		((${#new[@]} == 0)) && continue
		pack_log "libraries they need: ${new[*]}"
		pack_debs "$root" "${new[@]}"
	done
}

# No documentation, manual pages, static libraries (Check is static only),
# programs but make and pkg-config, or configuration; absolute links made
# relative, and no link left dangling.
pack_prune() {
	local root=$1 l t
	find "$root/usr/share" -mindepth 1 -maxdepth 1 ! -name pkgconfig -exec rm -rf {} +
	rm -rf "${root:?}/etc" "${root:?}/lib" "${root:?}/var" "${root:?}/usr/lib/udev" "${root:?}/usr/sbin"
	find "$root/$arch_dir" -name '*.a' ! -name 'libcheck*.a' -delete
	find "$root/$arch_dir" -name '*.la' -delete
	if [[ -d $root/usr/bin ]]; then
		find "$root/usr/bin" -mindepth 1 ! -name make ! -name pkgconf ! -name pkg-config \
			! -name fi_info -exec rm -rf {} +
	fi
	find "$root" -type l -print0 | while IFS= read -r -d '' l; do
		t=$(readlink "$l")
		if [[ $t == /* ]]; then
			rm "$l"
			[[ -e $root$t ]] && ln -s "$(realpath --relative-to="$(dirname "$l")" "$root$t")" "$l"
		fi
		[[ -e $l ]] || rm -f "$l"
	done
	find "$root" -depth -type d -empty -delete
}

# Debian 13's libfabric source package, its upstream tarball checked
# against the checksum in Debian's signed Sources list.
pack_fabric_source() {
	local src=$work/fabric-src version orig sum want
	mkdir -p "$src"
	version=$(apt-cache "${apt_opts[@]}" showsrc libfabric 2>/dev/null |
		sed -n 's/^Version: //p' | sort -V | tail -1)
	[[ -n $version ]] || pack_fail "no libfabric source package in Debian $pack_fabric_suite's lists"
	pack_log "libfabric $version: apt-get source ($pack_fabric_suite)"
	(cd "$src" && apt-get "${apt_opts[@]}" source --download-only "libfabric=$version") \
		>"$work/fabric-source.log" 2>&1 || true
	orig=$(compgen -G "$src/libfabric_${version%%-*}.orig.tar.*" | head -1)
	[[ -n $orig ]] ||
		{ cat "$work/fabric-source.log" >&2; pack_fail "apt-get source libfabric=$version fetched no upstream tarball"; }
	want=$(apt-cache "${apt_opts[@]}" showsrc libfabric |
		awk -v f="${orig##*/}" 'length($1) == 64 && $3 == f { print $1; exit }')
	sum=$(sha256sum "$orig" | cut -d' ' -f1)
	[[ -n $want && $sum == "$want" ]] ||
		pack_fail "${orig##*/}: sha256 $sum is not the ${want:-(missing)} of Debian's Sources list"
	fabric_version=$version fabric_orig=${orig##*/} fabric_sum=$sum
	if compgen -G "$src/*.dsc" >/dev/null && compgen -G "$src/*.debian.tar.*" >/dev/null; then
		dpkg-source -x "$src"/*.dsc "$src/tree" >>"$work/fabric-source.log" 2>&1 ||
			pack_fail "dpkg-source -x failed (log: $work/fabric-source.log)"
		fabric_patches="Debian's patches applied (dpkg-source -x)"
	else
		mkdir -p "$src/tree"
		tar -xf "$orig" -C "$src/tree" --strip-components=1
		fabric_patches="the upstream tarball alone, Debian's patches not applied: the archive did not serve $(grep '^E: Failed to fetch' "$work/fabric-source.log" | sed 's|.*/\([^/ ]*\)  *404.*|\1|' | paste -sd' ')"
	fi
	fabric_tree=$src/tree
}

# libfabric's CUDA code includes nvml.h for three calls it makes through
# dlopen (libnvidia-ml.so.1, where the driver has it: it counts the GPUs
# with them).  CUDA's pip-made toolkit here has no NVML headers, and
# Debian's are in non-free: where /usr/local/cuda lacks nvml.h, these
# declarations of the three, from NVML's documented API, stand in.
pack_nvml_header() {
	fabric_cppflags=
	fabric_nvml="nvml.h from /usr/local/cuda/include"
	[[ -f /usr/local/cuda/include/nvml.h ]] && return
	mkdir -p "$work/nvml"
	cat >"$work/nvml/nvml.h" <<-'EOF'
		/* The NVML declarations libfabric's hmem_cuda.c uses (gpu-pack.sh). */
		typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;
		nvmlReturn_t nvmlInit_v2(void);
		nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
		nvmlReturn_t nvmlShutdown(void);
	EOF
	fabric_cppflags=-I$work/nvml
	fabric_nvml="nvml.h: declarations of nvmlInit_v2, nvmlDeviceGetCount_v2 and nvmlShutdown written by gpu-pack.sh (/usr/local/cuda has no NVML headers)"
}

# libfabric with CUDA, built niced (this machine's CPUs are shared).
pack_fabric_build() {
	local dest=$1 t=$fabric_tree
	[[ -f /usr/local/cuda/include/cuda.h ]] ||
		pack_fail "/usr/local/cuda/include/cuda.h not found: libfabric's CUDA support is built with CUDA's headers"
	pack_nvml_header
	pack_log "libfabric: autogen, configure ${pack_fabric_configure[*]}"
	(cd "$t" && { [[ -x configure ]] || nice -n 15 ./autogen.sh; } &&
		nice -n 15 ./configure "${pack_fabric_configure[@]}" CPPFLAGS="$fabric_cppflags") \
		>"$work/fabric-configure.log" 2>&1 ||
		{ tail -30 "$work/fabric-configure.log" >&2; pack_fail "libfabric's configure failed (log: $work/fabric-configure.log)"; }
	grep -q '^#define HAVE_CUDA 1' "$t/config.h" ||
		pack_fail "libfabric's configure did not enable CUDA (log: $work/fabric-configure.log)"
	pack_log "libfabric: nice -n 15 make -j2 (minutes)"
	(cd "$t" && nice -n 15 make -j2 && make install DESTDIR="$dest") >"$work/fabric-make.log" 2>&1 ||
		{ tail -30 "$work/fabric-make.log" >&2; pack_fail "libfabric's build failed (log: $work/fabric-make.log)"; }
	pack_prune "$dest"
	[[ -z $(pack_missing_sonames "$dest") ]] ||
		pack_fail "the CUDA libfabric needs libraries beyond glibc: $(pack_missing_sonames "$dest" | paste -sd' ')"
}

pack_manifest() {
	local dir=$1 tarball
	tarball=$(cd "$dir" && ls ferry-*.tar.gz)
	{
		echo "# GPU bundle of ferry"
		echo
		echo "Made by scripts/gpu-check.sh --pack on $(date -u '+%Y-%m-%d %H:%M UTC'), on $(. /etc/os-release && echo "$PRETTY_NAME"), from ferry commit $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [[ -z $(git -C "$top" status --porcelain --untracked-files=no 2>/dev/null) ]] || echo ' with changes not committed')."
		echo "Run it with: bash scripts/gpu-check.sh --bundle DIR --out OUTDIR (docs/gpu.md)."
		echo
		echo "## ferry"
		echo "- $tarball, sha256 $(sha256sum "$dir/$tarball" | cut -d' ' -f1)"
		echo
		echo "## debs/: Debian packages, unpacked"
		sort -u "$work/packages.txt" | sed 's/^/- /'
		echo
		echo "## fabric-cuda/: libfabric $fabric_version with CUDA"
		echo "- source: Debian $pack_fabric_suite's libfabric $fabric_version, $fabric_orig, sha256 $fabric_sum (checked against Debian's Sources list)"
		echo "- $fabric_patches"
		echo "- configure ${pack_fabric_configure[*]}"
		echo "- $fabric_nvml"
		echo "- providers built in: $(sed -n 's/^\*\*\* Built-in providers:[[:space:]]*//p' "$work/fabric-configure.log")"
		echo
		echo "## Sizes"
		(cd "$dir" && du -sh debs fabric-cuda "$tarball" | sed 's/^/- /')
	} >"$dir/MANIFEST.md"
}

pack_main() {
	local dir=$1 t0=$SECONDS size
	for tool in apt-get apt-cache dpkg-deb dpkg-query dpkg-source readelf autoreconf make cc sha256sum; do
		command -v "$tool" >/dev/null || pack_fail "$tool not found: --pack runs on Debian 12 with its build tools"
	done
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-gpu-pack.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	: >"$work/packages.txt"
	pack_ferry_tarball "$dir"
	pack_apt_setup
	pack_log "Debian packages: ${pack_roots[*]}"
	pack_debs "$dir/debs" "${pack_roots[@]}"
	pack_closure "$dir/debs"
	pack_prune "$dir/debs"
	pack_fabric_source
	pack_fabric_build "$dir/fabric-cuda"
	pack_manifest "$dir"
	size=$(du -sm "$dir" | cut -f1)
	pack_log "packed in $((SECONDS - t0)) s: $dir, $size MiB ($(du -sb "$dir" | cut -f1) bytes)"
	((size < 64)) || pack_fail "$dir is $size MiB: the device tool carries at most 64 MiB"
}
