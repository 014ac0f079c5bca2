"""weights: ship a model's state_dict from one process into another's
pre-allocated tensors.

A "sender" builds a small transformer-like torch model (an Embedding,
LayerNorms, Linears, a buffer; bfloat16, float16, float32 and int64
tensors) from a fixed seed.  A "receiver" builds the same architecture
with every tensor zeroed, registers each tensor of its state_dict in
place (no copy: the state_dict's tensors share the parameters' memory),
and publishes each under its key.  The sender looks every key up, writes
all its tensors as one request of one piece per tensor (or, with
--per-tensor, one request per tensor), and the last of the data carries
a notification {DONE, tensors}; it does so twice, and times the first
write (which includes the first contact with the receiver's process) and
the second (warm) apart.  The receiver waits for both, then checks
every key with torch.equal against a model freshly built from the
sender's seed, and the parent prints "weights: OK" with the bytes moved
and the rate the sender measured.

    python3 python/examples/weights.py [options]          both, this host
    FERRY_OOB_TOKEN=S python3 python/examples/weights.py --role receiver --metadata bootstrap://:18518
    FERRY_OOB_TOKEN=S python3 python/examples/weights.py --role sender --metadata bootstrap://HOST:18518

Give both roles the same model options.  They meet through the metadata
service at --metadata, the receiver as NAME-receiver and the sender as
NAME (--name, default weights); on bootstrap:// the first to open the
URL becomes the hub, so start the receiver first and give the sender its
HOST.  Every wait has a timeout (--timeout); the parent kills both after
--deadline seconds.
"""
import argparse
import hashlib
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _twoproc  # noqa: E402

PROG = "weights"
DONE = 1          # {DONE, tensors}: all the data is in place
ELAPSED = 2       # {ELAPSED, ns}: how long the sender's warm write took
GOODBYE = 3       # receiver to sender: 1 equal, 2 not
FIRST = 4         # {FIRST, ns}: how long its first write took
NAME_OK = re.compile(r"[A-Za-z0-9._-]{1,127}\Z")


def options(argv=None):
    p = argparse.ArgumentParser(
        prog="weights.py",
        description="Ship a torch model's state_dict into another "
                    "process's pre-allocated tensors and verify it.")
    p.add_argument("--vocab", type=int, default=8192,
                   help="embedding rows (default %(default)s)")
    p.add_argument("--dim", type=int, default=512,
                   help="model width (default %(default)s)")
    p.add_argument("--layers", type=int, default=4,
                   help="blocks (default %(default)s)")
    p.add_argument("--seed", type=int, default=1234,
                   help="the sender's seed (default %(default)s)")
    p.add_argument("--per-tensor", action="store_true",
                   help="one write per tensor, then a notification alone, "
                        "instead of one write of all the pieces")
    _twoproc.add_common_options(p)
    a = p.parse_args(argv)
    for name in ("vocab", "dim", "layers"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name)
    if a.role not in (None, "sender", "receiver"):
        p.error("--role %s: sender or receiver" % a.role)
    _twoproc.meeting_options(a, 18518, "weights")
    return a


# ---- the model both sides build -------------------------------------------


def build_model(a, seed, torch):
    """A small decoder-like model in mixed dtypes, from seed."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)                        # float32
            self.qkv = nn.Linear(dim, 3 * dim).half()           # float16
            self.proj = nn.Linear(dim, dim).half()
            self.ln2 = nn.LayerNorm(dim)
            self.up = nn.Linear(dim, 4 * dim).to(torch.bfloat16)
            self.down = nn.Linear(4 * dim, dim).to(torch.bfloat16)

    class Model(nn.Module):
        def __init__(self, vocab, dim, layers):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim).to(torch.bfloat16)
            self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False).half()
            # Buffers travel in the state_dict too.
            self.register_buffer("positions",
                                 torch.randint(0, 1 << 40, (256,)))
            self.register_buffer("inv_freq",
                                 torch.rand(dim // 2, dtype=torch.float64))

    torch.manual_seed(seed)
    return Model(a.vocab, a.dim, a.layers)


def region_name(key):
    """The key as a bootstrap name ([A-Za-z0-9._-], 1 to 127 characters):
    state_dict keys usually are; others get a digest."""
    if NAME_OK.match(key):
        return key
    return "k-" + hashlib.sha1(key.encode()).hexdigest()


def tensors_of(model):
    """The state_dict, checked: contiguous tensors with bytes to move."""
    sd = model.state_dict()  # detached tensors sharing the model's memory
    for key, t in sd.items():
        if not t.is_contiguous():
            raise RuntimeError("%s is not contiguous" % key)
    return {k: t for k, t in sd.items() if t.numel() > 0}


def nbytes(t):
    return t.numel() * t.element_size()


# ---- receiver: the target ---------------------------------------------------


def run_receiver(a):
    step = _twoproc.Steps("receiver")
    report = _twoproc.Report(a.report_fd)
    try:
        step("importing torch and ferry")
        import torch
        import ferry

        step("building the model")
        model = build_model(a, a.seed + 1, torch)
        sd = tensors_of(model)
        with torch.no_grad():
            for t in sd.values():
                t.zero_()
        total = sum(nbytes(t) for t in sd.values())

        step("opening the context")
        ctx = _twoproc.open_context(ferry, a, True)
        step("registering the state_dict")
        mems = {region_name(k): ctx.register(t) for k, t in sd.items()}
        step("publishing it")
        meeting = _twoproc.Meeting(ctx, a, "-receiver")
        meeting.publish(mems, report)
        dtypes = sorted({str(t.dtype).replace("torch.", "")
                         for t in sd.values()})
        print("receiver: %d tensors (%s), %.1f MB, registered and published "
              "on %s" % (len(sd), ", ".join(dtypes), total / 1e6,
                         "%s on %s" % (ctx.info()["provider"],
                                       ctx.info()["domain"])), flush=True)

        step("waiting for the sender")
        peer = meeting.wait_peer()
        step("waiting for the weights")
        # The sender writes everything twice (the first and a warm write).
        peer.counter_wait(DONE, 2 * len(sd), timeout=a.timeout)
        peer.counter_wait(ELAPSED, 1, timeout=a.timeout)
        elapsed_ns = ctx.counter_get(ELAPSED)

        step("comparing with a model built from the sender's seed")
        ref = tensors_of(build_model(a, a.seed, torch))
        bad = [k for k in ref if k not in sd or not torch.equal(sd[k], ref[k])]
        bad += [k for k in sd if k not in ref]
        ok = not bad
        gbps = total / elapsed_ns if elapsed_ns else 0.0
        print("receiver: %d of %d tensors equal to the sender's%s; %.1f MB "
              "in %.2f ms (%.2f GB/s warm, as the sender timed it)" % (
                  len(sd) - len(bad), len(sd),
                  "" if ok else " (differ: %s)" % ", ".join(bad[:5]),
                  total / 1e6, elapsed_ns / 1e6, gbps), flush=True)
        report.send(ok=ok, tensors=len(sd), bytes=total,
                    elapsed_ns=elapsed_ns, gbps=gbps)

        step("saying goodbye")
        peer.notify(GOODBYE, 1 if ok else 2).wait(timeout=a.timeout)
        return 0 if ok else 1
    except Exception as e:
        return step.fail(e)
    finally:
        report.close()


# ---- sender: the initiator ----------------------------------------------------


def write_all(peer, pieces, a):
    """Writes every piece, then {DONE, pieces} once all the data is in
    place: one request of one piece per tensor, or (--per-tensor) one
    request per tensor and the notification after them."""
    if a.per_tensor:
        reqs = [peer.write(m, r, offset=o, remote_offset=ro, length=n,
                           timeout=a.timeout)
                for m, o, r, ro, n in pieces]
        for r in reqs:
            r.wait(timeout=a.timeout)
        peer.notify(DONE, len(pieces)).wait(timeout=a.timeout)
    else:
        peer.write(pieces, notify=(DONE, len(pieces)),
                   timeout=a.timeout).wait(timeout=a.timeout)


def run_sender(a):
    step = _twoproc.Steps("sender")
    try:
        step("importing torch and ferry")
        import torch
        import ferry

        step("building the model")
        sd = tensors_of(build_model(a, a.seed, torch))
        total = sum(nbytes(t) for t in sd.values())

        step("opening the context")
        ctx = _twoproc.open_context(ferry, a, False)
        step("finding the receiver")
        meeting = _twoproc.Meeting(ctx, a, "-receiver")
        peer = meeting.join()

        pieces = []
        for k, t in sd.items():
            step("looking up %s" % k)
            rmem = meeting.lookup(region_name(k))
            if rmem.nbytes != nbytes(t):
                raise RuntimeError(
                    "%s: the receiver's tensor has %d bytes and the "
                    "sender's %d: give both sides the same model options"
                    % (k, rmem.nbytes, nbytes(t)))
            step("registering %s" % k)
            pieces.append((ctx.register(t, access=0), 0, rmem, 0, nbytes(t)))

        # Twice: the first write to a receiver pays for the first contact
        # with its process (its progress thread may be asleep, the
        # provider sets up what it needs per peer); the second shows the
        # rate.  Both are printed, each for what it is.
        elapsed = []
        for attempt in ("first", "warm"):
            step("writing the weights (%s)" % attempt)
            t0 = time.perf_counter_ns()
            write_all(peer, pieces, a)
            elapsed.append(time.perf_counter_ns() - t0)
        peer.notify(FIRST, elapsed[0]).wait(timeout=a.timeout)
        peer.notify(ELAPSED, elapsed[1]).wait(timeout=a.timeout)
        print("sender: wrote %d tensors, %.1f MB, in %s, twice on %s on %s: "
              "the first time in %.2f ms (%.2f GB/s, with the first contact), "
              "again in %.2f ms (%.2f GB/s, warm)" % (
                  len(pieces), total / 1e6,
                  "%d requests" % len(pieces) if a.per_tensor
                  else "one request", ctx.info()["provider"],
                  ctx.info()["domain"], elapsed[0] / 1e6, total / elapsed[0],
                  elapsed[1] / 1e6, total / elapsed[1]), flush=True)

        step("waiting for the receiver's verdict")
        peer.counter_wait(GOODBYE, 1, timeout=a.timeout)
        if ctx.counter_get(GOODBYE) != 1:
            print("sender: the receiver found tensors that differ",
                  file=sys.stderr, flush=True)
            return 1
        return 0
    except Exception as e:
        return step.fail(e)


def main():
    a = options()
    if a.role == "receiver":
        return run_receiver(a)
    if a.role == "sender":
        return run_sender(a)
    r = _twoproc.run_roles(PROG, os.path.abspath(__file__), "receiver",
                           "sender", a.metadata, a.deadline)
    if r is None:
        print("weights: FAILED", flush=True)
        return 1
    print("weights: OK (%d tensors, %d bytes, %.2f GB/s warm)" % (
        r["tensors"], r["bytes"], r["gbps"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
