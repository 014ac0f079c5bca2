"""Stale keys through the binding (docs/semantics.md, "Stale keys"): a
write or read through the key blob of a region its owner deregistered
raises ferry.StaleError promptly, and costs that request only: the peer
stays up and writes to its live regions go on; on tcp;ofi_rxm and shm,
between two contexts of this process and with the target in a child
process.  And a target context closed in this process while its peer is
watched: the peer is declared dead, nothing crashes."""
import time

import pytest

import ferry
import ferrytest
from ferrytest import LONG
from test_processes import Child

# A stale request ends within this, far below its deadline and the
# liveness (2 s).
PROMPT = 1.0


def pattern(n, seed):
    return bytearray((i * 7 + seed) & 0xFF for i in range(n))


def expect_stale(start):
    """start() makes a request through a stale key: it ends promptly with
    StaleError, whose sentence says what to do."""
    t0 = time.monotonic()
    with pytest.raises(ferry.StaleError) as e:
        start().wait(timeout=LONG)
    took = time.monotonic() - t0
    assert took < PROMPT, took
    assert e.value.name == "ESTALE"
    for words in ("no longer has a region", "registered", "import its new"):
        assert words in str(e.value), str(e.value)


def test_stale_key_in_this_process(pair):
    a, b = bytearray(4096), bytearray(1 << 16)
    ma, ra = pair.expose(a)
    mb, rb = pair.expose(b)
    src = pattern(1 << 16, 1)
    lmem = pair.initiator.register(src)
    pair.peer.write(lmem, ra, length=4096).wait(timeout=LONG)
    ma.close()
    expect_stale(lambda: pair.peer.write(lmem, ra, length=4096))
    expect_stale(lambda: pair.peer.read(lmem, ra, length=4096))
    for seed in range(2, 10):
        src[:] = pattern(1 << 16, seed)
        pair.peer.write(lmem, rb, notify=(9, 1)).wait(timeout=LONG)
    pair.target.counter_wait(9, 8, timeout=LONG)
    assert b == src
    assert pair.peer.state()[0] == "up"
    # On one host the stale key is caught before anything is posted: no
    # connection dropped under another operation.
    assert pair.initiator.stats()["ops_interrupted"] == 0


@pytest.mark.parametrize("provider", sorted(ferrytest.PROVIDERS))
def test_stale_key_in_another_process(provider):
    nbytes = 1 << 16
    cfg = ferrytest.PROVIDERS[provider]
    c = Child(ferrytest.child_replacer, cfg, nbytes)
    try:
        address, blob = c.recv()
        with ferry.Context(**cfg) as ctx:
            peer = ctx.add_peer(address)
            old = peer.import_region(blob)
            src = pattern(nbytes, 1)
            lmem = ctx.register(src)
            peer.write(lmem, old).wait(timeout=LONG)
            c.send("replace")
            fresh = peer.import_region(c.recv())
            expect_stale(lambda: peer.write(lmem, old))
            for seed in range(2, 10):
                src[:] = pattern(nbytes, seed)
                peer.write(lmem, fresh).wait(timeout=LONG)
            c.send("bytes")
            assert c.recv() == bytes(src)
            assert peer.state()[0] == "up"
        c.send("bye")
        c.join()
    finally:
        c.close()


def test_target_closed_in_this_process_shm():
    """shm reaches a context of this process through that context's own
    memory: closing it while a peer of it is watched (heartbeats) used to
    crash in libfabric.  The peer is declared dead instead."""
    pair = ferrytest.Pair(ferrytest.SHM, initiator={"liveness_ms": 400})
    mem, rmem = pair.expose(bytearray(4096))
    lmem = pair.initiator.register(bytearray(4096))
    pair.peer.write(lmem, rmem).wait(timeout=LONG)
    pair.peer.watch()
    rmem.close()
    mem.close()
    pair.target.close()
    end = time.monotonic() + 1.2  # three liveness periods
    while time.monotonic() < end:
        pair.initiator.progress()
    state, why = pair.peer.state()
    assert state == "dead"
    assert "closed" in why, why
    pair.initiator.close()
