"""Two processes: transfers between a parent and a child started with
multiprocessing's "spawn" (never fork a process that runs ferry's
threads), addresses and key blobs through a Pipe or a bootstrap:// hub;
and a peer that dies, killed."""
import multiprocessing
import os
import signal

import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP

MP = multiprocessing.get_context("spawn")


class Child:
    """A child process running target(conn, *args) from ferrytest, with
    the parent's end of a Pipe; killed if the test leaves it running."""

    def __init__(self, target, *args):
        self.conn, child_conn = MP.Pipe()
        self.proc = MP.Process(target=target, args=(child_conn,) + args,
                               daemon=True)
        self.proc.start()
        child_conn.close()

    def recv(self):
        try:
            if self.conn.poll(LONG):
                return self.conn.recv()
        except EOFError:
            self.proc.join(LONG)
        raise AssertionError("the child sent nothing within %s s (exit "
                             "code %s; its traceback is above)"
                             % (LONG, self.proc.exitcode))

    def send(self, obj):
        self.conn.send(obj)

    def join(self):
        self.proc.join(LONG)
        assert self.proc.exitcode == 0, "child exit code %s" % \
            self.proc.exitcode

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(LONG)
        assert self.proc.exitcode == -signal.SIGKILL

    def close(self):
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(LONG)
        self.conn.close()


@pytest.fixture
def child():
    made = []

    def start(target, *args):
        made.append(Child(target, *args))
        return made[-1]
    yield start
    for c in made:
        c.close()


@pytest.mark.parametrize("kind,provider", [
    ("bytearray", "tcp"), ("bytearray", "shm"), ("numpy", "tcp"),
    ("torch", "tcp"), ("bytearray", "default")])
def test_write_and_read_between_processes(child, kind, provider):
    if kind == "torch":
        pytest.importorskip("torch")
    nbytes = 256 << 10
    cfg = ferrytest.PROVIDERS.get(provider, {})
    c = child(ferrytest.child_target, cfg, kind, nbytes)
    address, blob, size = c.recv()
    assert size == nbytes
    with ferry.Context(**cfg) as ctx:
        peer = ctx.add_peer(address)
        if provider == "default":
            # Two processes of one host, no provider named: whatever the
            # context chose for other hosts, this peer gets shared memory.
            assert ctx.info()["local_provider"] == "shm", ctx.info()
            assert "peers on this host use shm" in ctx.info()["local_why"]
            info = peer.info()
            assert info["provider"] == "shm" and info["shm"], info
            assert "on this host" in info["why"]
        rmem = peer.import_region(blob)
        assert rmem.nbytes == nbytes
        # Read the child's bytes (0xC1) into the second half of ours.
        mine = ferrytest.make_buffer(kind, nbytes, 0xA5)
        lmem = ctx.register(mine)
        half = nbytes // 2
        peer.read(lmem, rmem, offset=half, remote_offset=half,
                  length=half).wait(timeout=LONG)
        got = ferrytest.buffer_bytes(mine)
        assert got[:half] == b"\xa5" * half
        assert got[half:] == b"\xc1" * half
        # Write our first half (0xA5) over the child's first half.
        peer.write(lmem, rmem, length=half, notify=(1, 1)).wait(timeout=LONG)
        theirs = c.recv()
        assert theirs == b"\xa5" * half + b"\xc1" * half
        c.send("bye")
        c.join()


def test_bootstrap_between_processes(child):
    c = child(ferrytest.child_bootstrap, "process-token")
    url = c.recv()
    with ferry.Context(progress_thread=True, oob_token="process-token",
                       **TCP) as ctx:
        meta = ctx.metadata("parent", url)
        kv = meta.lookup("child", "kv", timeout=LONG)
        assert kv.nbytes == 4096
        client = bytearray(b"\xa0") * 4096
        meta.publish("client", ctx.register(client))
        # The child reads client, then writes 2048 bytes of 0xB1 into it.
        ctx.counter_wait(5, 1, timeout=LONG)
        assert client == b"\xb1" * 2048 + b"\xa0" * 2048
        kv.peer.write(ctx.register(b"\xa1" * 4096, access=0), kv,
                      notify=(6, 1)).wait(timeout=LONG)
        got, kv_bytes = c.recv()
        assert got == b"\xa0" * 4096
        assert kv_bytes == b"\xa1" * 4096
        c.send("bye")
        c.join()


def test_killed_target_is_dead():
    """The child target is killed: the next write ends with PeerDeadError
    within liveness_ms, and the peer says why."""
    c = Child(ferrytest.child_sleeper, TCP, False)
    try:
        address, blob = c.recv()
        with ferry.Context(liveness_ms=500, **TCP) as ctx:
            peer = ctx.add_peer(address)
            rmem = peer.import_region(blob)
            lmem = ctx.register(bytearray(b"\x01") * 4096)
            peer.write(lmem, rmem).wait(timeout=LONG)
            assert peer.state()[0] == "up"
            c.kill()
            with pytest.raises(ferry.PeerDeadError) as e:
                for _ in range(100):  # one may still complete into the void
                    peer.write(lmem, rmem, timeout=LONG).wait(timeout=LONG)
            assert (e.value.name, e.value.code) == ("EPEERDEAD", -1006)
            state, why = peer.state()
            assert state in ("dead", "unreachable")
            assert why in str(e.value)
            # Final: later requests are refused too.
            with pytest.raises(ferry.PeerDeadError):
                peer.write(lmem, rmem).wait(timeout=LONG)
            assert ctx.stats()["peers_declared"] == 1
    finally:
        c.close()


def test_counter_wait_on_a_killed_initiator():
    """A target waits for a counter a child was to bring up; the child is
    killed: Peer.counter_wait ends with PeerDeadError instead of waiting
    out its timeout, and a watched peer's death is a peer_down event."""
    c = Child(ferrytest.child_sleeper, TCP, True)
    try:
        with ferry.Context(progress_thread=True, liveness_ms=500,
                           **TCP) as ctx:
            address, _ = c.recv()
            c.send(ctx.address())
            peer = ctx.add_peer(address)
            assert c.recv() == "notified"
            peer.counter_wait(3, 1, timeout=LONG)
            c.kill()
            with pytest.raises(ferry.PeerDeadError) as e:
                peer.counter_wait(3, 2, timeout=LONG)
            assert e.value.name == "EPEERDEAD"
            assert peer.state()[0] in ("dead", "unreachable")
            events = [n for n in ctx.notify_poll() if n.kind == "peer_down"]
            assert [n.peer for n in events] == [peer]
    finally:
        c.close()


def test_watch_notices_a_killed_peer():
    """Peer.watch: the death of a peer nothing waits on is noticed and
    delivered as a peer_down notification."""
    c = Child(ferrytest.child_sleeper, TCP, False)
    try:
        address, blob = c.recv()
        with ferry.Context(progress_thread=True, liveness_ms=500,
                           **TCP) as ctx:
            peer = ctx.add_peer(address)
            peer.notify(1, 1).wait(timeout=LONG)
            peer.watch()
            c.kill()
            events = []

            def down():
                events.extend(n for n in ctx.notify_poll()
                              if n.kind == "peer_down")
                return events
            ferrytest.wait_until(down, what="a peer_down notification")
            assert events[0].peer is peer
            assert (events[0].id, events[0].value) == (0, 0)
            assert peer.state()[0] == "dead"
    finally:
        c.close()
