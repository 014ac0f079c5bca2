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


def test_bootstrap_url_names_the_hubs_port():
    """A hub opened at port 0 says, in Meta.url, the port it listens on:
    the URL the others open.  Any other URL is as given."""
    with ctx() as a, ctx() as b:
        hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
        url = hub.url
        assert isinstance(url, str)
        assert url.startswith("bootstrap://127.0.0.1:")
        port = int(url.rpartition(":")[2])
        assert 0 < port < 65536
        hub.publish("kv", a.register(bytearray(64)))
        member = b.metadata("member", url)
        assert member.url == url
        assert member.lookup("hub", "kv", timeout=LONG).nbytes == 64
        member.close()
        hub.close()
        with pytest.raises(ferry.HandleError, match="this Meta was closed"):
            hub.url
        # Given a port, the hub keeps the URL as it was written.
        given = "bootstrap://127.0.0.1:%d" % ferrytest.free_port()
        with a.metadata("again", given) as m:
            assert m.url == given


def test_bootstrap_token():
    """Every context of a hub holds one token (oob_token, else
    FERRY_OOB_TOKEN): a context with another, or none, is refused with a
    sentence that says so; the token never crosses the network."""
    with ctx(oob_token="from-config") as a, \
            ctx(oob_token="from-config") as b, \
            ctx(oob_token="another") as c, ctx() as d:
        hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
        hub.publish("r", a.register(bytearray(8)))
        assert b.metadata("b", hub.url).lookup("hub", "r",
                                               timeout=LONG).nbytes == 8
        for other in (c, d):
            with pytest.raises(ferry.ProtocolError) as e:
                other.metadata("c", hub.url)
            assert e.value.name == "EPROTO"
            assert "token does not match" in str(e.value)
        # The refused never joined: their names are free.
        with pytest.raises(TimeoutError):
            hub.peer("c", timeout=0)
    with ctx(oob_token="x" * 128) as long_token:
        with pytest.raises(ferry.InvalidArgumentError, match="at most 127"):
            long_token.metadata("x", "bootstrap://127.0.0.1:0")


def test_bootstrap_token_from_the_environment():
    """Without oob_token, a context takes FERRY_OOB_TOKEN."""
    out = ferrytest.run_python("""
        import ferry, ferrytest
        with ferry.Context(**ferrytest.TCP) as a, \\
                ferry.Context(oob_token="from-the-environment",
                              **ferrytest.TCP) as b, \\
                ferry.Context(oob_token="another", **ferrytest.TCP) as c:
            hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
            b.metadata("b", hub.url).peer("hub", timeout=ferrytest.LONG)
            try:
                c.metadata("c", hub.url)
            except ferry.ProtocolError as e:
                print("refused:", e)
    """, FERRY_OOB_TOKEN="from-the-environment")
    assert "refused:" in out and "token does not match" in out, out


def test_bootstrap_hub_on_every_address_needs_a_token():
    """A hub on every address without a token would let anyone who
    reaches its port import every published region and write to it."""
    with ctx(metadata_timeout_ms=200) as a:
        with pytest.raises(ferry.Error) as e:
            a.metadata("hub", "bootstrap://:0")
        assert "no bootstrap token is set" in str(e.value)
    with ctx(oob_token="t") as a, ctx(oob_token="t") as b:
        hub = a.metadata("hub", "bootstrap://:0")
        assert hub.url.startswith("bootstrap://:")
        b.metadata("b", hub.url).peer("hub", timeout=LONG)
    with ctx(oob_insecure=True) as a:
        a.metadata("hub", "bootstrap://:0").close()  # accepted, as asked


def test_bootstrap_publications_replace_and_check_their_arguments():
    with ctx() as a, ctx() as b:
        hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
        member = b.metadata("member", hub.url)
        # A later publication of a name replaces it, on either side.
        for meta, mine, other, c in ((hub, "hub", member, a),
                                     (member, "member", hub, b)):
            meta.publish("r", c.register(bytearray(7)))
            assert other.lookup(mine, "r", timeout=LONG).nbytes == 7
            meta.publish("r", c.register(bytearray(12)))
            assert other.lookup(mine, "r", timeout=LONG).nbytes == 12
        with pytest.raises(ferry.InvalidArgumentError,
                           match="must be a ferry.Memory"):
            member.publish("x", bytearray(8))
        for name in ("", "x" * 128, "a b"):
            with pytest.raises(ferry.InvalidArgumentError,
                               match="A-Z a-z 0-9 . _ -"):
                member.publish(name, b.register(bytearray(8)))
        closed = b.register(bytearray(8))
        closed.close()
        with pytest.raises(ferry.HandleError, match="this Memory was closed"):
            member.publish("x", closed)


def test_bootstrap_hub_that_leaves():
    """The hub keeps every entry: once it closes, a member's calls say
    that its connection ended; the member's Peer of it stays usable."""
    with ctx() as a, ctx() as b:
        hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
        member = b.metadata("member", hub.url)
        peer = member.peer("hub", timeout=LONG)
        hub.close()
        with pytest.raises(ferry.ConnectionResetError) as e:
            member.peer("hub", timeout=LONG)
        assert isinstance(e.value, ConnectionResetError)
        for call in (lambda: member.publish("r", b.register(bytearray(8))),
                     lambda: member.lookup("hub", "kv", timeout=0)):
            with pytest.raises(ferry.ConnectionResetError):
                call()
        peer.notify(4, 1).wait(timeout=LONG)
        a.counter_wait(4, 1, timeout=LONG)
        member.close()


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
