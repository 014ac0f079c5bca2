#!/usr/bin/env bash
# Builds the Debian packages from a release tarball (make dist in the build
# tree DIR, default build/, which it configures and builds first if
# needed), checks them with lintian (errors fail, warnings are printed),
# installs them on this machine, runs test/debian_installed.sh against
# them from outside any source or build tree, and purges them again.
#
#   scripts/debian.sh [DIR]
#
# Run as root, after scripts/test.sh (.ci/run does): the build skips the
# package's own test subset (DEB_BUILD_OPTIONS=nocheck; set
# DEB_BUILD_OPTIONS= to run it).  Everything it makes goes at its end.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh
top=$PWD
dir=${1:-build}

# Only what Debian installs: pyenv shims, /usr/local and variables such as
# LD_LIBRARY_PATH or PYTHONPATH must not reach the package build or the test.
clean_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" LC_ALL=C.UTF-8)

installed_packages() {
	dpkg-query -W -f='${db:Status-Status} ${Package}\n' | awk '$1 == "installed" { print $2 }' | sort
}

# At exit, whatever happened: purge the packages installed since $before
# (ours, and any dependency apt-get had to add), so the machine is left
# as it was, and remove $tmp.
tmp=
before=
cleanup() {
	local added=()
	if [[ -n $before ]]; then
		mapfile -t added < <(installed_packages | comm -13 "$before" -)
		if ((${#added[@]} > 0)); then
			log "purging what this script installed: ${added[*]}"
			apt-get purge -y -qq "${added[@]}" </dev/null >/dev/null
		fi
	fi
	[[ -z $tmp ]] || rm -rf "$tmp"
}
trap cleanup EXIT

main() {
	local start=$SECONDS version src deb debs
	if ((EUID != 0)); then
		echo "scripts/debian.sh: run as root: it installs the packages it builds (apt-get) and purges them afterwards" >&2
		exit 1
	fi

	configure_and_make "$dir" --enable-werror
	version=$(sed -n 's/^PACKAGE_VERSION = //p' "$dir/Makefile")
	log "$dir: make dist (ferry $version)"
	make -C "$dir" dist >/dev/null
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-deb.XXXXXX")
	tar -xzf "$dir/ferry-$version.tar.gz" -C "$tmp"
	src=$tmp/ferry-$version

	# dpkg-buildpackage writes the .debs beside the source tree, in $tmp.
	log "dpkg-buildpackage -us -uc -b (DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS-nocheck})"
	(cd "$src" && "${clean_env[@]}" \
		DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS-nocheck} parallel=$JOBS" \
		dpkg-buildpackage -us -uc -b)

	log "lintian"
	lintian --fail-on error "$tmp"/ferry_"$version"_*.changes

	# The packages' build tree goes: nothing of it may serve the test.
	rm -rf "$src"
	debs=()
	for deb in "$tmp"/*.deb; do
		[[ $deb == *-dbgsym_* ]] || debs+=("$deb")
	done
	before=$tmp/packages-before
	installed_packages >"$before"
	log "apt-get install ${debs[*]##*/}"
	apt-get install -y -qq --no-install-recommends "${debs[@]}" </dev/null

	log "test/debian_installed.sh"
	(cd / && "${clean_env[@]}" sh "$top/test/debian_installed.sh")

	log "Debian packages built, clean of lintian errors, installed and checked in $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"
}

main "$@"
