"""post_bench.py: the cost of Prepared.post for N blocks chosen by numpy
index arrays, against the same post from C (bench/post_bench.c).

    python3 python/bench/post_bench.py [--blocks N] [--block-size B]
        [--iters K] [--warmup W] [--provider P] [--domain D]
        [--initiator-thread 0|1] [--repeat R] [--c-bench PATH]

It runs the C program and its Python twin (this file, --lang python) in
turn, R times each, alternating which goes first, each run a fresh
process; then prints a table of the medians over the runs per language,
the ratios python/c of post p50 and round p50, and one machine-readable
line:

    post_bench_compare blocks=N block_size=B iters=K repeat=R provider=P
    domain=D c_post_p50_us=X py_post_p50_us=X post_ratio=X
    c_round_p50_us=X py_round_p50_us=X round_ratio=X target_post_ratio=1.5
    verdict=holds|missed

(one line).  The C program is --c-bench, by default build-opt/bench/
post_bench, else build/bench/post_bench, of this repository.  The Python
runs load the libferry of the C program's build tree (LD_LIBRARY_PATH, its
lib/.libs), so both measure the same library; the table names both.

The twin (--lang python) takes bench/post_bench.c's steps exactly, and
prints the same line with lang=python:

  1. Two contexts in this process, each with provider and domain: the
     target, with progress_thread=True, then the initiator, without (its
     waits drive it) unless --initiator-thread 1.
  2. The target allocates a region of 2*N*B bytes (a numpy uint8 array),
     zero-filled, registers it (REMOTE_WRITE | REMOTE_READ) and exports
     its key blob.
  3. The initiator adds the target as a peer (its address()), imports the
     blob, and registers a local region of the same size, filled with 0x5a
     (access=0).
  4. A local and a remote Blocks, each 2N blocks of B bytes from offset
     0, stride B; peer.prepare(ferry.WRITE, local, remote).
  5. Indices, numpy uint32: local_idx[i] = (i * 7) % 2N and
     remote_idx[i] = (i * 13 + 5) % 2N for i < N.
  6. W warm-up iterations, then K timed ones.  Each iteration:
     prep.post(local_idx, remote_idx) is timed alone ("post"); then
     req.wait(), req.close() and del req; post + wait + close are timed together
     ("round").  Clock: time.monotonic_ns (CLOCK_MONOTONIC).
  7. Teardown: close the Prepared (it releases the prepared transfer and
     destroys both lists), the imported region, the local registration,
     the peer, the initiator, the target's registration, the target.

Percentiles are nearest-rank: the p-th of K sorted samples is sample
ceil(p * K / 100) (from 1).  Exit 0; 1 when a run fails; 2 for bad
options.
"""
import argparse
import array
import glob
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TARGET_RATIO = 1.5
MAX_BLOCKS = 1000000
MAX_ITERS = 1000000
MAX_REGION = 4 << 30


def options(argv=None):
    p = argparse.ArgumentParser(
        prog="post_bench.py",
        description="Prepared.post from Python against ferry_xfer_post "
                    "from C (bench/post_bench.c), same steps, same run.")
    p.add_argument("--blocks", type=int, default=1024,
                   help="blocks per post, 1 to %d (default %%(default)s)"
                        % MAX_BLOCKS)
    p.add_argument("--block-size", type=int, default=4096,
                   help="bytes per block (default %(default)s)")
    p.add_argument("--iters", type=int, default=200,
                   help="timed iterations (default %(default)s)")
    p.add_argument("--warmup", type=int, default=20,
                   help="warm-up iterations (default %(default)s)")
    p.add_argument("--provider", default="tcp;ofi_rxm",
                   help="default %(default)s")
    p.add_argument("--domain", default="lo",
                   help='default %(default)s; "": the provider\'s own (shm)')
    p.add_argument("--initiator-thread", type=int, choices=(0, 1), default=0,
                   help="1: the initiator has a progress thread too, and "
                   "the main thread sleeps in its waits (default 0: its "
                   "waits poll)")
    p.add_argument("--repeat", type=int, default=9,
                   help="runs of each language (default %(default)s)")
    p.add_argument("--c-bench", default=None,
                   help="the C program (default: build-opt/bench/post_bench "
                        "or build/bench/post_bench of this repository)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds one run may take (default %(default)s)")
    p.add_argument("--lang", choices=("python",), default=None,
                   help="run the Python twin once and print its line")
    a = p.parse_args(argv)
    if not 1 <= a.blocks <= MAX_BLOCKS:
        p.error("--blocks %d: give 1 to %d" % (a.blocks, MAX_BLOCKS))
    if not 1 <= a.iters <= MAX_ITERS:
        p.error("--iters %d: give 1 to %d" % (a.iters, MAX_ITERS))
    if not 0 <= a.warmup <= MAX_ITERS:
        p.error("--warmup %d: give 0 to %d" % (a.warmup, MAX_ITERS))
    if a.block_size < 1:
        p.error("--block-size %d: give at least 1" % a.block_size)
    if 2 * a.blocks * a.block_size > MAX_REGION:
        p.error("%d blocks of %d bytes need two regions of %d bytes each, "
                "above the 4 GiB this bench allows" %
                (a.blocks, a.block_size, 2 * a.blocks * a.block_size))
    if a.repeat < 1:
        p.error("--repeat %d: give at least 1" % a.repeat)
    return a


# ---- the twin -------------------------------------------------------------


def percentile_us(sorted_ns, p):
    """Nearest rank: sample ceil(p * n / 100) of the sorted ones, in us."""
    rank = (p * len(sorted_ns) + 99) // 100
    return sorted_ns[rank - 1 if rank > 0 else 0] / 1e3


def loaded_libferry():
    """The path of the libferry this process loaded."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libferry.so" in line:
                    return os.path.realpath(line.split()[-1])
    except OSError:
        pass
    return "?"


def twin(a):
    import numpy as np
    import ferry

    n, bsize = a.blocks, a.block_size
    nblocks, length = 2 * n, 2 * n * bsize
    domain = a.domain or None
    print("post_bench.py: %d of %d blocks of %d bytes per post, %d "
          "iterations after %d warm-up, %s on %s" % (
              n, nblocks, bsize, a.iters, a.warmup, a.provider,
              a.domain or "(the provider's)"), file=sys.stderr)

    # 1. Contexts.
    def open_context(role, progress_thread):
        ctx = ferry.Context(provider=a.provider, domain=domain,
                            progress_thread=progress_thread)
        info = ctx.info()
        print("post_bench.py: %s context: %s on %s (%s)" % (
            role, info["provider"], info["domain"], info["fabric"]),
              file=sys.stderr)
        return ctx

    tctx = open_context("target", True)
    ictx = open_context("initiator", bool(a.initiator_thread))

    # 2. The target's region, registered and exported.
    tbuf = np.zeros(length, dtype=np.uint8)
    tmem = tctx.register(tbuf, access=ferry.REMOTE_WRITE | ferry.REMOTE_READ)
    blob = tmem.export()

    # 3. The initiator: the peer, the imported region, its own region.
    peer = ictx.add_peer(tctx.address())
    rmem = peer.import_region(blob)
    lbuf = np.full(length, 0x5A, dtype=np.uint8)
    lmem = ictx.register(lbuf, access=0)

    # 4. Lists, prepared once.
    local = ferry.Blocks(lmem, bsize, nblocks, offset=0, stride=bsize)
    remote = ferry.Blocks(rmem, bsize, nblocks, offset=0, stride=bsize)
    prep = peer.prepare(ferry.WRITE, local, remote)

    # 5. Indices (N <= 1e6: every product fits 32 bits).
    i = np.arange(n, dtype=np.uint64)
    local_idx = ((i * 7) % nblocks).astype(np.uint32)
    remote_idx = ((i * 13 + 5) % nblocks).astype(np.uint32)

    # 6. Warm-up, then the timed iterations.
    # Samples go into C arrays: a list would keep two new int objects per
    # iteration, and each fresh page they need costs the next post's
    # clock read (its int) a page fault, ~20 us here: Python's p99, not
    # the binding's.
    post_ns = array.array("q", bytes(8 * a.iters))
    round_ns = array.array("q", bytes(8 * a.iters))
    post = prep.post
    now_ns = time.monotonic_ns
    warmup = a.warmup
    for it in range(warmup + a.iters):
        t0 = now_ns()
        req = post(local_idx, remote_idx)
        t1 = now_ns()
        req.wait()
        req.close()
        del req  # the Request object goes too, as ferry_req_close
        t2 = now_ns()
        if it >= warmup:
            post_ns[it - warmup] = t1 - t0
            round_ns[it - warmup] = t2 - t0

    # 7. Teardown.
    prep.close()
    rmem.close()
    lmem.close()
    peer.close()
    ictx.close()
    tmem.close()
    tctx.close()

    post_ns = sorted(post_ns)
    round_ns = sorted(round_ns)
    p50, p99 = percentile_us(post_ns, 50), percentile_us(post_ns, 99)
    r50, r99 = percentile_us(round_ns, 50), percentile_us(round_ns, 99)
    print("post_bench.py: post p50 %.1f us, p99 %.1f us (%.1f ns/block); "
          "round p50 %.1f us, p99 %.1f us (%.1f MB/s at p50); libferry %s" % (
              p50, p99, p50 * 1e3 / n, r50, r99, n * bsize / r50,
              loaded_libferry()), file=sys.stderr)
    print("post_bench lang=python blocks=%d block_size=%d iters=%d "
          "post_p50_us=%.1f post_p99_us=%.1f round_p50_us=%.1f "
          "round_p99_us=%.1f" % (n, bsize, a.iters, p50, p99, r50, r99),
          flush=True)
    return 0


# ---- the comparison -------------------------------------------------------

LINE = re.compile(r"^post_bench lang=(\w+) (.*)$")


def parse_line(out):
    """The fields of the one 'post_bench lang=...' line of out."""
    for line in out.splitlines():
        m = LINE.match(line.strip())
        if m:
            fields = dict(kv.split("=", 1) for kv in m.group(2).split())
            fields["lang"] = m.group(1)
            return fields
    return None


def find_c_bench(path):
    if path is not None:
        return path if os.path.exists(path) else None
    for build in ("build-opt", "build"):
        p = os.path.join(REPO, build, "bench", "post_bench")
        if os.path.exists(p):
            return p
    return None


def c_libdir(c_bench):
    """The lib/.libs of the C program's build tree, if it has one."""
    d = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(c_bench))), "lib", ".libs")
    return d if os.path.isdir(d) else None


def run_one(argv, env, timeout):
    try:
        r = subprocess.run(argv, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timed out after %g s" % timeout
    fields = parse_line(r.stdout)
    if r.returncode != 0 or fields is None:
        return None, "exit %d: %s" % (r.returncode,
                                      (r.stderr or r.stdout).strip()[-2000:])
    return fields, r.stderr


def compare(a):
    c_bench = find_c_bench(a.c_bench)
    if c_bench is None:
        print("post_bench.py: no C bench at %s; build it (cd build-opt && "
              "make bench/post_bench) or give --c-bench PATH" % (
                  a.c_bench or "build-opt/bench/post_bench or "
                  "build/bench/post_bench"), file=sys.stderr)
        return 1
    common = ["--blocks", str(a.blocks), "--block-size", str(a.block_size),
              "--iters", str(a.iters), "--warmup", str(a.warmup),
              "--provider", a.provider, "--domain", a.domain,
              "--initiator-thread", str(a.initiator_thread)]
    c_argv = [c_bench] + common
    py_argv = [sys.executable, os.path.abspath(__file__), "--lang",
               "python"] + common
    py_env = dict(os.environ)
    # The module built in place beside this file (setup.py build_ext
    # --inplace), if there is one; else the ferry the environment finds.
    if glob.glob(os.path.join(os.path.dirname(HERE), "ferry", "_ferry*.so")):
        py_env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(HERE)] +
            [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p])
    libdir = c_libdir(c_bench)
    if libdir is not None:
        py_env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [libdir] + [p for p in os.environ.get("LD_LIBRARY_PATH",
                                                  "").split(os.pathsep) if p])
    runs = {"c": [], "python": []}
    py_lib = "?"
    for rep in range(a.repeat):
        order = ("c", "python") if rep % 2 == 0 else ("python", "c")
        for lang in order:
            argv, env = (c_argv, None) if lang == "c" else (py_argv, py_env)
            fields, err = run_one(argv, env, a.timeout)
            if fields is None:
                print("post_bench.py: the %s run %d failed: %s" % (
                    lang, rep + 1, err), file=sys.stderr)
                return 1
            if lang == "python":
                m = re.search(r"libferry (\S+)", err)
                py_lib = m.group(1) if m else py_lib
            runs[lang].append(fields)
            print("  run %d %-6s post p50 %8.1f us  p99 %8.1f us   round p50 "
                  "%9.1f us  p99 %9.1f us" % (
                      rep + 1, lang, float(fields["post_p50_us"]),
                      float(fields["post_p99_us"]),
                      float(fields["round_p50_us"]),
                      float(fields["round_p99_us"])), flush=True)

    def med(lang, key):
        return statistics.median(float(f[key]) for f in runs[lang])

    keys = ("post_p50_us", "post_p99_us", "round_p50_us", "round_p99_us")
    c = {k: med("c", k) for k in keys}
    py = {k: med("python", k) for k in keys}

    def ratio(k):
        return py[k] / c[k] if c[k] > 0 else float("inf")

    print()
    print("post_bench: %d blocks of %d B per post, %d iterations (+%d "
          "warm-up), %s on %s, medians of %d runs each" % (
              a.blocks, a.block_size, a.iters, a.warmup, a.provider,
              a.domain or "(the provider's)", a.repeat))
    print("  C:      %s (libferry %s)" % (c_bench, libdir or "as built"))
    print("  Python: %s (libferry %s)" % (os.path.abspath(__file__), py_lib))
    print()
    print("| us | C | Python | python/c |")
    print("|---|---|---|---|")
    for k, name in zip(keys, ("post p50", "post p99", "round p50",
                              "round p99")):
        print("| %s | %.1f | %.1f | %.2f |" % (name, c[k], py[k], ratio(k)))
    print()
    post_ratio, round_ratio = ratio("post_p50_us"), ratio("round_p50_us")
    verdict = "holds" if post_ratio <= TARGET_RATIO else "missed"
    print("post p50: python/c %.2f (target <= %.1f: %s); round p50: "
          "python/c %.2f" % (post_ratio, TARGET_RATIO, verdict, round_ratio))
    print("post_bench_compare blocks=%d block_size=%d iters=%d repeat=%d "
          "provider=%s domain=%s c_post_p50_us=%.1f py_post_p50_us=%.1f "
          "post_ratio=%.2f c_round_p50_us=%.1f py_round_p50_us=%.1f "
          "round_ratio=%.2f target_post_ratio=%.1f verdict=%s" % (
              a.blocks, a.block_size, a.iters, a.repeat, a.provider,
              a.domain or '""', c["post_p50_us"], py["post_p50_us"],
              post_ratio, c["round_p50_us"], py["round_p50_us"],
              round_ratio, TARGET_RATIO, verdict), flush=True)
    return 0


def main():
    a = options()
    if a.lang == "python":
        return twin(a)
    return compare(a)


if __name__ == "__main__":
    sys.exit(main())
