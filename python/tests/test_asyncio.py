"""`await request`: tested from the event loop, no thread per request."""
import asyncio
import os
import threading

import numpy as np
import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP


def os_threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("progress_thread", [True, False],
                         ids=["progress-thread", "driven-by-await"])
def test_gather_many_requests(progress_thread):
    with ferry.Context(progress_thread=True, **TCP) as tgt, \
            ferry.Context(progress_thread=progress_thread, **TCP) as ini:
        n, size = 16, 64 << 10
        dst = np.zeros((n, size), dtype=np.uint8)
        mem = tgt.register(dst)
        peer = ini.add_peer(tgt.address())
        rmem = peer.import_region(mem.export())
        src = np.arange(n, dtype=np.uint8)[:, None].repeat(size, axis=1)
        lmem = ini.register(src)
        # One transfer first: connections and their threads exist before
        # the threads are counted.
        peer.write(lmem, rmem, length=1).wait(timeout=LONG)
        py_threads, threads = threading.active_count(), os_threads()
        seen = []

        async def watch(stop):
            while not stop.is_set():
                seen.append((threading.active_count(), os_threads()))
                await asyncio.sleep(0.001)

        async def main():
            stop = asyncio.Event()
            watcher = asyncio.create_task(watch(stop))
            reqs = [peer.write(lmem, rmem, offset=i * size,
                               remote_offset=i * size, length=size,
                               notify=(1, 1)) for i in range(n)]
            results = await asyncio.wait_for(asyncio.gather(*reqs), LONG)
            stop.set()
            await watcher
            return reqs, results

        reqs, results = asyncio.run(main())
        assert results == [None] * n
        assert all(r.done for r in reqs)
        tgt.counter_wait(1, n, timeout=LONG)
        assert np.array_equal(dst, src)
        assert seen, "the watcher never ran while the requests were awaited"
        assert {s[0] for s in seen} == {py_threads}
        assert max(s[1] for s in seen) == threads
        assert threading.active_count() == py_threads


def test_await_raises_the_requests_error():
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        async def main():
            with pytest.raises(ferry.TimeoutError) as e:
                await peer.write(mem, rmem, timeout=0.2)
            return e.value
        e = asyncio.run(main())
        assert e.name == "ETIMEDOUT" and "deadline passed" in str(e)


def test_await_a_request_that_ended(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    req = tcp_pair.peer.write(tcp_pair.initiator.register(bytearray(64)),
                              rmem)
    req.wait(timeout=LONG)

    async def main():
        await req
        await req  # the same outcome every time
        return True
    assert asyncio.run(main())


def test_awaiting_leaves_the_loop_free(tcp_pair):
    """Other coroutines run while a request is awaited; cancelling the
    awaiting task leaves the request going."""
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        req = peer.write(mem, rmem, timeout=LONG)
        ticks = []

        async def ticker():
            for i in range(20):
                ticks.append(i)
                await asyncio.sleep(0.005)

        async def main():
            t = asyncio.create_task(ticker())
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(req, 0.3)
            await t
        asyncio.run(main())
        assert ticks == list(range(20))
        assert req.done is False
        req.cancel()
        with pytest.raises(ferry.CanceledError):
            req.wait(timeout=LONG)


def test_await_notify_and_post(tcp_pair):
    dst = np.zeros(4096, dtype=np.uint8)
    mem, rmem = tcp_pair.expose(dst)
    src = np.full(4096, 5, dtype=np.uint8)
    lmem = tcp_pair.initiator.register(src)
    prep = tcp_pair.peer.prepare(ferry.WRITE, ferry.Blocks(lmem, 1024, 4),
                                 ferry.Blocks(rmem, 1024, 4))

    async def main():
        await asyncio.gather(
            prep.post(np.array([0, 1], np.uint32),
                      np.array([2, 3], np.uint32)),
            tcp_pair.peer.notify(3, 1))
    asyncio.run(main())
    tcp_pair.target.counter_wait(3, 1, timeout=LONG)
    assert dst[2048:].tolist() == [5] * 2048
    assert dst[:2048].tolist() == [0] * 2048


def test_await_wakes_on_the_descriptor_not_by_polling():
    """With a progress thread, `await` sleeps on the context's event
    descriptor: a transfer that takes a while costs a few wake-ups, not
    a test every millisecond."""
    from ferry import _aio
    with ferry.Context(progress_thread=True, **TCP) as tgt, \
            ferry.Context(progress_thread=True, **TCP) as ini:
        size = 64 << 20
        dst = np.zeros(size, dtype=np.uint8)
        mem = tgt.register(dst)
        peer = ini.add_peer(tgt.address())
        rmem = peer.import_region(mem.export())
        src = np.full(size, 0x5A, dtype=np.uint8)
        lmem = ini.register(src)
        peer.write(lmem, rmem, length=1).wait(timeout=LONG)

        async def main():
            before = dict(_aio.stats)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for _ in range(4):
                await peer.write(lmem, rmem, notify=(2, 1))
            took = loop.time() - t0
            return ({k: _aio.stats[k] - before[k] for k in before}, took)

        delta, took = asyncio.run(main())
        tgt.counter_wait(2, 4, timeout=LONG)
        assert np.array_equal(dst, src)
        # Sleep-polling tested every 1 ms at most: about `took` / 1 ms
        # tests.  On the descriptor: a wake-up or two per request.
        assert delta["wakeups"] <= 12, (delta, took)
        assert delta["tests"] <= 24, (delta, took)
        assert delta["wakeups"] >= 1, delta


def test_await_without_progress_thread_still_works():
    with ferry.Context(progress_thread=True, **TCP) as tgt, \
            ferry.Context(**TCP) as ini:
        buf = bytearray(4096)
        mem = tgt.register(buf)
        peer = ini.add_peer(tgt.address())
        rmem = peer.import_region(mem.export())
        lmem = ini.register(b"\x42" * 4096, access=0)

        async def main():
            await peer.write(lmem, rmem)

        asyncio.run(main())
        assert buf == b"\x42" * 4096


@pytest.mark.parametrize("progress_thread", [True, False],
                         ids=["progress-thread", "driven-by-await"])
def test_await_notifications(progress_thread):
    """`await ctx.notifications()`: the notifications a peer sends while
    the coroutine waits, taken in order; with a progress thread it sleeps
    on the descriptor (a few looks, not one per millisecond)."""
    from ferry import _aio
    with ferry.Context(progress_thread=progress_thread, **TCP) as tgt, \
            ferry.Context(progress_thread=True, **TCP) as ini:
        peer = ini.add_peer(tgt.address())
        # Connected first, and that notification taken off the queue (a
        # target without a thread is driven here).
        sent = [peer.notify(30, 1)]  # held: a freed request is cancelled
        ferrytest.wait_until(
            lambda: tgt.progress() >= 0 and tgt.counter_get(30) == 1,
            what="the first notification")
        assert [n.id for n in tgt.notify_poll()] == [30]

        async def main():
            before = dict(_aio.stats)
            loop = asyncio.get_running_loop()
            # Sent after the coroutines start waiting.
            loop.call_later(0.2, lambda: sent.append(peer.notify(31, 7)))
            loop.call_later(0.3, lambda: sent.append(peer.notify(31, 8)))
            first = await asyncio.wait_for(tgt.notifications(max=1), LONG)
            second = await asyncio.wait_for(tgt.notifications(), LONG)
            # None comes: the wait is the caller's to bound.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(tgt.notifications(), 0.1)
            return first + second, \
                {k: _aio.stats[k] - before[k] for k in before}

        got, delta = asyncio.run(main())
        assert [(n.kind, n.id, n.value) for n in got] == [
            ("data", 31, 7), ("data", 31, 8)]
        if progress_thread:
            # 0.4 s of waiting: polling would have looked hundreds of times.
            assert delta["tests"] < 40, delta
            assert delta["wakeups"] >= 1, delta
