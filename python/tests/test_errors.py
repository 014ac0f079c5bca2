"""Errors: one exception class per code of include/ferry/errno.h, each
instance carrying the code, its name and ferry's whole sentence; and the
real errors, provoked."""
import builtins

import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP

TABLE = ferrytest.errno_table()
BY_NAME = {name: (value, kind, text) for name, value, kind, text in TABLE}


def check(exc, name, *words):
    """exc is ferry's exception of code name, its sentence has words."""
    value, kind, _ = BY_NAME[name]
    assert type(exc) is getattr(ferry, kind + "Error")
    assert isinstance(exc, ferry.Error)
    assert exc.code == value
    assert exc.name == name
    assert exc.args == (str(exc),)
    for w in words:
        assert w in str(exc), (w, str(exc))


def test_table_is_complete():
    names = [row[0] for row in TABLE]
    assert len(names) == len(set(names)) >= 24
    assert "EPEERDEAD" in names and "EHANDLE" in names


@pytest.mark.parametrize("name,value,kind,text", TABLE,
                         ids=[row[0] for row in TABLE])
def test_class_per_code(name, value, kind, text):
    cls = getattr(ferry, kind + "Error")
    assert issubclass(cls, ferry.Error)
    assert cls.__name__ == kind + "Error"
    assert cls.__module__ == "ferry"
    assert cls.__doc__ == text == ferry.strerror(value)
    assert value < 0


def test_no_other_error_classes():
    classes = {n for n, v in vars(ferry).items()
               if isinstance(v, type) and issubclass(v, ferry.Error)}
    assert classes == {"Error"} | {k + "Error" for _, _, k, _ in TABLE}
    assert issubclass(ferry.Error, Exception)


def test_builtin_bases():
    assert issubclass(ferry.TimeoutError, builtins.TimeoutError)
    assert issubclass(ferry.InvalidArgumentError, ValueError)
    assert issubclass(ferry.ConnectionResetError,
                      builtins.ConnectionResetError)
    assert not issubclass(ferry.RangeError, ValueError)
    assert ferry.TimeoutError is not builtins.TimeoutError


# ---- provoked --------------------------------------------------------------

def test_range_error(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(4096))
    src = tcp_pair.initiator.register(bytearray(4096))
    with pytest.raises(ferry.RangeError) as e:
        tcp_pair.peer.write(src, rmem, remote_offset=1)
    check(e.value, "ERANGE", "Peer.write", "remote offset 1 + length 4096",
          "4096-byte region")
    with pytest.raises(ferry.RangeError) as e:
        tcp_pair.peer.read(src, rmem, length=4097)
    check(e.value, "ERANGE", "Peer.read", "not inside its registration")


def test_timeout_error_counter_wait(tcp_pair):
    with pytest.raises(TimeoutError) as e:  # the builtin catches it
        tcp_pair.target.counter_wait(77, 1, timeout=0.05)
    check(e.value, "ETIMEDOUT", "counter 77 reached 0 of 1 within 50 ms")


def test_timeout_error_request():
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        req = peer.write(mem, rmem, timeout=LONG)
        # This wait's timeout: the request goes on.
        with pytest.raises(ferry.TimeoutError) as e:
            req.wait(timeout=0.05)
        check(e.value, "ETIMEDOUT", "Request.wait", "still in progress",
              "50 ms")
        assert req.done is False
        # The request's own deadline.
        req2 = peer.write(mem, rmem, timeout=0.2)
        with pytest.raises(ferry.TimeoutError) as e:
            req2.wait(timeout=LONG)
        check(e.value, "ETIMEDOUT", "deadline passed", "0 bytes")
        assert req2.done
        req.cancel()
        with pytest.raises(ferry.CanceledError) as e:
            req.wait(timeout=LONG)
        check(e.value, "ECANCELED", "cancelled")


def test_peer_dead_error_unreachable():
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=300)
    with ctx:
        with pytest.raises(ferry.PeerDeadError) as e:
            peer.write(mem, rmem).wait(timeout=LONG)
        check(e.value, "EPEERDEAD", "unreachable", "no sign of life")
        state, why = peer.state()
        assert state == "unreachable"
        assert "no sign of life" in why
        # Final: new requests are refused at once.
        with pytest.raises(ferry.PeerDeadError):
            peer.write(mem, rmem).wait(timeout=LONG)


def test_peer_dead_error_declared(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    src = tcp_pair.initiator.register(bytearray(64))
    tcp_pair.peer.write(src, rmem).wait(timeout=LONG)
    tcp_pair.peer.declare_dead("the scheduler killed it")
    assert tcp_pair.peer.state() == ("dead", "the scheduler killed it")
    with pytest.raises(ferry.PeerDeadError) as e:
        tcp_pair.peer.write(src, rmem).wait(timeout=LONG)
    check(e.value, "EPEERDEAD")
    with pytest.raises(ferry.PeerDeadError):
        tcp_pair.peer.counter_wait(1, 1, timeout=LONG)


def test_not_found_error():
    with ferry.Context(**TCP) as a:
        meta = a.metadata("alone", "bootstrap://127.0.0.1:0")
        with pytest.raises(ferry.NotFoundError) as e:
            meta.withdraw("no-such-region")
        check(e.value, "ENOENT", "Meta.withdraw", "no-such-region")


def test_protocol_error_wrong_token():
    with ferry.Context(oob_token="right", **TCP) as a, \
            ferry.Context(oob_token="wrong", **TCP) as b:
        hub = a.metadata("hub", "bootstrap://127.0.0.1:0")
        with pytest.raises(ferry.ProtocolError) as e:
            b.metadata("member", hub.url)
        check(e.value, "EPROTO", "Context.metadata", "token")


def test_handle_error_after_close(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    tcp_pair.initiator.close()
    with pytest.raises(ferry.HandleError) as e:
        tcp_pair.peer.write(mem, rmem)
    check(e.value, "EHANDLE", "Peer.write", "the Context is closed")


def test_blob_and_incompatible_errors(tcp_pair):
    with pytest.raises(ferry.BlobError) as e:
        tcp_pair.initiator.add_peer(b"garbage")
    check(e.value, "EBLOB", "Context.add_peer", "truncated")
    with pytest.raises(ferry.BlobError) as e:
        tcp_pair.peer.import_region(b"garbage" * 10)
    check(e.value, "EBLOB", "Peer.import_region", "not a ferry blob")
    with ferry.Context(**ferrytest.SHM) as shm:
        with pytest.raises(ferry.IncompatibleError) as e:
            tcp_pair.initiator.add_peer(shm.address())
    check(e.value, "EINCOMPAT", "'shm'", "'tcp;ofi_rxm'")


def test_exists_error_name_taken():
    with ferry.Context(**TCP) as a, ferry.Context(**TCP) as b:
        hub = a.metadata("taken", "bootstrap://127.0.0.1:0")
        with pytest.raises(ferry.ExistsError) as e:
            b.metadata("taken", hub.url)
        check(e.value, "EEXIST", "Context.metadata", "taken")


def test_busy_error(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    with pytest.raises(ferry.BusyError) as e:
        tcp_pair.peer.close()  # rmem still imported from it
    check(e.value, "EBUSY", "Peer.close")
    rmem.close()
    tcp_pair.peer.close()
    assert tcp_pair.peer.closed


def test_not_supported_error():
    with ferry.Context(**TCP) as ctx:
        with pytest.raises(ferry.NotSupportedError) as e:
            ctx.register(ferry_torch().empty(4, device="meta"))
    check(e.value, "ENOTSUP", "device type \"meta\"")


def ferry_torch():
    return pytest.importorskip("torch")


def test_binding_refusals_are_invalid_argument_errors(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(64))
    src = tcp_pair.initiator.register(bytearray(64))
    with pytest.raises(ValueError) as e:  # the builtin catches it
        tcp_pair.peer.write(src, rmem, timeout=-1)
    check(e.value, "EINVAL", "timeout -1 is not a number of seconds")
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.write(src, rmem, notify=[1, 2])
    check(e.value, "EINVAL", "notify must be a tuple (id, value)")
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.write(src, rmem, notify=(1, 2, 3))
    check(e.value, "EINVAL", "notify must be a tuple")
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.write(src, rmem, notify=(-1, 2))
    check(e.value, "EINVAL", "id -1 is not a whole number")
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.write(src, rmem, notify=(1, 2 ** 64))
    check(e.value, "EINVAL", "value")
    with pytest.raises(TypeError, match="timeout must be a number"):
        tcp_pair.peer.write(src, rmem, timeout="soon")


def test_error_raised_from_another_thread_keeps_its_sentence(tcp_pair):
    """ferry_last_error is per thread: an error in a thread says its own
    sentence, not another thread's."""
    import threading
    out = {}

    def fail():
        try:
            tcp_pair.target.counter_wait(5, 1, timeout=0.01)
        except ferry.TimeoutError as e:
            out["e"] = e

    t = threading.Thread(target=fail)
    t.start()
    try:
        tcp_pair.initiator.add_peer(b"x")
    except ferry.BlobError as e:
        blob_error = e
    t.join()
    check(out["e"], "ETIMEDOUT", "counter 5")
    check(blob_error, "EBLOB")


def test_handle_error_objects_of_another_context_or_peer(tcp_pair):
    other = ferrytest.Pair()
    try:
        mem, rmem = tcp_pair.expose(bytearray(4096))
        omem, ormem = other.expose(bytearray(4096))
        mine = tcp_pair.initiator.register(bytearray(4096))
        theirs = other.initiator.register(bytearray(4096))
        peer = tcp_pair.peer
        cases = [
            (lambda: peer.write(theirs, rmem), "registered with another "
             "context than the peer's"),
            (lambda: peer.read(mine, ormem), "imported from another peer"),
            (lambda: peer.prepare(ferry.WRITE, ferry.Blocks(theirs, 1024, 4),
                                  ferry.Blocks(rmem, 1024, 4)),
             "segment.mem belongs to another context"),
            (lambda: peer.prepare(ferry.WRITE, ferry.Blocks(mine, 1024, 4),
                                  ferry.Blocks(ormem, 1024, 4)),
             "segment.rmem belongs to another context"),
        ]
        for call, words in cases:
            with pytest.raises(ferry.HandleError) as e:
                call()
            check(e.value, "EHANDLE", words)
    finally:
        other.close()
