#!/usr/bin/env bash
# What ferry does on a real GPU, checked on a lent GPU machine that has no
# package registry, no internet, no libfabric and no hwloc (docs/gpu.md).
#
#   scripts/gpu-check.sh --pack DIR
#       here, on Debian 12: put into DIR (new or empty) everything that
#       machine lacks: ferry's release tarball (make dist), Debian's
#       packages that ferry builds and runs against, unpacked, with the
#       libraries they need, and a libfabric built from Debian's source
#       package with CUDA (FI_HMEM); DIR/MANIFEST.md says what and whence.
#   scripts/gpu-check.sh --bundle DIR [--out OUTDIR] [--work WORKDIR] [--jobs N]
#                        [--budget SECONDS] [--simulate]
#       there: build ferry twice from the tarball, against Debian's
#       libfabric (device memory staged through host buffers) and against
#       the CUDA libfabric (FI_HMEM, dmabuf), run the GPU checks, each
#       under `timeout`, and write OUTDIR/gpu-report.md with every log in
#       OUTDIR/gpu-logs.tar.gz (OUTDIR: default $OUT).
#
# Exits 0 when every check passed, 1 when one failed, 2 on bad arguments
# or a bundle it cannot use, and 77 where there is no GPU (after building
# and running what needs none, with the report saying so).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
me=gpu-check

usage() {
	cat <<EOF
usage: scripts/gpu-check.sh --pack DIR
       scripts/gpu-check.sh --bundle DIR [--out OUTDIR] [--work WORKDIR] [--jobs N]
                            [--budget SECONDS] [--simulate]
  --pack DIR      make the bundle in DIR (new or empty), here on Debian 12
  --bundle DIR    run the GPU checks with the bundle DIR made by --pack
  --out OUTDIR    where gpu-report.md and gpu-logs.tar.gz go (default: \$OUT)
  --work WORKDIR  build there and keep it (default: a temporary folder,
                  removed at the end)
  --jobs N        parallel make jobs (default: the number of CPUs)
  --budget SECONDS  the whole run's time; a check that would end later
                  gets what is left, or does not start (default 540: the
                  device tool stops a command at 600 s)
  --simulate      no GPU needed: the checks run on ferry's simulated
                  device, to test this script (not the GPU) end to end
EOF
}

# die WORDS: the usage error, as one sentence, and exit 2.
die() {
	echo "$me: $*" >&2
	echo "$me: run with --help for the usage" >&2
	exit 2
}

# need_value OPTION ARGC: OPTION must have a value after it.
need_value() {
	(($2 >= 2)) || die "$1 needs a value: $1 DIR"
	[[ -n ${3-} && ${3-} != --* ]] || die "$1 needs a value: $1 DIR (got '${3-}')"
}

pack_dir='' bundle='' out=${OUT-} work='' jobs='' budget='' simulate=no
out_given=no
while (($# > 0)); do
	case $1 in
	--pack) need_value "$1" $# "${2-}"; pack_dir=$2; shift 2 ;;
	--bundle) need_value "$1" $# "${2-}"; bundle=$2; shift 2 ;;
	--out) need_value "$1" $# "${2-}"; out=$2; out_given=yes; shift 2 ;;
	--work) need_value "$1" $# "${2-}"; work=$2; shift 2 ;;
	--jobs) need_value "$1" $# "${2-}"; jobs=$2; shift 2 ;;
	--budget) need_value "$1" $# "${2-}"; budget=$2; shift 2 ;;
	--simulate) simulate=yes; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown argument '$1': the options are --pack, --bundle, --out, --work, --jobs, --budget and --simulate" ;;
	esac
done

if [[ -n $pack_dir ]]; then
	[[ -z $bundle ]] || die "--pack and --bundle do not go together: pack here, then run with --bundle there"
	[[ $out_given == no && -z $work$jobs$budget && $simulate == no ]] ||
		die "--out, --work, --jobs, --budget and --simulate are for the run (--bundle), not for --pack"
	if [[ -e $pack_dir ]]; then
		[[ -d $pack_dir ]] || die "--pack $pack_dir: exists and is not a directory"
		[[ -z $(ls -A "$pack_dir") ]] ||
			die "--pack $pack_dir: the directory is not empty; give a new or empty one (nothing in it is replaced)"
	fi
	# shellcheck source=scripts/gpu-pack.sh
	. "$here/gpu-pack.sh"
	pack_main "$pack_dir"
	exit 0
fi

[[ -n $bundle ]] || die "give --pack DIR (here) or --bundle DIR (on the GPU machine)"
[[ -d $bundle ]] || die "--bundle $bundle: no such directory (make it with --pack and carry it)"
[[ -f $bundle/MANIFEST.md && -d $bundle/debs/usr/lib/x86_64-linux-gnu && -d $bundle/fabric-cuda/usr/lib/x86_64-linux-gnu ]] ||
	die "--bundle $bundle: not a bundle made by --pack (MANIFEST.md, debs/ or fabric-cuda/ missing)"
[[ -n $out ]] || die "give --out OUTDIR: \$OUT is not set, and the report needs a folder"
if [[ -n $jobs ]]; then
	[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs $jobs: not a whole number of at least 1"
fi
if [[ -n $budget ]]; then
	[[ $budget =~ ^[1-9][0-9]*$ ]] || die "--budget $budget: not a whole number of seconds of at least 1"
fi
# shellcheck source=scripts/gpu-run.sh
. "$here/gpu-run.sh"
run_main "$bundle" "$out" "$work" "${jobs:-$(nproc)}" "${budget:-540}" "$simulate"
