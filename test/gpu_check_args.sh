#!/bin/sh
# scripts/gpu-check.sh's arguments: every mistake is refused (exit 2) with
# a sentence naming it, before anything is packed, downloaded or built;
# --pack never writes into a directory that holds something.  The packing
# and the GPU run themselves are docs/gpu.md's (they take minutes and a
# GPU), not this test's.
set -eu

srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
gpu=$srcdir/scripts/gpu-check.sh
. "$srcdir/test/runs.sh"
scratch gpu-check-args

# Without $OUT, as on a machine that is not the lent one.
check() {
	words=$1
	shift
	exits 2 "$words" env -u OUT bash "$gpu" "$@"
}

exits 0 "--pack DIR" bash "$gpu" --help
check "give --pack DIR (here) or --bundle DIR"
check "unknown argument '--frobnicate'" --frobnicate
check "unknown argument 'extra'" --pack "$tmp/new" extra
check "--pack needs a value" --pack
check "--pack needs a value: --pack DIR (got '--bundle')" --pack --bundle "$tmp"
check "--bundle needs a value" --bundle
check "--out needs a value" --bundle "$tmp" --out

# --pack into a directory that holds something: refused, and left alone.
mkdir "$tmp/full"
echo mine >"$tmp/full/keep"
check "--pack $tmp/full: the directory is not empty" --pack "$tmp/full"
if [ "$(ls -A "$tmp/full")" = keep ] && [ "$(cat "$tmp/full/keep")" = mine ]; then
	pass "--pack left the non-empty directory as it was"
else
	ls -la "$tmp/full" >"$tmp/out"
	fail "--pack changed the non-empty directory it refused"
fi
: >"$tmp/file"
check "--pack $tmp/file: exists and is not a directory" --pack "$tmp/file"
check "--pack and --bundle do not go together" --pack "$tmp/new" --bundle "$tmp"
check "--out, --work, --jobs, --budget and --simulate are for the run" --pack "$tmp/new" --out "$tmp"
check "--out, --work, --jobs, --budget and --simulate are for the run" --pack "$tmp/new" --jobs 4
check "--out, --work, --jobs, --budget and --simulate are for the run" --pack "$tmp/new" --simulate
if [ -e "$tmp/new" ]; then
	echo "$tmp/new exists" >"$tmp/out"
	fail "a refused --pack made its directory"
else
	pass "no refused --pack made its directory"
fi

# --bundle: what is not a bundle, and the run's own options.
check "--bundle $tmp/none: no such directory" --bundle "$tmp/none"
mkdir "$tmp/empty"
check "not a bundle made by --pack" --bundle "$tmp/empty"
bundle=$tmp/bundle
mkdir -p "$bundle/debs/usr/lib/x86_64-linux-gnu" "$bundle/fabric-cuda/usr/lib/x86_64-linux-gnu"
: >"$bundle/MANIFEST.md"
check "give --out OUTDIR: \$OUT is not set" --bundle "$bundle"
check "--jobs 0: not a whole number of at least 1" --bundle "$bundle" --out "$tmp/out1" --jobs 0
check "--jobs two: not a whole number" --bundle "$bundle" --out "$tmp/out2" --jobs two
check "--budget 9m: not a whole number of seconds" --bundle "$bundle" --out "$tmp/out3" --budget 9m
if [ -e "$tmp/out1" ] || [ -e "$tmp/out2" ] || [ -e "$tmp/out3" ]; then
	echo "an --out folder exists" >"$tmp/out"
	fail "a refused run wrote its report folder"
else
	pass "no refused run wrote a report folder"
fi
exit $status
