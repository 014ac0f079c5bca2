"""Waiting releases the GIL: while the main thread waits in ferry, a
Python thread keeps running.  Each wait below cannot end early (nothing
will arrive), so it lasts its whole timeout; a thread that counts
meanwhile must have counted a great deal.  Were the GIL held, it could
not count at all during the wait."""
import threading

import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP

WAIT = 0.5


class Counter(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.n = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.n += 1


def count_during(wait):
    """How far a counting thread got while wait() ran in this thread."""
    c = Counter()
    c.start()
    ferrytest.wait_until(lambda: c.n > 0, what="the counter to start")
    try:
        before = c.n
        wait()
        after = c.n  # read before this thread lets go of the GIL again
    finally:
        c.stop.set()
        c.join()
    return after - before


def expect_timeout(call):
    def wait():
        with pytest.raises(ferry.TimeoutError):
            call()
    return wait


def test_request_wait_releases_the_gil():
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        req = peer.write(mem, rmem, timeout=LONG)
        assert count_during(expect_timeout(
            lambda: req.wait(timeout=WAIT))) > 1000
        req.cancel()


def test_counter_wait_releases_the_gil(tcp_pair):
    assert count_during(expect_timeout(
        lambda: tcp_pair.target.counter_wait(1, 1, timeout=WAIT))) > 1000


def test_peer_counter_wait_releases_the_gil(tcp_pair):
    back = tcp_pair.target.add_peer(tcp_pair.initiator.address())
    assert count_during(expect_timeout(
        lambda: back.counter_wait(1, 1, timeout=WAIT))) > 1000


def test_meta_lookup_releases_the_gil():
    """A member of a bootstrap hub asks the hub over the network until
    the region comes or the wait runs out."""
    with ferry.Context(**TCP) as a, ferry.Context(**TCP) as b:
        hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
        member = b.metadata("member", hub.url)
        assert count_during(expect_timeout(
            lambda: member.lookup("hub", "never", timeout=WAIT))) > 1000


def test_meta_peer_releases_the_gil():
    url = "bootstrap://127.0.0.1:%d" % ferrytest.free_port()
    with ferry.Context(**TCP) as a:
        meta = a.metadata("alone", url)

        def peer():
            with pytest.raises(TimeoutError):
                meta.peer("nobody", timeout=WAIT)
        assert count_during(peer) > 1000


def test_threads_wait_on_one_context_at_once(tcp_pair):
    """Several threads each wait on a counter of one context; the main
    thread's notifications release them all."""
    results = {}

    def waiter(i):
        try:
            tcp_pair.target.counter_wait(100 + i, 1, timeout=LONG)
            results[i] = "ok"
        except Exception as e:  # reported below
            results[i] = repr(e)

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for i in range(4):
        tcp_pair.peer.notify(100 + i, 1).wait(timeout=LONG)
    for t in threads:
        t.join(timeout=LONG)
    assert results == {i: "ok" for i in range(4)}


def test_close_refuses_while_another_thread_waits(tcp_pair):
    started = threading.Event()
    out = {}

    def wait():
        started.set()
        try:
            tcp_pair.target.counter_wait(7, 1, timeout=LONG)
            out["r"] = "ok"
        except Exception as e:
            out["r"] = e

    t = threading.Thread(target=wait)
    t.start()
    started.wait()
    busy = ferrytest.busy_close(tcp_pair.target.close, "BusyError")
    assert "wait on this context in other threads" in str(busy)
    assert busy.name == "EBUSY"
    assert not tcp_pair.target.closed
    tcp_pair.peer.notify(7, 1).wait(timeout=LONG)
    t.join(timeout=LONG)
    assert out["r"] == "ok"
    tcp_pair.target.close()


def test_request_close_refuses_while_another_thread_waits():
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        req = peer.write(mem, rmem, timeout=LONG)
        t = threading.Thread(target=lambda: pytest.raises(
            ferry.Error, req.wait, timeout=2 * WAIT))
        t.start()
        ferrytest.busy_close(req.close, "Request.close to refuse")
        t.join()
        req.cancel()
        req.close()


def refuses_while(obj, call, release):
    """obj.close() raises BusyError while call() waits in another thread;
    release() ends the wait; then close() works.  Returns call's result
    or exception."""
    out = {}

    def run():
        try:
            out["r"] = call()
        except Exception as e:
            out["r"] = e
    t = threading.Thread(target=run)
    t.start()

    busy = ferrytest.busy_close(obj.close, "close to refuse")
    assert "in other threads" in str(busy)
    release()
    t.join(timeout=LONG)
    assert not t.is_alive()
    obj.close()
    return out["r"]


def test_meta_close_refuses_while_a_member_lookup_waits():
    """Closing frees the handle: not while another thread's call uses
    it (here a member's lookup, waiting on its connection to the hub)."""
    with ferry.Context(**TCP) as a, ferry.Context(**TCP) as b:
        hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
        member = b.metadata("member", hub.url)
        mem = a.register(bytearray(64))
        r = refuses_while(member,
                          lambda: member.lookup("hub", "x", timeout=LONG),
                          lambda: hub.publish("x", mem))
        assert isinstance(r, ferry.RemoteMemory) and r.nbytes == 64


def test_meta_close_refuses_while_a_call_waits():
    url = "bootstrap://127.0.0.1:%d" % ferrytest.free_port()
    with ferry.Context(**TCP) as a, ferry.Context(**TCP) as b:
        meta = a.metadata("alone", url)
        joined = []
        r = refuses_while(meta, lambda: meta.peer("late", timeout=LONG),
                          lambda: joined.append(b.metadata("late", url)))
        assert isinstance(r, ferry.Peer)
        joined[0].close()
