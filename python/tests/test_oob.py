"""The bootstrap: Context.listen / connect, Listener, Connection."""
import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP


@pytest.fixture
def two():
    a = ferry.Context(progress_thread=True, **TCP)
    b = ferry.Context(progress_thread=True, **TCP)
    yield a, b
    b.close()
    a.close()


def test_publish_lookup_offer_accept(two):
    a, b = two
    kv = bytearray(4096)
    lis = a.listen("127.0.0.1:0", token="s3cret")
    assert isinstance(lis, ferry.Listener) and 0 < lis.port < 65536
    lis.publish("kv", a.register(kv))
    # The Listener holds what it publishes.
    conn = b.connect("127.0.0.1:%d" % lis.port, token="s3cret",
                     timeout=LONG)
    assert isinstance(conn, ferry.Connection)
    assert isinstance(conn.peer, ferry.Peer)
    assert conn.peer is conn.peer
    rkv = conn.lookup("kv")
    assert rkv.nbytes == 4096 and rkv.peer is conn.peer
    src = b.register(bytes(range(256)) * 16, access=ferry.REMOTE_READ)
    conn.peer.write(src, rkv, notify=(1, 1)).wait(timeout=LONG)
    a.counter_wait(1, 1, timeout=LONG)
    assert kv == bytes(range(256)) * 16
    # The other way: b offers, a finds it through the accepted connection.
    mine = bytearray(b"\x77") * 100
    conn.offer("mine", b.register(mine))
    served = lis.accept(timeout=LONG)
    rmine = served.lookup("mine", timeout=LONG)
    assert rmine.nbytes == 100
    back = bytearray(100)
    served.peer.read(a.register(back), rmine).wait(timeout=LONG)
    assert back == mine
    served.peer.write(a.register(b"\x01" * 10, access=0), rmine,
                      notify=(2, 1)).wait(timeout=LONG)
    b.counter_wait(2, 1, timeout=LONG)
    assert mine[:11] == b"\x01" * 10 + b"\x77"
    # An offer replaces an earlier one of that name.
    conn.offer("mine", b.register(bytearray(7)))
    assert served.lookup("mine", timeout=LONG).nbytes == 7
    # Publications replace too.
    lis.publish("kv", a.register(bytearray(12)))
    assert conn.lookup("kv").nbytes == 12


def test_token_from_the_config():
    with ferry.Context(oob_token="from-config", **TCP) as a, \
            ferry.Context(oob_token="from-config", **TCP) as b, \
            ferry.Context(oob_token="another", **TCP) as c:
        lis = a.listen("127.0.0.1:0")
        lis.publish("r", a.register(bytearray(8)))
        assert b.connect("127.0.0.1:%d" % lis.port).lookup("r").nbytes == 8
        with pytest.raises(ferry.ProtocolError) as e:
            c.connect("127.0.0.1:%d" % lis.port, timeout=LONG)
        assert "token" in str(e.value)
        # A token given to the call wins over the context's.
        assert c.connect("127.0.0.1:%d" % lis.port,
                         token="from-config").lookup("r").nbytes == 8


def test_wrong_token(two):
    a, b = two
    lis = a.listen("127.0.0.1:0", token="right")
    with pytest.raises(ferry.ProtocolError) as e:
        b.connect("127.0.0.1:%d" % lis.port, token="wrong", timeout=LONG)
    assert e.value.name == "EPROTO"
    assert "token does not match" in str(e.value)
    with pytest.raises(ferry.TimeoutError):
        lis.accept(timeout=0.1)  # a refused client is never accepted


def test_lookup_and_accept_failures(two):
    a, b = two
    lis = a.listen("127.0.0.1:0", token="t")
    with pytest.raises(ferry.TimeoutError) as e:
        lis.accept(timeout=0.05)
    assert "no client connected within 50 ms" in str(e.value)
    conn = b.connect("127.0.0.1:%d" % lis.port, token="t")
    with pytest.raises(ferry.NotFoundError) as e:
        conn.lookup("nothing-here")
    assert "nothing-here" in str(e.value)
    served = lis.accept(timeout=LONG)
    with pytest.raises(ferry.NotFoundError) as e:
        served.lookup("never-offered", timeout=0.05)
    assert "never-offered" in str(e.value)
    # The client leaves: the served side says so.
    conn.close()
    with pytest.raises(ferry.ConnectionResetError) as e:
        served.lookup("never-offered", timeout=LONG)
    assert isinstance(e.value, ConnectionResetError)


def test_listen_refusals():
    with ferry.Context(**TCP) as ctx:
        lis = ctx.listen("127.0.0.1:0", token="t")
        with pytest.raises(ferry.ExistsError):
            ctx.listen("127.0.0.1:%d" % lis.port, token="t")
        with pytest.raises(ferry.InvalidArgumentError) as e:
            ctx.listen("no port here", token="t")
        assert '"no port here" has no port' in str(e.value)
        # Every address without a token: anyone could import the regions.
        with pytest.raises(ferry.InvalidArgumentError) as e:
            ctx.listen(":0")
        assert "not a loopback address and no bootstrap token" in str(e.value)
        with pytest.raises(ferry.InvalidArgumentError) as e:
            ctx.listen("127.0.0.1:0", token="x" * 128)
        assert "at most 127" in str(e.value)
        with pytest.raises(TypeError):
            ctx.listen(5)
    with ferry.Context(oob_insecure=True, **TCP) as ctx:
        ctx.listen(":0").close()  # accepted, as asked


def test_connect_refused():
    port = ferrytest.free_port()
    with ferry.Context(**TCP) as ctx:
        with pytest.raises(ferry.HostUnreachableError) as e:
            ctx.connect("127.0.0.1:%d" % port, token="t", timeout=0.2)
        assert "127.0.0.1:%d" % port in str(e.value)
        with pytest.raises(ferry.InvalidArgumentError):
            ctx.connect("127.0.0.1:1", token="t", timeout=-1)


def test_peers_of_connections_belong_to_them(two):
    a, b = two
    lis = a.listen("127.0.0.1:0", token="t")
    conn = b.connect("127.0.0.1:%d" % lis.port, token="t")
    with pytest.raises(ferry.BusyError) as e:
        conn.peer.close()
    assert "bootstrap connection" in str(e.value)
    served = lis.accept(timeout=LONG)
    with pytest.raises(ferry.BusyError):
        served.peer.close()
    # The peer outlives its connection, with the context.
    peer = conn.peer
    conn.close()
    peer.notify(4, 1).wait(timeout=LONG)
    a.counter_wait(4, 1, timeout=LONG)


def test_close_and_context_managers(two):
    a, b = two
    mem = a.register(bytearray(8))
    with a.listen("127.0.0.1:0", token="t") as lis:
        lis.publish("m", mem)
        port = lis.port
        with b.connect("127.0.0.1:%d" % port, token="t") as conn:
            assert conn.lookup("m").nbytes == 8
        for call in (lambda: conn.lookup("m"),
                     lambda: conn.offer("m", b.register(bytearray(8)))):
            with pytest.raises(ferry.HandleError,
                               match="this Connection was closed"):
                call()
        conn.close()
    for call in (lambda: lis.port, lambda: lis.publish("m", mem),
                 lambda: lis.accept(timeout=0)):
        with pytest.raises(ferry.HandleError, match="Listener was closed"):
            call()
    lis.close()
    # Closed: nobody listens on its port any more.
    with pytest.raises(ferry.HostUnreachableError):
        b.connect("127.0.0.1:%d" % port, token="t", timeout=0.2)


def test_publish_and_offer_check_their_arguments(two):
    a, b = two
    lis = a.listen("127.0.0.1:0", token="t")
    with pytest.raises(ferry.InvalidArgumentError, match="must be a "
                       "ferry.Memory"):
        lis.publish("x", bytearray(8))
    for name in ("", "x" * 128):
        with pytest.raises(ferry.InvalidArgumentError,
                           match="a region name is 1 to 127 characters"):
            lis.publish(name, a.register(bytearray(8)))
    closed = a.register(bytearray(8))
    closed.close()
    with pytest.raises(ferry.HandleError, match="this Memory was closed"):
        lis.publish("x", closed)
    conn = b.connect("127.0.0.1:%d" % lis.port, token="t")
    with pytest.raises(ferry.InvalidArgumentError):
        conn.offer("x", "not memory")
