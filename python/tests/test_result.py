"""Request.result() and ferry.wait_any (ferry_req_result,
ferry_req_wait_any)."""
import errno
import time

import pytest

import ferry
import ferrytest
from ferrytest import LONG


def test_result_of_a_write(pair):
    dst = bytearray(1 << 20)
    mem, rmem = pair.expose(dst)
    src = bytearray(b"\x5a" * (1 << 20))
    lmem = pair.initiator.register(src)
    before = time.monotonic_ns()
    req = pair.peer.write(lmem, rmem, length=4096 * 3)
    req.wait(timeout=LONG)
    r = req.result()
    assert r["status"] == 0
    assert r["bytes"] == r["bytes_done"] == 4096 * 3
    # ferry reads a request's times through the CPU's time stamp counter:
    # within a few microseconds of the monotonic clock (lib/base/clock.h).
    slack = 20_000
    assert before - slack <= r["posted_ns"] <= r["ended_ns"]
    assert r["ended_ns"] <= time.monotonic_ns() + slack
    assert r["failed_iov"] is None
    assert r["error"] == ""
    req.close()
    with pytest.raises(ferry.Error):
        req.result()  # closed: no request behind it any more


def test_result_while_running():
    ctx, peer, rmem, lmem = ferrytest.dead_region()
    try:
        req = peer.write(lmem, rmem)
        r = req.result()
        assert r["status"] == -errno.EINPROGRESS
        assert r["ended_ns"] is None
        assert r["posted_ns"] > 0
        req.cancel()
        with pytest.raises(ferry.CanceledError):
            req.wait(timeout=LONG)
        assert req.result()["status"] == -errno.ECANCELED
        assert req.result()["ended_ns"] is not None
    finally:
        ctx.close()


def test_wait_any_each_once(pair):
    n, size = 4, 64 << 10
    dst = bytearray(n * size)
    mem, rmem = pair.expose(dst)
    lmem = pair.initiator.register(bytearray(b"\x11" * (n * size)))
    reqs = [pair.peer.write(lmem, rmem, offset=i * size,
                            remote_offset=i * size, length=size)
            for i in range(n)]
    pending, seen = list(reqs), []
    for _ in range(n):
        i = ferry.wait_any(pending, timeout=LONG)
        seen.append(i)
        assert pending[i].test() is True
        pending[i] = None
    assert sorted(seen) == list(range(n))
    with pytest.raises(ferry.InvalidArgumentError, match="no request among the 4"):
        ferry.wait_any(pending)
    for r in reqs:
        r.close()


def test_wait_any_ended_first_and_timeout():
    ctx, peer, rmem, lmem = ferrytest.dead_region()
    try:
        stuck = peer.write(lmem, rmem)
        with pytest.raises(TimeoutError, match="none has ended"):
            ferry.wait_any([None, stuck], timeout=0.05)
        stuck.cancel()
        # Ended (and its result kept): answered at once, even closed.
        with pytest.raises(ferry.CanceledError):
            stuck.wait()
        stuck.close()
        assert ferry.wait_any([None, stuck], timeout=0) == 1
    finally:
        ctx.close()


def test_wait_any_refusals(tcp_pair):
    with pytest.raises(TypeError, match="expected Request or None"):
        ferry.wait_any([1])
    with pytest.raises(TypeError, match="sequence"):
        ferry.wait_any(3)
    with pytest.raises(ferry.InvalidArgumentError, match="no request"):
        ferry.wait_any([])
