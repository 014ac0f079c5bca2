"""ferry.Meta: the metadata service, on the embedded bootstrap:// and,
when etcd is installed, on a real etcd started on loopback ports."""
import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP


def ctx(**cfg):
    return ferry.Context(progress_thread=True, **TCP, **cfg)


# ---- bootstrap:// ----------------------------------------------------------

def test_bootstrap_metadata():
    url = "bootstrap://127.0.0.1:%d" % ferrytest.free_port()
    with ctx() as a, ctx() as b, ctx(metadata=url) as c:
        ma = a.metadata("alpha", url)  # the first one is the hub
        mb = b.metadata("beta", url)
        assert isinstance(ma, ferry.Meta)
        kv = bytearray(4096)
        ma.publish("kv", a.register(kv))
        rkv = mb.lookup("alpha", "kv", timeout=LONG)
        assert rkv.nbytes == 4096
        palpha = mb.peer("alpha", timeout=LONG)
        assert rkv.peer is palpha
        palpha.write(b.register(b"\x42" * 4096, access=0), rkv,
                     notify=(1, 1)).wait(timeout=LONG)
        a.counter_wait(1, 1, timeout=LONG)
        assert kv == b"\x42" * 4096
        # And back: a finds beta's region.
        back = bytearray(16)
        mb.publish("back", b.register(back))
        rback = ma.lookup("beta", "back", timeout=LONG)
        ma.peer("beta").write(a.register(b"\x24" * 16, access=0), rback,
                              notify=(2, 1)).wait(timeout=LONG)
        b.counter_wait(2, 1, timeout=LONG)
        assert back == b"\x24" * 16
        # Withdrawn, it is gone.
        mb.withdraw("back")
        with pytest.raises(TimeoutError):
            ma.lookup("beta", "back", timeout=0)
        with pytest.raises(ferry.NotFoundError):
            mb.withdraw("back")
        # The URL from the config (metadata=...).
        mc = c.metadata("gamma")
        assert mc.peer("alpha", timeout=LONG).context is c
        # Names are unique in the service.
        with ctx() as d:
            with pytest.raises(ferry.ExistsError) as e:
                d.metadata("beta", url)
            assert "beta" in str(e.value)
        # Nobody of that name: the wait runs out (ferry's FERRY_EAGAIN).
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="nothing is published"):
            mb.peer("nobody", timeout=0.2)
        assert time.monotonic() - start >= 0.15
        # Peers handed out by the service are not Python's to remove.
        with pytest.raises(ferry.BusyError):
            palpha.close()
        # bootstrap:// has no watch.
        with pytest.raises(ferry.NotSupportedError) as e:
            ma.watch()
        assert e.value.name == "ENOTSUP"
        with pytest.raises(ferry.InvalidArgumentError, match="not watching"):
            ma.event(timeout=0)
        # A member that leaves takes its entries along, once the hub has
        # seen its connection end.
        mc.close()

        def gone():
            try:
                ma.peer("gamma", timeout=0)
                return False
            except TimeoutError:
                return True
        ferrytest.wait_until(gone, what="gamma's entries to go")


def test_metadata_refusals():
    with ctx() as a:
        with pytest.raises(ferry.InvalidArgumentError) as e:
            a.metadata("x", "nope://127.0.0.1:1")
        assert "names no service ferry knows" in str(e.value)
        with pytest.raises(ferry.InvalidArgumentError) as e:
            a.metadata("bad name", "bootstrap://127.0.0.1:%d"
                       % ferrytest.free_port())
        assert "has ' ' at 3" in str(e.value)
        with pytest.raises(TypeError):
            a.metadata(None)


def test_meta_close_and_context_manager():
    url = "bootstrap://127.0.0.1:%d" % ferrytest.free_port()
    with ctx() as a:
        mem = a.register(bytearray(8))
        with a.metadata("solo", url) as m:
            m.publish("r", mem)
        for call in (lambda: m.publish("r", mem), lambda: m.withdraw("r"),
                     lambda: m.peer("solo"), lambda: m.lookup("solo", "r"),
                     m.watch, m.event):
            with pytest.raises(ferry.HandleError,
                               match="this Meta was closed"):
                call()
        m.close()
        # Closed, its name is free again.
        a.metadata("solo", url).close()


# ---- etcd ------------------------------------------------------------------

def etcd_binary():
    d = os.environ.get("FERRY_TEST_ETCD_DIR")
    return os.path.join(d, "etcd") if d else shutil.which("etcd")


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    """An etcd of our own on two free loopback ports, data in a temporary
    directory, as test/api/etcdutil.c starts it.  Yields its client URL."""
    binary = etcd_binary()
    if binary is None or not os.access(binary, os.X_OK):
        pytest.skip("etcd is not installed (Debian: apt-get install "
                    "etcd-server), or set FERRY_TEST_ETCD_DIR")
    data = tmp_path_factory.mktemp("etcd")
    client, peer = ferrytest.free_port(), ferrytest.free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ETCD_", "ETCDCTL_"))}
    log = open(data / "etcd.log", "wb")
    proc = subprocess.Popen(
        [binary, "--name=pytest", "--data-dir=%s" % (data / "data"),
         "--listen-client-urls=http://127.0.0.1:%d" % client,
         "--advertise-client-urls=http://127.0.0.1:%d" % client,
         "--listen-peer-urls=http://127.0.0.1:%d" % peer,
         "--initial-advertise-peer-urls=http://127.0.0.1:%d" % peer,
         "--initial-cluster=pytest=http://127.0.0.1:%d" % peer,
         "--initial-cluster-token=ferry-pytest-%d-%d" % (os.getpid(), client),
         "--initial-cluster-state=new"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError("etcd exited %d: %s" % (
                    proc.returncode, (data / "etcd.log").read_text()[-2000:]))
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d/health" % client, timeout=2) as r:
                    if json.load(r).get("health") == "true":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("etcd not healthy within 60 s: %s" %
                                     (data / "etcd.log").read_text()[-2000:])
            time.sleep(0.1)
        url = "etcd://127.0.0.1:%d/pytest-%d" % (client, os.getpid())
        with ctx() as probe:
            try:
                probe.metadata("probe", url).close()
            except ferry.NotSupportedError as e:
                pytest.skip("this ferry has no etcd backend: %s" % e)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def next_event(meta, want):
    """Events until want (kind, name) comes; fails after LONG."""
    seen = []
    deadline = time.monotonic() + LONG
    while time.monotonic() < deadline:
        ev = meta.event(timeout=1.0)
        if ev is None:
            continue
        seen.append(ev)
        if ev == want:
            return seen
    raise AssertionError("no %r within %s s; saw %r" % (want, LONG, seen))


def test_etcd_watch_join_and_leave(etcd):
    with ctx() as a, ctx() as b:
        ma = a.metadata("alpha", etcd)
        ma.watch()
        ma.watch()  # again: already watching
        # The peers already there come first, as joins: alpha itself.
        next_event(ma, ("join", "alpha"))
        mb = b.metadata("beta", etcd)
        next_event(ma, ("join", "beta"))
        kv = bytearray(1024)
        mb.publish("kv", b.register(kv))
        rkv = ma.lookup("beta", "kv", timeout=LONG)
        pbeta = ma.peer("beta", timeout=LONG)
        assert rkv.peer is pbeta
        pbeta.write(a.register(b"\x99" * 1024, access=0), rkv,
                    notify=(1, 1)).wait(timeout=LONG)
        b.counter_wait(1, 1, timeout=LONG)
        assert kv == b"\x99" * 1024
        assert ma.event(timeout=0) is None  # nothing more queued
        # Names are unique while their holder lives.
        with ctx() as d:
            with pytest.raises(ferry.ExistsError):
                d.metadata("beta", etcd)
        # beta leaves (its Meta closes): a leave, and the peer ferry handed
        # out is declared dead.
        rkv.close()
        mb.close()
        next_event(ma, ("leave", "beta"))
        assert pbeta.state()[0] == "dead"
        assert "metadata entry (beta) is gone" in pbeta.state()[1]
        downs = [n for n in a.notify_poll() if n.kind == "peer_down"]
        assert [n.peer for n in downs] == [pbeta]
        with pytest.raises(ferry.PeerDeadError):
            pbeta.notify(1, 1).wait(timeout=LONG)
        # gamma's context closes with its Meta still open: its entries go
        # at once too (the Meta is closed with the context).
        with ctx() as c:
            mc = c.metadata("gamma", etcd)
            next_event(ma, ("join", "gamma"))
            pgamma = ma.peer("gamma", timeout=LONG)
        next_event(ma, ("leave", "gamma"))
        # Never heard from: unreachable rather than dead, final as well.
        assert pgamma.state()[0] == "unreachable"
        with pytest.raises(ferry.HandleError):
            mc.peer("alpha")
        del mc
        with pytest.raises(TimeoutError):
            ma.peer("gamma", timeout=0)
        # A context of the same name comes back: a new peer.
        with ctx() as g:
            mg = g.metadata("gamma", etcd)
            next_event(ma, ("join", "gamma"))
            again = ma.peer("gamma", timeout=LONG)
            assert again is not pgamma
            again.notify(5, 1).wait(timeout=LONG)
            g.counter_wait(5, 1, timeout=LONG)
            mg.close()


def test_etcd_url_from_the_config(etcd):
    with ctx(metadata=etcd) as a, ctx(metadata=etcd) as b:
        ma = a.metadata("cfg-a")
        mb = b.metadata("cfg-b")
        mb.publish("r", b.register(bytearray(32)))
        assert ma.lookup("cfg-b", "r", timeout=LONG).nbytes == 32
        ma.close()
        mb.close()
