"""kv_disagg: disaggregated serving in miniature, in Python with torch.

A "prefill" process holds a paged KV cache, a torch tensor of shape
[blocks, block_tokens, heads, head_dim], filled with a pattern that
depends on every (block, token, head, dim) so that a misplaced or torn
block shows.  A "decode" process holds a cache of the same shape, zeroed,
registers it and publishes it.  Several sequences, each with a block
table of its own (scattered prefill blocks) and blocks taken from
decode's free list (scattered too), move as prepared descriptor lists:
one Prepared over the two caches, then one post per sequence with numpy
uint32 index arrays, carrying the notification {sequence, blocks}.
Decode waits on each sequence's counter, checks exactly those blocks with
torch.equal, and at the end that every block no sequence took is still
zero.  It is examples/kv_transfer.c's push mode, with torch tensors.

    python3 python/examples/kv_disagg.py [options]          both, this host
    FERRY_OOB_TOKEN=S python3 python/examples/kv_disagg.py --role decode --metadata bootstrap://:18517
    FERRY_OOB_TOKEN=S python3 python/examples/kv_disagg.py --role prefill --metadata bootstrap://HOST:18517

Both sides must be given the same options (the block tables derive from
them and --seed, as kv_transfer.c's do from its constants).  They meet
through the metadata service at --metadata, decode as NAME-decode and
prefill as NAME (--name, default kv-disagg).  On bootstrap:// the first
to open the URL becomes the hub: start decode first, on every address
(bootstrap://:18517), and give prefill decode's HOST.  With an etcd://
URL, either may start first.

The first form starts both roles as processes of their own, meeting at a
bootstrap hub on a free port of 127.0.0.1 under a random token (passed
to them in FERRY_OOB_TOKEN), and ends with "kv_disagg: OK" (exit 0) or a
failure (exit 1).  Every wait has a timeout (--timeout), and the parent
kills both processes if the run takes longer than --deadline.
"""
import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _twoproc  # noqa: E402

PROG = "kv_disagg"
GOODBYE = 1 << 40  # decode's verdict to prefill: 1 verified, 2 corrupt
DTYPES = ("float16", "bfloat16", "float32")


def options(argv=None):
    p = argparse.ArgumentParser(
        prog="kv_disagg.py",
        description="Move chosen blocks of a paged KV cache (a torch "
                    "tensor) from a prefill process to a decode process "
                    "with prepared lists and per-sequence notifications.")
    p.add_argument("--blocks", type=int, default=256,
                   help="blocks in each cache (default %(default)s)")
    p.add_argument("--block-tokens", type=int, default=16,
                   help="tokens per block (default %(default)s)")
    p.add_argument("--heads", type=int, default=8,
                   help="KV heads (default %(default)s)")
    p.add_argument("--head-dim", type=int, default=128,
                   help="head dimension (default %(default)s)")
    p.add_argument("--dtype", choices=DTYPES, default="float16",
                   help="element type (default %(default)s)")
    p.add_argument("--sequences", type=int, default=4,
                   help="sequences moved, one post each (default "
                        "%(default)s)")
    p.add_argument("--seed", type=int, default=2024,
                   help="seed of the block tables (default %(default)s)")
    _twoproc.add_common_options(p)
    a = p.parse_args(argv)
    for name in ("blocks", "block_tokens", "heads", "head_dim", "sequences"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.blocks < 2 * a.sequences:
        p.error("--blocks %d: give at least 2 blocks per sequence (%d), so "
                "that some blocks stay untouched" % (a.blocks, 2 * a.sequences))
    if a.blocks > 1 << 24:
        p.error("--blocks %d: at most %d" % (a.blocks, 1 << 24))
    if a.role not in (None, "prefill", "decode"):
        p.error("--role %s: prefill or decode" % a.role)
    _twoproc.meeting_options(a, 18517, "kv-disagg")
    return a


# ---- what both sides know -------------------------------------------------


class Sequence:
    def __init__(self, seq_id, prefill_blocks, decode_blocks):
        self.id = seq_id
        self.prefill_blocks = prefill_blocks  # its block table in prefill
        self.decode_blocks = decode_blocks    # taken from decode's free list


def plan(a):
    """The sequences: each a block table of scattered prefill blocks, and
    as many blocks from decode's free list (shuffled, so scattered too).
    At most half of either cache moves; the rest must stay zero."""
    rng = random.Random(a.seed)
    cap = a.blocks // (2 * a.sequences)
    lengths = [rng.randint(max(1, cap // 2), cap) for _ in range(a.sequences)]
    tables = rng.sample(range(a.blocks), sum(lengths))
    free_list = rng.sample(range(a.blocks), a.blocks)
    seqs, at = [], 0
    for s, n in enumerate(lengths):
        seqs.append(Sequence(s, tables[at:at + n], free_list[at:at + n]))
        at += n
    return seqs


def pattern(block_ids, a, torch):
    """Prefill's content of the given blocks: every element a hash of
    (block, token, head, dim), a multiple of 1/16 in [-127/16, 127/16]
    (exact in float16, bfloat16 and float32, and computed in integers, so
    both sides get the same bits)."""
    i64 = torch.int64
    b = torch.as_tensor(list(block_ids), dtype=i64).view(-1, 1, 1, 1)
    t = torch.arange(a.block_tokens, dtype=i64).view(1, -1, 1, 1)
    h = torch.arange(a.heads, dtype=i64).view(1, 1, -1, 1)
    d = torch.arange(a.head_dim, dtype=i64).view(1, 1, 1, -1)
    x = (b * 0x9E3779B1 + t * 0x85EBCA77 + h * 0xC2B2AE3D +
         d * 0x27D4EB2F) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x = x ^ (x >> 12)
    return ((x % 255) - 127).to(torch.float32).div_(16).to(dtype_of(a, torch))


def dtype_of(a, torch):
    return getattr(torch, a.dtype)


def shape_of(a):
    return (a.blocks, a.block_tokens, a.heads, a.head_dim)


def block_bytes(a, torch):
    return (a.block_tokens * a.heads * a.head_dim *
            torch.tensor([], dtype=dtype_of(a, torch)).element_size())


def size_words(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%.1f %s" % (n / (1 << shift), unit)
    return "%d B" % n


def ids_words(ids, most=6):
    shown = ", ".join(str(i) for i in ids[:most])
    return "[%s%s]" % (shown, ", ..." if len(ids) > most else "")


def where_words(info):
    return "%s on %s" % (info["provider"], info["domain"])


# ---- decode: the target ---------------------------------------------------


def run_decode(a):
    step = _twoproc.Steps("decode")
    report = _twoproc.Report(a.report_fd)
    try:
        step("importing torch and ferry")
        import torch
        import ferry

        step("allocating the KV cache")
        kv = torch.zeros(shape_of(a), dtype=dtype_of(a, torch))
        step("opening the context")
        ctx = _twoproc.open_context(ferry, a, True)
        step("registering the KV cache")
        mem = ctx.register(kv)  # remote read and write
        step("publishing it")
        meeting = _twoproc.Meeting(ctx, a, "-decode")
        where = meeting.publish({"kv": mem}, report)
        print("decode: KV cache %s %s (%s, %s per block) on %s, published "
              'as "kv" at %s' % (list(kv.shape), a.dtype,
                                 size_words(kv.numel() * kv.element_size()),
                                 size_words(block_bytes(a, torch)),
                                 where_words(ctx.info()), where), flush=True)

        step("waiting for prefill")
        peer = meeting.wait_peer()

        bad, moved, used = 0, 0, set()
        seqs = plan(a)
        for s in seqs:
            n = len(s.decode_blocks)
            # Its counter reaches n once all its blocks are in kv.
            step("waiting for sequence %d" % s.id)
            peer.counter_wait(s.id, n, timeout=a.timeout)
            step("verifying sequence %d" % s.id)
            got = kv[torch.as_tensor(s.decode_blocks)]
            ok = torch.equal(got, pattern(s.prefill_blocks, a, torch))
            bad += not ok
            moved += n
            used.update(s.decode_blocks)
            print("decode: sequence %d complete: %d blocks into %s: %s" % (
                s.id, n, ids_words(s.decode_blocks),
                "equal to prefill's" if ok else "CORRUPT"), flush=True)

        step("verifying the whole cache")
        # Every sequence again (nothing overwrote it later), and the rest.
        for s in seqs:
            bad += not torch.equal(kv[torch.as_tensor(s.decode_blocks)],
                                   pattern(s.prefill_blocks, a, torch))
        untouched = sorted(set(range(a.blocks)) - used)
        nonzero = int(torch.count_nonzero(kv[torch.as_tensor(untouched)]))
        ok = bad == 0 and nonzero == 0
        print("decode: verified %d blocks of %d sequences and %d untouched "
              "blocks%s: %s" % (
                  moved, len(seqs), len(untouched),
                  "" if nonzero == 0 else
                  " (%d elements not zero)" % nonzero,
                  "OK" if ok else "CORRUPT"), flush=True)
        report.send(ok=ok, blocks=moved, sequences=len(seqs))

        step("saying goodbye")
        peer.notify(GOODBYE, 1 if ok else 2).wait(timeout=a.timeout)
        return 0 if ok else 1
    except Exception as e:  # ferry.Error, and anything unexpected
        return step.fail(e)
    finally:
        report.close()


# ---- prefill: the initiator ------------------------------------------------


def run_prefill(a):
    step = _twoproc.Steps("prefill")
    try:
        step("importing torch, numpy and ferry")
        import numpy as np
        import torch
        import ferry

        step("filling the KV cache")
        kv = torch.empty(shape_of(a), dtype=dtype_of(a, torch))
        per = max(1, (1 << 20) // (a.block_tokens * a.heads * a.head_dim))
        for b in range(0, a.blocks, per):
            kv[b:b + per] = pattern(range(b, min(b + per, a.blocks)), a,
                                    torch)
        step("opening the context")
        ctx = _twoproc.open_context(ferry, a, False)
        step("registering the KV cache")
        mem = ctx.register(kv, access=0)  # local use only
        step("finding decode")
        meeting = _twoproc.Meeting(ctx, a, "-decode")
        peer = meeting.join()
        step("looking up decode's cache")
        rmem = meeting.lookup("kv")
        bsize = block_bytes(a, torch)
        if rmem.nbytes != mem.nbytes:
            raise RuntimeError(
                "decode's cache has %d bytes and prefill's %d: give both "
                "sides the same --blocks, --block-tokens, --heads, "
                "--head-dim and --dtype" % (rmem.nbytes, mem.nbytes))

        step("preparing the lists")
        # Both caches as one paged segment: block i is at i * bsize.
        prep = peer.prepare(ferry.WRITE, ferry.Blocks(mem, bsize, a.blocks),
                            ferry.Blocks(rmem, bsize, a.blocks))

        seqs = plan(a)
        reqs = []
        t0 = time.perf_counter()
        for s in seqs:
            step("posting sequence %d" % s.id)
            local = np.asarray(s.prefill_blocks, dtype=np.uint32)
            remote = np.asarray(s.decode_blocks, dtype=np.uint32)
            reqs.append(prep.post(local, remote, notify=(s.id, len(local)),
                                  timeout=a.timeout))
        for s, r in zip(seqs, reqs):
            step("sequence %d's transfer" % s.id)
            r.wait(timeout=a.timeout)
        dt = time.perf_counter() - t0
        for s in seqs:
            print("prefill: sequence %d: %d blocks %s -> decode %s" % (
                s.id, len(s.prefill_blocks), ids_words(s.prefill_blocks),
                ids_words(s.decode_blocks)), flush=True)
        nblocks = sum(len(s.prefill_blocks) for s in seqs)
        print("prefill: pushed %d sequences, %d blocks (%s) in %d posts, "
              "%.2f ms, on %s" % (len(seqs), nblocks,
                                  size_words(nblocks * bsize), len(seqs),
                                  dt * 1e3, where_words(ctx.info())),
              flush=True)

        step("waiting for decode's verdict")
        peer.counter_wait(GOODBYE, 1, timeout=a.timeout)
        verdict = ctx.counter_get(GOODBYE)
        if verdict != 1:
            print("prefill: decode found its cache corrupt", file=sys.stderr,
                  flush=True)
            return 1
        return 0
    except Exception as e:
        return step.fail(e)


def main():
    a = options()
    if a.role == "decode":
        return run_decode(a)
    if a.role == "prefill":
        return run_prefill(a)
    ok = _twoproc.run_roles(PROG, os.path.abspath(__file__), "decode",
                            "prefill", a.metadata, a.deadline) is not None
    print("kv_disagg: %s" % ("OK" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
