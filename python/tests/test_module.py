"""The module itself: version, constants, documented methods, device
functions without a device."""
import inspect
import os
import re

import pytest

import ferry
import ferrytest

TYPES = ["Context", "Peer", "Memory", "RemoteMemory", "Request", "Blocks",
         "Prepared", "Meta", "DeviceBuffer", "Notification"]


def test_version_matches_version_file():
    text = open(os.path.join(ferrytest.ROOT, "VERSION")).read()
    fields = dict(re.findall(r"^(\w+)=(\S*)", text, re.M))
    want = "{major}.{minor}.{release}".format(**fields) + \
        fields.get("greek", "")
    assert ferry.__version__ == want
    assert ferry.LIBRARY_VERSION.startswith("ferry %s " % want)
    assert "libfabric" in ferry.LIBRARY_VERSION


def test_constants():
    assert (ferry.REMOTE_READ, ferry.REMOTE_WRITE) == (1, 2)
    assert (ferry.WRITE, ferry.READ) == (1, 2)


def test_types_exported_and_documented():
    for name in TYPES:
        t = getattr(ferry, name)
        assert isinstance(t, type), name
        assert t.__module__ == "ferry" and t.__name__ == name
        assert (t.__doc__ or "").strip(), name


def test_every_public_method_has_a_docstring():
    """Methods and properties (PyMethodDef, PyGetSetDef); plain members
    (Blocks.block_size...) are only fields."""
    undocumented = []
    for name in TYPES:
        for attr, value in vars(getattr(ferry, name)).items():
            if attr.startswith("_") or not (
                    inspect.ismethoddescriptor(value) or
                    inspect.isgetsetdescriptor(value)):
                continue
            if not (value.__doc__ or "").strip():
                undocumented.append("%s.%s" % (name, attr))
    for fn in ("strerror", "device_backend", "device_status", "device_count",
               "wait_any"):
        if not (getattr(ferry, fn).__doc__ or "").strip():
            undocumented.append(fn)
    assert undocumented == []


def test_with_on_every_closable_type():
    """A type with close() is a context manager whose exit closes."""
    closable = [n for n in TYPES if hasattr(getattr(ferry, n), "close")]
    assert len(closable) >= 7, closable
    for name in closable:
        t = getattr(ferry, name)
        assert hasattr(t, "__enter__") and hasattr(t, "__exit__"), name


def test_with_closes(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(4096))
    lmem = tcp_pair.initiator.register(bytearray(4096))
    with tcp_pair.peer.write(lmem, rmem) as req:
        req.wait(timeout=ferrytest.LONG)
    with pytest.raises(ferry.HandleError, match="this Request was closed"):
        req.result()
    blocks = ferry.Blocks(lmem, 1024, 4), ferry.Blocks(rmem, 1024, 4)
    with tcp_pair.peer.prepare(ferry.WRITE, *blocks) as prep:
        assert prep.local_count == 4
    with pytest.raises(ferry.HandleError):
        prep.post([0], [1])
    with tcp_pair.peer.import_region(mem.export()) as other:
        assert other.nbytes == 4096
    assert other.closed
    peer = tcp_pair.initiator.add_peer(tcp_pair.target.address())
    with peer:
        pass
    assert peer.closed


def test_public_surface_is_what_the_tests_cover():
    """Every public method the tests call: a method added later without a
    test makes this fail, and the list below says where to add one."""
    surface = {
        "Context": {"close", "address", "info", "stats", "metrics_text",
                    "progress", "fd",
                    "arm", "add_peer", "register", "metadata",
                    "counter_get", "counter_wait", "counter_reset",
                    "notify_poll", "notify_wait", "notifications", "closed"},
        "Peer": {"import_region", "write", "read", "notify", "info", "state",
                 "watch",
                 "declare_dead", "counter_wait", "prepare", "close",
                 "context", "closed"},
        "Memory": {"export", "refresh", "close", "path", "nbytes", "address",
                   "obj", "readonly", "closed"},
        "RemoteMemory": {"close", "nbytes", "peer", "closed"},
        "Request": {"wait", "test", "cancel", "close", "done", "result"},
        "Prepared": {"post", "close", "local_count", "remote_count"},
        "Meta": {"publish", "withdraw", "peer", "lookup", "watch", "event",
                 "close", "url"},
        "DeviceBuffer": {"copy_from", "to_bytes", "free", "ptr", "nbytes",
                         "device"},
    }
    for name, want in surface.items():
        have = {a for a in vars(getattr(ferry, name)) if not a.startswith("_")}
        assert have == want, name


def test_strerror():
    for name, value, kind, text in ferrytest.errno_table():
        assert ferry.strerror(value) == text, name
    assert isinstance(ferry.strerror(-99999), str)
    with pytest.raises(TypeError):
        ferry.strerror("EINVAL")


def test_device_functions_without_a_device():
    if ferry.device_backend() is not None:
        pytest.skip("this process has a device backend (%s): "
                    "test_device.py covers it" % ferry.device_status())
    status = ferry.device_status()
    assert isinstance(status, str) and status
    with pytest.raises(ferry.NotSupportedError) as e:
        ferry.device_count()
    assert e.value.name == "ENOTSUP"
    with pytest.raises(ferry.NotSupportedError):
        ferry.DeviceBuffer(4096)


def test_fi_mr_cache_turned_off():
    """ferry sets FI_MR_CACHE_MONITOR=disabled in the process environment
    before its first libfabric call unless it is set (include/ferry.h);
    os.environ is a copy taken at start-up, so the child asks libc."""
    out = ferrytest.run_python("""
        import ctypes, ferry
        ferry.Context(provider="shm").close()
        getenv = ctypes.CDLL(None).getenv
        getenv.restype = ctypes.c_char_p
        print(getenv(b"FI_MR_CACHE_MONITOR").decode())
    """, FERRY_KEEP_FI_MR_CACHE=None, FI_MR_CACHE_MONITOR=None)
    assert out.split() == ["disabled"]
