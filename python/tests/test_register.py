"""Context.register: what it accepts (buffers, numpy, torch, DLPack,
__cuda_array_interface__), what it refuses, and Memory's properties."""
import array
import ctypes
import mmap

import numpy as np
import pytest

import ferry
import ferrytest
from ferrytest import LONG

torch = pytest.importorskip("torch")


class CudaArray:
    """A __cuda_array_interface__ over whatever pointer it is given."""

    def __init__(self, ptr, shape, typestr="|u1", strides=None,
                 readonly=False):
        self.__cuda_array_interface__ = {
            "data": (ptr, readonly), "shape": shape, "typestr": typestr,
            "strides": strides, "version": 3}


def roundtrip(pair, mem_obj, nbytes, read_back):
    """Registers mem_obj on the target, writes 0x5A... into it from the
    initiator, reads it back, and checks both ends by read_back()."""
    mem, rmem = pair.expose(mem_obj)
    assert mem.nbytes == rmem.nbytes == nbytes
    src = bytes((i * 7 + 1) & 0xFF for i in range(nbytes))
    pair.peer.write(pair.initiator.register(src, access=0), rmem,
                    notify=(1, 1)).wait(timeout=LONG)
    pair.target.counter_wait(1, 1, timeout=LONG)
    assert read_back() == src
    back = bytearray(nbytes)
    pair.peer.read(pair.initiator.register(back), rmem).wait(timeout=LONG)
    assert back == src
    return mem


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "numpy",
                                  "numpy2d", "fortran", "torch", "torch2d",
                                  "array", "mmap", "ctypes"])
def test_kinds_move_data(tcp_pair, kind):
    n = 4096
    if kind == "bytearray":
        obj = bytearray(n)
        back = lambda: bytes(obj)  # noqa: E731
    elif kind == "memoryview":
        base = bytearray(n + 100)
        obj = memoryview(base)[100:]
        back = lambda: bytes(base[100:])  # noqa: E731
    elif kind == "numpy":
        obj = np.zeros(n // 8, dtype=np.float64)
        back = obj.tobytes
    elif kind == "numpy2d":
        obj = np.zeros((16, n // 16), dtype=np.uint8)
        back = obj.tobytes
    elif kind == "fortran":  # contiguous, in Fortran order: one range too
        obj = np.zeros((16, n // 64), dtype=np.int32, order="F")
        back = lambda: obj.tobytes(order="A")  # noqa: E731
    elif kind == "torch":
        obj = torch.zeros(n // 4, dtype=torch.float32)
        back = lambda: obj.numpy().tobytes()  # noqa: E731
    elif kind == "torch2d":  # a contiguous slice: at its offset
        base = torch.zeros(32, n // 16, dtype=torch.uint8)
        obj = base[16:]
        back = lambda: base[16:].numpy().tobytes()  # noqa: E731
    elif kind == "array":
        obj = array.array("I", bytes(n))
        back = obj.tobytes
    elif kind == "mmap":
        obj = mmap.mmap(-1, n)
        back = lambda: obj[:]  # noqa: E731
    elif kind == "ctypes":
        obj = (ctypes.c_uint8 * n)()
        back = lambda: bytes(obj)  # noqa: E731
    mem = roundtrip(tcp_pair, obj, n, back)
    assert mem.path == "host"
    assert mem.obj is obj
    assert mem.readonly is False
    if kind.startswith("torch"):
        assert mem.address == obj.data_ptr()
    elif kind.startswith("numpy") or kind == "fortran":
        assert mem.address == obj.ctypes.data
    elif kind == "ctypes":
        assert mem.address == ctypes.addressof(obj)


@pytest.mark.parametrize("source", ["numpy", "torch"])
def test_dlpack(tcp_pair, source):
    if source == "numpy":
        t = np.zeros(1024, dtype=np.float32)
        address, back = t.ctypes.data, t.tobytes
    else:
        t = torch.zeros(1024, dtype=torch.float32)
        address, back = t.data_ptr(), lambda: t.numpy().tobytes()
    obj = ferrytest.DLPackOnly(t)
    mem = roundtrip(tcp_pair, obj, 4096, back)
    assert mem.address == address
    assert mem.obj is obj
    assert mem.path == "host"


def test_dlpack_non_contiguous_refused(tcp_pair):
    t = torch.zeros(8, 8)[:, ::2]
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.target.register(ferrytest.DLPackOnly(t))
    assert "DLPack tensor is not contiguous" in str(e.value)


def test_non_contiguous_torch_refused(tcp_pair):
    t = torch.zeros(8, 8)
    for view in (t[:, ::2], t.t()):
        with pytest.raises(ferry.InvalidArgumentError) as e:
            tcp_pair.target.register(view)
        assert "torch tensor is not contiguous" in str(e.value)
        assert ".contiguous()" in str(e.value)
    tcp_pair.target.register(t[:, ::2].contiguous()).close()


def test_non_contiguous_buffers_refused(tcp_pair):
    a = np.zeros((8, 8), dtype=np.uint8)
    for view in (a[::2], a[:, 1:3], np.zeros(16)[::3],
                 memoryview(bytearray(16))[::2]):
        with pytest.raises(ferry.InvalidArgumentError) as e:
            tcp_pair.target.register(view)
        assert "buffer is not contiguous" in str(e.value)
        assert "np.ascontiguousarray" in str(e.value)


def test_read_only_buffer(tcp_pair):
    data = b"read me, do not write me" * 100
    for access in (ferry.REMOTE_WRITE, ferry.REMOTE_READ | ferry.REMOTE_WRITE):
        with pytest.raises(ferry.InvalidArgumentError) as e:
            tcp_pair.target.register(data, access=access)
        assert "read-only" in str(e.value)
        assert "REMOTE_WRITE" in str(e.value)
    ro = np.arange(64, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ferry.InvalidArgumentError):
        tcp_pair.target.register(ro)
    # Accepted for remote reads, and peers read it.
    mem, rmem = tcp_pair.expose(data, access=ferry.REMOTE_READ)
    assert mem.readonly is True
    back = bytearray(len(data))
    tcp_pair.peer.read(tcp_pair.initiator.register(back), rmem).wait(
        timeout=LONG)
    assert back == data
    # A write to it is refused by the initiator: the blob says read-only.
    src = tcp_pair.initiator.register(bytearray(len(data)))
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.write(src, rmem)
    assert "without remote write access" in str(e.value)
    # A read into a read-only local buffer is refused too.
    local_ro = tcp_pair.initiator.register(bytes(len(data)), access=0)
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.read(local_ro, rmem)
    assert "read-only" in str(e.value)
    # A write from it is fine.
    wmem, wrmem = tcp_pair.expose(bytearray(len(data)),
                                  access=ferry.REMOTE_WRITE)
    tcp_pair.peer.write(local_ro, wrmem).wait(timeout=LONG)
    assert bytes(wmem.obj) == bytes(len(data))


def test_access(tcp_pair):
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.target.register(bytearray(8), access=4)
    assert "access=4" in str(e.value)
    local = tcp_pair.target.register(bytearray(8), access=0)
    with pytest.raises(ferry.InvalidArgumentError) as e:
        local.export()
    assert "without remote access" in str(e.value)
    wo, rwo = tcp_pair.expose(bytearray(64), access=ferry.REMOTE_WRITE)
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.read(tcp_pair.initiator.register(bytearray(64)), rwo)
    assert "without remote read access" in str(e.value)


@pytest.mark.parametrize("obj,words", [
    (5, "a int has no memory"),
    (object(), "a object has no memory"),
    ("text", "a str has no memory"),
    (bytearray(), "the bytearray is empty (0 bytes)"),
    (torch.zeros(0), "the Tensor is empty (0 bytes)"),
])
def test_nothing_to_register(tcp_pair, obj, words):
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.target.register(obj)
    assert words in str(e.value)


def test_kind_argument(tcp_pair):
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.target.register(bytearray(8), kind="gpu")
    assert "kind='gpu'" in str(e.value)
    assert tcp_pair.target.register(bytearray(8), kind="host").path == "host"
    if ferry.device_backend() is None:
        with pytest.raises(ferry.NotSupportedError) as e:
            tcp_pair.target.register(bytearray(8), kind="cuda")
        assert "device memory is not available" in str(e.value)


def test_torch_on_an_unsupported_device(tcp_pair):
    with pytest.raises(ferry.NotSupportedError) as e:
        tcp_pair.target.register(torch.empty(16, device="meta"))
    assert 'device type "meta"' in str(e.value)


def test_cuda_array_interface_checks(tcp_pair):
    """What is checked before ferry sees the pointer (test_device.py
    registers real simulated device memory)."""
    buf = np.zeros(64, dtype=np.float32)
    ptr = buf.ctypes.data
    cases = [
        (CudaArray(ptr, (64,), "<f4", readonly=True), "read-only"),
        (CudaArray(ptr, (8, 8), "<f4", strides=(4, 32)), "not contiguous"),
        (CudaArray(ptr, (8, 4), "<f4", strides=(32, 8)), "not contiguous"),
        (CudaArray(ptr, (64,), "f"), "typestr 'f' is not of the form"),
    ]
    for obj, words in cases:
        with pytest.raises(ferry.InvalidArgumentError) as e:
            tcp_pair.target.register(obj)
        assert words in str(e.value), str(e.value)
    bad = CudaArray(ptr, (64,))
    bad.__cuda_array_interface__ = {"shape": (64,)}
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.target.register(bad)
    assert "is not a dict with data=(ptr, readonly)" in str(e.value)
    if ferry.device_backend() is None:
        # Compact strides are contiguous; a host pointer is still no
        # device memory here.
        with pytest.raises(ferry.NotSupportedError):
            tcp_pair.target.register(
                CudaArray(ptr, (8, 8), "<f4", strides=(32, 4)))


def test_memory_properties_and_close(tcp_pair):
    buf = bytearray(100)
    mem = tcp_pair.target.register(buf)
    assert (mem.nbytes, mem.path, mem.closed, mem.readonly) == (
        100, "host", False, False)
    assert mem.address == ctypes.addressof(
        (ctypes.c_char * 100).from_buffer(buf))
    blob = mem.export()
    assert isinstance(blob, bytes) and blob == mem.export()
    mem.refresh()  # host memory: nothing to do
    # The export stops the bytearray from being resized under ferry.
    with pytest.raises(BufferError):
        buf.extend(b"x")
    mem.close()
    assert mem.closed
    mem.close()  # again: nothing
    buf.extend(b"x")  # released
    for call in (mem.export, mem.refresh, lambda: mem.path):
        with pytest.raises(ferry.HandleError) as e:
            call()
        assert "this Memory was closed" in str(e.value)
    with tcp_pair.target.register(bytearray(8)) as m2:
        assert not m2.closed
    assert m2.closed


def test_register_keeps_the_export_until_the_memory_goes(tcp_pair):
    buf = bytearray(100)
    mem = tcp_pair.target.register(buf)
    with pytest.raises(BufferError):
        buf.extend(b"x")
    del mem
    buf.extend(b"x")
