"""Peer.write, read and notify between two contexts of this process, on
tcp;ofi_rxm and shm; Request; RemoteMemory; Peer's liveness calls."""
import numpy as np
import pytest

import ferry
import ferrytest
from ferrytest import LONG

torch = pytest.importorskip("torch")


def pattern(n, seed=1):
    return bytes((i * 31 + seed) & 0xFF for i in range(n))


def test_write_and_read_bytearray(pair):
    dst = bytearray(8192)
    mem, rmem = pair.expose(dst)
    src = bytearray(pattern(8192))
    lmem = pair.initiator.register(src)
    req = pair.peer.write(lmem, rmem, notify=(1, 1))
    assert isinstance(req, ferry.Request)
    req.wait(timeout=LONG)
    assert req.done
    pair.target.counter_wait(1, 1, timeout=LONG)
    assert dst == src
    # Read part of it back, at offsets.
    back = bytearray(1000)
    pair.peer.read(pair.initiator.register(back), rmem,
                   remote_offset=3000).wait(timeout=LONG)
    assert back == src[3000:4000]


def test_offsets_and_length(pair):
    dst = bytearray(4096)
    mem, rmem = pair.expose(dst)
    src = bytearray(pattern(4096))
    lmem = pair.initiator.register(src)
    pair.peer.write(lmem, rmem, offset=100, remote_offset=2000, length=50,
                    notify=(2, 1)).wait(timeout=LONG)
    pair.target.counter_wait(2, 1, timeout=LONG)
    assert dst[2000:2050] == src[100:150]
    assert dst[:2000] == bytes(2000) and dst[2050:] == bytes(2046)
    # length None: the rest of the local region from offset.
    pair.peer.write(lmem, rmem, offset=4000, notify=(2, 1)).wait(timeout=LONG)
    pair.target.counter_wait(2, 2, timeout=LONG)
    assert dst[:96] == src[4000:]


def test_numpy_and_torch_both_ways(pair):
    a = np.zeros(1024, dtype=np.float32)  # on the target
    mem, rmem = pair.expose(a)
    t = torch.arange(1024, dtype=torch.float32)  # on the initiator
    pair.peer.write(pair.initiator.register(t), rmem,
                    notify=(3, 1)).wait(timeout=LONG)
    pair.target.counter_wait(3, 1, timeout=LONG)
    np.testing.assert_array_equal(a, np.arange(1024, dtype=np.float32))
    a *= -2
    t2 = torch.zeros(1024, dtype=torch.float32)
    pair.peer.read(pair.initiator.register(t2), rmem).wait(timeout=LONG)
    assert torch.equal(t2, torch.arange(1024, dtype=torch.float32) * -2)
    # numpy on the initiator into torch on the target.
    tt = torch.zeros(16, 16, dtype=torch.int64)
    tmem, trmem = pair.expose(tt)
    n = np.arange(256, dtype=np.int64).reshape(16, 16)
    pair.peer.write(pair.initiator.register(n), trmem,
                    notify=(3, 1)).wait(timeout=LONG)
    pair.target.counter_wait(3, 2, timeout=LONG)
    assert torch.equal(tt, torch.from_numpy(n))


def test_large_transfer_in_several_operations(pair):
    n = 5 << 20  # above max_msg_size (1 MiB by default)
    dst = np.zeros(n, dtype=np.uint8)
    mem, rmem = pair.expose(dst)
    src = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    pair.peer.write(pair.initiator.register(src), rmem,
                    notify=(4, 1)).wait(timeout=LONG)
    pair.target.counter_wait(4, 1, timeout=LONG)
    assert np.array_equal(dst, src)
    back = np.zeros(n, dtype=np.uint8)
    pair.peer.read(pair.initiator.register(back), rmem).wait(timeout=LONG)
    assert np.array_equal(back, src)


def test_list_of_pieces(pair):
    d1, d2 = bytearray(1024), bytearray(1024)
    m1, r1 = pair.expose(d1)
    m2, r2 = pair.expose(d2)
    s1, s2 = bytearray(pattern(1024, 3)), bytearray(pattern(1024, 9))
    l1, l2 = pair.initiator.register(s1), pair.initiator.register(s2)
    pieces = [
        (l1, 0, 100),             # (local, remote_offset, length)
        (l2, 10, 200, 20),        # (local, offset, remote_offset, length)
        (l1, 500, r2, 600, 30),   # (local, offset, remote, remote_offset,
                                  #  length)
        (l2, 900, r2, 0, None),   # length None: the rest of the local region
    ]
    pair.peer.write(pieces, r1, notify=(5, 1)).wait(timeout=LONG)
    pair.target.counter_wait(5, 1, timeout=LONG)
    assert d1[0:100] == s1[0:100]
    assert d1[200:220] == s2[10:30]
    assert d1[100:200] == bytes(100) and d1[220:] == bytes(804)
    assert d2[600:630] == s1[500:530]
    assert d2[0:124] == s2[900:]
    # A tuple of pieces reads several into local memory at once.
    b1, b2 = bytearray(8), bytearray(8)
    k1, k2 = pair.initiator.register(b1), pair.initiator.register(b2)
    pair.peer.read(((k1, 0, 8), (k2, 0, r2, 600, 8)), r1).wait(timeout=LONG)
    assert b1 == s1[0:8] and b2 == s1[500:508]


def test_bad_pieces(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    lmem = tcp_pair.initiator.register(bytearray(64))
    peer = tcp_pair.peer
    cases = [
        (lambda: peer.write([], rmem), "the list of pieces is empty"),
        (lambda: peer.write([(lmem, 0)], rmem), "entry 0 of the list"),
        (lambda: peer.write([(lmem, "x", 8)], rmem), "entry 0 of the list"),
        (lambda: peer.write([(lmem, 0, 8)]), "entry 0 names no remote region"),
        (lambda: peer.write([(lmem, 0, 8), 5], rmem), "entry 1 of the list"),
        (lambda: peer.write(lmem), "must be a ferry.RemoteMemory"),
        (lambda: peer.write(lmem, None), "not NoneType"),
        (lambda: peer.write(bytearray(8), rmem),
         "must be a ferry.Memory (from Context.register), not bytearray"),
        (lambda: peer.write(lmem, mem), "must be a ferry.RemoteMemory"),
        (lambda: peer.write(lmem, rmem, length=0), "length is 0"),
        (lambda: peer.write(lmem, rmem, length=-1), "is not a byte count"),
        (lambda: peer.write(lmem, rmem, offset=64), "length is 0"),
    ]
    for call, words in cases:
        with pytest.raises(ferry.InvalidArgumentError) as e:
            call()
        assert words in str(e.value), (words, str(e.value))
    for kwargs in ({"offset": -1}, {"remote_offset": -1}, {"offset": 65},
                   {"length": 65}, {"remote_offset": 1}):
        with pytest.raises(ferry.RangeError):
            peer.write(lmem, rmem, **kwargs)


def test_notify_alone_and_notify_poll(pair):
    req = pair.peer.notify(9, 40)
    req.wait(timeout=LONG)
    pair.peer.notify(9, 2, timeout=LONG).wait(timeout=LONG)
    pair.target.counter_wait(9, 42, timeout=LONG)
    got = pair.target.notify_poll()
    assert [(n.kind, n.id, n.value, n.peer) for n in got] == [
        ("data", 9, 40, None), ("data", 9, 2, None)]
    with pytest.raises(ferry.InvalidArgumentError):
        pair.peer.notify(-1, 1)
    with pytest.raises(TypeError):
        pair.peer.notify(1)


def test_request_lifecycle(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    lmem = tcp_pair.initiator.register(bytearray(b"\x01") * 64)
    req = tcp_pair.peer.write(lmem, rmem)
    ferrytest.wait_until(req.test, what="Request.test")
    assert req.done and req.test() is True
    req.wait(timeout=0)  # ended: every later wait says the same
    req.wait()
    req.cancel()  # ended: nothing to cancel
    req.wait()
    req.close()
    req.close()
    req.wait()  # its outcome is kept after close
    assert req.test() is True
    # A closed request that had not ended cannot be driven any more.
    req2 = tcp_pair.peer.write(lmem, rmem)
    req2.close()
    assert req2.done is False  # never seen to end
    for call in (req2.wait, req2.test, req2.cancel):
        with pytest.raises(ferry.HandleError, match="this Request was closed"):
            call()
    with pytest.raises(ferry.InvalidArgumentError):
        req.wait(timeout=-0.5)
    assert mem.obj == bytearray(b"\x01") * 64


def test_request_timeout(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    lmem = tcp_pair.initiator.register(bytearray(64))
    # None: the context's deadline (60 s by default).
    tcp_pair.peer.write(lmem, rmem, timeout=None).wait(timeout=None)
    # 0 s means now (a deadline of 1 ms), not the context's default: a
    # request that cannot end at once ends with TimeoutError.
    ctx, peer, drmem, dmem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        with pytest.raises(ferry.TimeoutError, match="deadline passed"):
            peer.write(dmem, drmem, timeout=0).wait(timeout=LONG)


def test_remote_memory(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(300))
    assert rmem.nbytes == 300
    assert rmem.peer is tcp_pair.peer
    assert rmem.closed is False
    rmem.close()
    rmem.close()
    assert rmem.closed
    with pytest.raises(ferry.HandleError,
                       match="this RemoteMemory was closed"):
        rmem.nbytes
    lmem = tcp_pair.initiator.register(bytearray(300))
    with pytest.raises(ferry.HandleError, match="RemoteMemory was closed"):
        tcp_pair.peer.write(lmem, rmem)


def test_peer(tcp_pair):
    peer = tcp_pair.peer
    assert peer.context is tcp_pair.initiator
    assert peer.closed is False
    state, why = peer.state()
    assert state in ("connecting", "up") and isinstance(why, str)
    mem, rmem = tcp_pair.expose(bytearray(64))
    peer.write(tcp_pair.initiator.register(bytearray(64)), rmem).wait(
        timeout=LONG)
    assert peer.state()[0] == "up"
    peer.watch()
    peer.watch(False)
    peer.watch(True)
    rmem.close()
    peer.close()
    peer.close()
    assert peer.closed
    for call in (peer.state, peer.watch, peer.declare_dead,
                 lambda: peer.import_region(mem.export()),
                 lambda: peer.notify(1, 1),
                 lambda: peer.counter_wait(1, 1, timeout=0),
                 lambda: peer.prepare(ferry.WRITE, [], [])):
        with pytest.raises(ferry.HandleError, match="this Peer was closed"):
            call()
    # The same address again: a new Peer.
    again = tcp_pair.initiator.add_peer(tcp_pair.target.address())
    assert again is not peer
    again.notify(1, 1).wait(timeout=LONG)


def test_add_peer_twice(tcp_pair):
    """Each add_peer is a handle of its own, removed with its Peer: the
    other one keeps working."""
    again = tcp_pair.initiator.add_peer(tcp_pair.target.address())
    assert again is not tcp_pair.peer
    again.notify(1, 1).wait(timeout=LONG)
    again.close()
    tcp_pair.peer.notify(1, 1).wait(timeout=LONG)
    tcp_pair.target.counter_wait(1, 2, timeout=LONG)


def test_declare_dead_reports_peer_down_with_the_peer(tcp_pair):
    tcp_pair.peer.notify(1, 1).wait(timeout=LONG)
    tcp_pair.peer.declare_dead()
    assert tcp_pair.peer.state()[0] == "dead"
    events = tcp_pair.initiator.notify_poll()
    assert [(n.kind, n.id, n.value) for n in events] == [("peer_down", 0, 0)]
    assert events[0].peer is tcp_pair.peer
    tcp_pair.peer.declare_dead("again")  # already gone: fine


def test_counter_wait_on_a_peer(tcp_pair):
    back = tcp_pair.target.add_peer(tcp_pair.initiator.address())
    tcp_pair.peer.notify(12, 3).wait(timeout=LONG)
    back.counter_wait(12, 3, timeout=LONG)
    with pytest.raises(ferry.TimeoutError):
        back.counter_wait(12, 4, timeout=0.05)


def test_progress_without_a_progress_thread():
    """Two contexts without progress threads: the initiator's waits drive
    it, the target's progress() calls move the data."""
    cfg = ferrytest.TCP
    with ferry.Context(**cfg) as tgt, ferry.Context(**cfg) as ini:
        dst = bytearray(4096)
        mem = tgt.register(dst)
        peer = ini.add_peer(tgt.address())
        rmem = peer.import_region(mem.export())
        req = peer.write(ini.register(bytearray(b"\x33") * 4096), rmem,
                         notify=(1, 1))
        def moved():
            tgt.progress()
            return req.test() and tgt.counter_get(1) == 1
        ferrytest.wait_until(moved, what="the write")
        assert dst == bytearray(b"\x33") * 4096
