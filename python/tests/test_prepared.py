"""ferry.Blocks and Prepared: descriptor lists validated once, posted by
index arrays."""
import numpy as np
import pytest

import ferry
import ferrytest
from ferrytest import LONG

torch = pytest.importorskip("torch")

B, N = 256, 16


def blocks_of(buf):
    """The N blocks of a numpy or torch buffer, as bytes."""
    raw = buf.numpy() if isinstance(buf, torch.Tensor) else buf
    raw = raw.view(np.uint8).reshape(N, B)
    return [raw[i].tobytes() for i in range(N)]


def kv(kind, seed):
    """N blocks of B bytes; block i full of (seed + i), or zeros for seed
    None."""
    data = np.zeros((N, B), dtype=np.uint8)
    if seed is not None:
        data += (np.arange(N, dtype=np.uint8) + seed)[:, None]
    if kind == "numpy":
        return data.reshape(-1)
    return torch.from_numpy(data.reshape(-1).view(np.int32).copy())


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_write_chosen_blocks(pair, kind):
    src, dst = kv(kind, 100), kv(kind, None)
    lmem = pair.initiator.register(src)
    mem, rmem = pair.expose(dst)
    prep = pair.peer.prepare(ferry.WRITE, ferry.Blocks(lmem, B, N),
                             ferry.Blocks(rmem, block_size=B, count=N))
    assert (prep.local_count, prep.remote_count) == (N, N)
    local = np.array([0, 3, 5, 15], dtype=np.uint32)
    remote = np.array([7, 1, 2, 15], dtype=np.uint32)
    prep.post(local, remote, notify=(1, 4)).wait(timeout=LONG)
    pair.target.counter_wait(1, 4, timeout=LONG)
    got, want = blocks_of(dst), blocks_of(src)
    for i in range(N):
        if i in remote:
            assert got[i] == want[int(local[list(remote).index(i)])], i
        else:
            assert got[i] == bytes(B), i  # untouched
    # A list of ints does the same.
    prep.post([9], [0], notify=(1, 1)).wait(timeout=LONG)
    pair.target.counter_wait(1, 5, timeout=LONG)
    assert blocks_of(dst)[0] == want[9]


def test_read_direction(pair):
    src, dst = kv("numpy", 40), kv("numpy", None)
    mem, rmem = pair.expose(src, access=ferry.REMOTE_READ)
    lmem = pair.initiator.register(dst)
    prep = pair.peer.prepare(ferry.READ, ferry.Blocks(lmem, B, N),
                             ferry.Blocks(rmem, B, N))
    prep.post(np.arange(4, dtype=np.uint32),
              np.array([12, 13, 14, 15], dtype=np.uint32)).wait(timeout=LONG)
    got, want = blocks_of(dst), blocks_of(src)
    assert got[:4] == want[12:16]
    assert got[4:] == [bytes(B)] * (N - 4)


def test_two_prepared_on_the_same_regions(pair):
    """A second descriptor list over the same regions must not break the
    first: both post, before and after, interleaved and at once."""
    src, dst = kv("numpy", 1), kv("numpy", None)
    lmem = pair.initiator.register(src)
    mem, rmem = pair.expose(dst)
    first = pair.peer.prepare(ferry.WRITE, ferry.Blocks(lmem, B, N),
                              ferry.Blocks(rmem, B, N))
    first.post([0], [0], notify=(2, 1)).wait(timeout=LONG)
    # Half blocks, the second half of each block.
    second = pair.peer.prepare(
        ferry.WRITE, ferry.Blocks(lmem, B // 2, N, offset=B // 2, stride=B),
        ferry.Blocks(rmem, B // 2, N, offset=B // 2, stride=B))
    third = pair.peer.prepare(ferry.READ, ferry.Blocks(lmem, B, N),
                              ferry.Blocks(rmem, B, N))
    r1 = first.post([1, 2], [1, 2], notify=(2, 2))
    r2 = second.post([3], [3], notify=(2, 1))
    r1.wait(timeout=LONG)
    r2.wait(timeout=LONG)
    pair.target.counter_wait(2, 4, timeout=LONG)
    got, want = blocks_of(dst), blocks_of(src)
    assert got[0:3] == want[0:3]
    assert got[3] == bytes(B // 2) + want[3][B // 2:]
    second.close()
    first.post([4], [4], notify=(2, 1)).wait(timeout=LONG)
    pair.target.counter_wait(2, 5, timeout=LONG)
    assert blocks_of(dst)[4] == want[4]
    # The READ one, over the same regions, into the local blocks.
    src[:] = 0
    third.post([0, 1], [4, 0]).wait(timeout=LONG)
    assert blocks_of(src)[:2] == [want[4], want[0]]


def test_several_segments(tcp_pair):
    a, b = kv("numpy", 10), kv("numpy", 50)
    la, lb = tcp_pair.initiator.register(a), tcp_pair.initiator.register(b)
    d1, d2 = kv("numpy", None), kv("numpy", None)
    m1, r1 = tcp_pair.expose(d1)
    m2, r2 = tcp_pair.expose(d2)
    # Local: a's 16 blocks are 0..15, b's 4 blocks from its 8th are 16..19.
    prep = tcp_pair.peer.prepare(
        ferry.WRITE,
        [ferry.Blocks(la, B, N), ferry.Blocks(lb, B, 4, offset=8 * B)],
        [ferry.Blocks(r1, B, N), ferry.Blocks(r2, B, N)])
    assert (prep.local_count, prep.remote_count) == (N + 4, 2 * N)
    prep.post(np.array([16, 19, 0], dtype=np.uint32),
              np.array([N + 5, 0, N], dtype=np.uint32),
              notify=(3, 3)).wait(timeout=LONG)
    tcp_pair.target.counter_wait(3, 3, timeout=LONG)
    assert blocks_of(d2)[5] == blocks_of(b)[8]
    assert blocks_of(d1)[0] == blocks_of(b)[11]
    assert blocks_of(d2)[0] == blocks_of(a)[0]
    assert blocks_of(d1)[1:] == [bytes(B)] * (N - 1)


def test_bad_indices(tcp_pair):
    lmem = tcp_pair.initiator.register(kv("numpy", 1))
    mem, rmem = tcp_pair.expose(kv("numpy", None))
    prep = tcp_pair.peer.prepare(ferry.WRITE, ferry.Blocks(lmem, B, N),
                                 ferry.Blocks(rmem, B, N))
    ok = np.array([1, 2], dtype=np.uint32)
    cases = [
        (np.array([1, 2], dtype=np.int64), ok, "item format 'l' (8 bytes)"),
        (ok, np.array([1, 2], dtype=np.int32),
         "remote_idx has item format 'i'"),
        (np.array([[1, 2]], dtype=np.uint32), ok, "2 dimension(s)"),
        (np.array([1, 2], dtype=np.float32), ok, "format 'f'"),
        (np.arange(4, dtype=np.uint32)[::2], ok, "not contiguous"),
        # uint32, but big-endian: numpy's fast path must not take it.
        (np.array([1, 2], dtype=">u4"), ok, "item format '>I'"),
        (ok, np.array([1, 2, 3], dtype=np.uint32),
         "local_idx has 2 indices and remote_idx 3"),
        ([1, -1], ok, "local_idx[1] is not an index"),
        ([1, 2 ** 32], ok, "local_idx[1] is not an index"),
        ([1, "2"], ok, "local_idx[1] is not an index"),
        (5, ok, "local_idx is a int"),
        ([], [], "n must be at least 1"),
    ]
    for local, remote, words in cases:
        with pytest.raises(ferry.InvalidArgumentError) as e:
            prep.post(local, remote)
        assert words in str(e.value), (words, str(e.value))
    # A slice of a larger array is read from its own first element, not
    # the base array's (numpy's fast path): base[N] is out of range.
    base = np.arange(N + 2, dtype=np.uint32)
    with pytest.raises(ferry.RangeError) as e:
        prep.post(base[N:], ok)
    assert "local_idx[0] = %d is out of range" % N in str(e.value)
    with pytest.raises(ferry.RangeError) as e:
        prep.post([N], [0])
    assert ("local_idx[0] = 16 is out of range for list 'local' "
            "(valid: 0..15)") in str(e.value)
    with pytest.raises(ferry.InvalidArgumentError, match="notify must be"):
        prep.post(ok, ok, notify=5)
    with pytest.raises(ferry.InvalidArgumentError, match="timeout"):
        prep.post(ok, ok, timeout=-1)


def test_bad_blocks_and_prepare(tcp_pair):
    lmem = tcp_pair.initiator.register(kv("numpy", 1))
    mem, rmem = tcp_pair.expose(kv("numpy", None), access=ferry.REMOTE_WRITE)
    for kwargs in ({"block_size": 0, "count": 1}, {"block_size": 8,
                                                   "count": 0},
                   {"block_size": 8, "count": 2, "stride": 4},
                   {"block_size": 8, "count": 2, "offset": -1}):
        with pytest.raises(ferry.InvalidArgumentError, match="Blocks:"):
            ferry.Blocks(lmem, **kwargs)
    with pytest.raises(ferry.InvalidArgumentError, match="Memory or a"):
        ferry.Blocks(bytearray(8), 8, 1)
    blk = ferry.Blocks(lmem, 8, 2, offset=16, stride=32)
    assert (blk.region, blk.block_size, blk.count, blk.offset, blk.stride) \
        == (lmem, 8, 2, 16, 32)
    assert ferry.Blocks(lmem, 8, 2).stride == 8
    assert "ferry.Blocks(" in repr(blk) and "stride=32" in repr(blk)
    peer = tcp_pair.peer
    local, remote = ferry.Blocks(lmem, B, N), ferry.Blocks(rmem, B, N)
    with pytest.raises(ferry.RangeError, match="run past the end"):
        peer.prepare(ferry.WRITE, ferry.Blocks(lmem, B, N + 1), remote)
    with pytest.raises(ferry.InvalidArgumentError, match="op 3"):
        peer.prepare(3, local, remote)
    with pytest.raises(ferry.InvalidArgumentError,
                       match="local blocks must be a ferry.Memory"):
        peer.prepare(ferry.WRITE, remote, remote)
    with pytest.raises(ferry.InvalidArgumentError,
                       match="remote blocks must be a ferry.RemoteMemory"):
        peer.prepare(ferry.WRITE, local, local)
    with pytest.raises(ferry.InvalidArgumentError,
                       match="must be ferry.Blocks"):
        peer.prepare(ferry.WRITE, [local, 5], remote)
    with pytest.raises(TypeError, match="give ferry.Blocks or a list"):
        peer.prepare(ferry.WRITE, 5, remote)
    with pytest.raises(ferry.InvalidArgumentError,
                       match="without remote read access"):
        peer.prepare(ferry.READ, local, remote)
    with pytest.raises(ferry.InvalidArgumentError):
        peer.prepare(ferry.WRITE, [], remote)  # an empty list


def test_blocks_stride_none_or_in_range(tcp_pair):
    """stride=None is the default (block_size); a negative stride is not
    taken for it but refused, naming the value and the valid range."""
    lmem = tcp_pair.initiator.register(kv("numpy", 1))
    assert ferry.Blocks(lmem, 8, 2, stride=None).stride == 8
    for stride in (-1, -8, -(2 ** 62)):
        with pytest.raises(ValueError) as e:
            ferry.Blocks(lmem, 8, 2, stride=stride)
        assert isinstance(e.value, ferry.InvalidArgumentError)
        assert (f"Blocks: stride {stride} is negative; give None (the "
                "default: block_size, 8) or a stride of block_size (8) bytes "
                "or more") in str(e.value)
    with pytest.raises(TypeError, match="stride must be an integer or None"):
        ferry.Blocks(lmem, 8, 2, stride="8")


def test_prepared_holds_its_regions_and_close(tcp_pair):
    lmem = tcp_pair.initiator.register(kv("numpy", 1))
    dst = kv("numpy", None)
    mem, rmem = tcp_pair.expose(dst)
    prep = tcp_pair.peer.prepare(ferry.WRITE, ferry.Blocks(lmem, B, N),
                                 ferry.Blocks(rmem, B, N))
    # Its lists keep the registrations: they cannot go under it.
    with pytest.raises(ferry.BusyError):
        lmem.close()
    with pytest.raises(ferry.BusyError):
        rmem.close()
    prep.close()
    prep.close()
    for call in (lambda: prep.post([0], [0]), lambda: prep.local_count,
                 lambda: prep.remote_count):
        with pytest.raises(ferry.HandleError, match="Prepared was closed"):
            call()
    lmem.close()
    rmem.close()


def test_prepared_close_while_a_request_runs():
    """A request that cannot end (its peer is a closed context, liveness
    off) keeps its Prepared busy until it is cancelled."""
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        prep = peer.prepare(ferry.WRITE, ferry.Blocks(mem, 64, 4),
                            ferry.Blocks(rmem, 64, 4))
        req = prep.post([0], [0], timeout=LONG)
        with pytest.raises(ferry.BusyError) as e:
            prep.close()
        assert "still in flight" in str(e.value)
        req.cancel()
        with pytest.raises(ferry.CanceledError):
            req.wait(timeout=LONG)
        ferry_close_eventually(prep)


def ferry_close_eventually(prep):
    """A cancelled request's operations may still be with the provider for
    a moment: close() refuses until they come back."""
    def closed():
        try:
            prep.close()
            return True
        except ferry.BusyError:
            return False
    ferrytest.wait_until(closed, what="Prepared.close")
