"""Device memory, on ferry's simulated device (FERRY_SIM_DEVICES=1: memory
the CPU cannot touch, moved only through ferry's device calls).  The
backend is chosen once per process, at its first use, so each test runs
its script in a fresh Python with the variable set.

The path of a CUDA tensor (a torch tensor on "cuda") needs a GPU; the
path of every other device array, __cuda_array_interface__, is the one
tested here, with a tensor-like class of the tests' own and with
ferry.DeviceBuffer.  Debian's libfabric has no FI_HMEM, so device
memory is "cuda staged": copied through pinned host buffers."""
import pytest

import ferry
import ferrytest

PRELUDE = """
import gc
import ferry
import ferrytest
from ferrytest import LONG

assert ferry.device_backend() == "simulated", ferry.device_status()


class SimTensor:
    '''A float32 tensor in simulated device memory: what register sees of
    a CuPy array or a CUDA tensor, through __cuda_array_interface__.'''

    def __init__(self, n):
        self.buf = ferry.DeviceBuffer(4 * n, device=0)
        self.shape = (n,)

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.buf.ptr, False), "shape": self.shape,
                "typestr": "<f4", "strides": None, "version": 3}

    def fill(self, data):
        self.buf.copy_from(data)

    def bytes(self):
        return self.buf.to_bytes()


def pattern(n, seed):
    return bytes((i * 13 + seed) & 0xFF for i in range(n))
"""


def sim(body, **env):
    return ferrytest.run_python(PRELUDE + body, FERRY_SIM_DEVICES=1, **env)


def test_device_buffer():
    sim("""
assert "FERRY_SIM_DEVICES" in ferry.device_status()
assert ferry.device_count() == 1
d = ferry.DeviceBuffer(4096)
assert (d.nbytes, d.device) == (4096, 0)
assert isinstance(d.ptr, int) and d.ptr != 0
cai = d.__cuda_array_interface__
assert cai == {"data": (d.ptr, False), "shape": (4096,), "typestr": "|u1",
               "strides": None, "version": 3}, cai
assert d.to_bytes() == bytes(4096)  # the simulated device zeroes
d.copy_from(b"hello", 100)
d.copy_from(bytearray(b"!"))
d.copy_from(memoryview(b"xyz"), 4093)
assert d.to_bytes(100, 5) == b"hello"
assert d.to_bytes(0, 1) == b"!"
assert d.to_bytes(4093) == b"xyz"
assert d.to_bytes()[100:105] == b"hello"
for call, words in [
        (lambda: d.copy_from(b"x" * 10, 4090), "10 bytes at offset 4090"),
        (lambda: d.copy_from(b"x", -1), "offset -1"),
        (lambda: d.to_bytes(4000, 200), "200 bytes at offset 4000"),
        (lambda: d.to_bytes(5000), "offset 5000")]:
    try:
        call()
        raise AssertionError("no RangeError: " + words)
    except ferry.RangeError as e:
        assert words in str(e) and "the buffer has 4096" in str(e), str(e)
for kwargs, words in [({"nbytes": 0}, "give a positive size"),
                      ({"nbytes": 16, "device": 3},
                       "device 3 does not exist")]:
    try:
        ferry.DeviceBuffer(**kwargs)
        raise AssertionError("no InvalidArgumentError: " + words)
    except ferry.InvalidArgumentError as e:
        assert words in str(e), str(e)
try:
    d.copy_from("text")
    raise AssertionError("a str was copied")
except TypeError:
    pass
d.free()
d.free()
assert d.ptr == 0
for call in (d.to_bytes, lambda: d.copy_from(b"x"),
             lambda: d.__cuda_array_interface__):
    try:
        call()
        raise AssertionError("used after free")
    except ferry.HandleError as e:
        assert "this DeviceBuffer was freed" in str(e)
""")


def test_tensor_like_moves_both_ways():
    sim("""
n = 64 << 10  # floats: 256 KiB, several staging chunks of 64 KiB
pair = ferrytest.Pair(target={"staging_chunk": 64 << 10},
                      initiator={"staging_chunk": 64 << 10})
remote = SimTensor(n)
mem = pair.target.register(remote)
assert mem.path == "cuda staged", mem.path
assert mem.nbytes == 4 * n and mem.address == remote.buf.ptr
assert mem.obj is remote
rmem = pair.peer.import_region(mem.export())

# host -> device: the target's device holds it before the notification.
src = pattern(4 * n, 1)
pair.peer.write(pair.initiator.register(src, access=0), rmem,
                notify=(1, 1)).wait(timeout=LONG)
pair.target.counter_wait(1, 1, timeout=LONG)
assert remote.bytes() == src

# device -> host: a change on the device, refreshed into the mirror.
remote.fill(pattern(4 * n, 2))
mem.refresh()
back = bytearray(4 * n)
pair.peer.read(pair.initiator.register(back), rmem).wait(timeout=LONG)
assert back == pattern(4 * n, 2)

# device -> device, both ways, from a tensor-like on the initiator.
local = SimTensor(n)
local.fill(pattern(4 * n, 3))
lmem = pair.initiator.register(local)
assert lmem.path == "cuda staged"
pair.peer.write(lmem, rmem, notify=(1, 1)).wait(timeout=LONG)
pair.target.counter_wait(1, 2, timeout=LONG)
assert remote.bytes() == pattern(4 * n, 3)
remote.fill(pattern(4 * n, 4))
mem.refresh()
pair.peer.read(lmem, rmem).wait(timeout=LONG)
assert local.bytes() == pattern(4 * n, 4)

# Parts, at offsets.
pair.peer.write(lmem, rmem, offset=8, remote_offset=4096, length=100,
                notify=(1, 1)).wait(timeout=LONG)
pair.target.counter_wait(1, 3, timeout=LONG)
assert remote.buf.to_bytes(4096, 100) == pattern(4 * n, 4)[8:108]

# The initiator staged its own device memory (a write, a read and the
# part), 64 KiB at a time as configured; the target synced its mirror
# after each of the three writes.
st_i, st_t = pair.initiator.stats(), pair.target.stats()
assert st_i["staged_bytes"] == 2 * 4 * n + 100, st_i
assert st_i["staged_chunks"] == 4 + 4 + 1, st_i
assert st_t["mirror_syncs"] == 3, st_t

# The Memory holds the tensor-like and its buffer.
del remote, local
gc.collect()
pair.peer.write(pair.initiator.register(src, access=0), rmem,
                notify=(1, 1)).wait(timeout=LONG)
pair.target.counter_wait(1, 4, timeout=LONG)
assert mem.obj.bytes() == src
pair.peer.read(lmem, rmem).wait(timeout=LONG)
assert lmem.obj.bytes() == src
pair.close()
print("ok")
""")


def test_device_buffer_registered_directly_and_prepared():
    sim("""
pair = ferrytest.Pair()
d = ferry.DeviceBuffer(4096)
mem = pair.target.register(d, device=0)
assert mem.path == "cuda staged"
rmem = pair.peer.import_region(mem.export())
host = bytes(range(256)) * 16
lmem = pair.initiator.register(host, access=0)
prep = pair.peer.prepare(ferry.WRITE, ferry.Blocks(lmem, 1024, 4),
                         ferry.Blocks(rmem, 1024, 4))
prep.post([0, 1], [3, 2], notify=(1, 2)).wait(timeout=LONG)
pair.target.counter_wait(1, 2, timeout=LONG)
got = d.to_bytes()
assert got[3072:] == host[:1024] and got[2048:3072] == host[1024:2048]
assert got[:2048] == bytes(2048)
# From device blocks too.
ld = ferry.DeviceBuffer(4096)
ld.copy_from(b"L" * 4096)
prep2 = pair.peer.prepare(ferry.WRITE,
                          ferry.Blocks(pair.initiator.register(ld), 1024, 4),
                          ferry.Blocks(rmem, 1024, 4))
prep2.post([0], [0], notify=(1, 1)).wait(timeout=LONG)
pair.target.counter_wait(1, 3, timeout=LONG)
assert d.to_bytes(0, 1024) == b"L" * 1024
pair.close()
""")


def test_device_refusals():
    sim("""
pair = ferrytest.Pair()
d = ferry.DeviceBuffer(4096)
cases = [
    (lambda: pair.target.register(d, kind="host"), "not host memory"),
    (lambda: pair.target.register(bytearray(64), kind="cuda"),
     "is host memory, not memory of a simulated device"),
    (lambda: pair.target.register(d, device=5),
     "belongs to device 0, not device 5"),
]


class ReadOnly(SimTensor):
    @property
    def __cuda_array_interface__(self):
        cai = dict(SimTensor.__cuda_array_interface__.fget(self))
        cai["data"] = (self.buf.ptr, True)
        return cai


class Strided(SimTensor):
    @property
    def __cuda_array_interface__(self):
        cai = dict(SimTensor.__cuda_array_interface__.fget(self))
        cai["shape"], cai["strides"] = (8, 8), (4, 32)
        return cai


ro = ReadOnly(16)
cases.append((lambda: pair.target.register(ro), "read-only"))
cases.append((lambda: pair.target.register(Strided(64)), "not contiguous"))
for call, words in cases:
    try:
        call()
        raise AssertionError("accepted: " + words)
    except ferry.InvalidArgumentError as e:
        assert words in str(e), str(e)
# Read-only device memory is fine for remote reads.
ro.fill(b"R" * 64)
mem = pair.target.register(ro, access=ferry.REMOTE_READ)
assert mem.readonly
back = bytearray(64)
pair.peer.read(pair.initiator.register(back),
               pair.peer.import_region(mem.export())).wait(timeout=LONG)
assert back == b"R" * 64
# A freed buffer has no interface left to register; a tensor-like over
# it gives the NULL pointer, refused.
gone = SimTensor(4)
gone.buf.free()
try:
    pair.target.register(gone.buf)
    raise AssertionError("a freed buffer was registered")
except ferry.HandleError as e:
    assert "this DeviceBuffer was freed" in str(e)
try:
    pair.target.register(gone)
    raise AssertionError("a NULL pointer was registered")
except ferry.InvalidArgumentError as e:
    assert "addr is NULL" in str(e)
pair.close()
""")


def test_device_transfers_on_shm():
    sim("""
pair = ferrytest.Pair(ferrytest.SHM)
t = SimTensor(1024)
mem = pair.target.register(t)
rmem = pair.peer.import_region(mem.export())
pair.peer.write(pair.initiator.register(pattern(4096, 9), access=0), rmem,
                notify=(1, 1)).wait(timeout=LONG)
pair.target.counter_wait(1, 1, timeout=LONG)
assert t.bytes() == pattern(4096, 9)
print(mem.path)
pair.close()
""")


def test_cuda_torch_tensor():
    """A torch tensor on "cuda" (and the same through DLPack), in this
    process: it needs a GPU, and ferry's CUDA backend."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device here; on a GPU machine this "
                    "moves CUDA tensors (the simulated device above covers "
                    "__cuda_array_interface__)")
    if ferry.device_backend() != "cuda":
        pytest.skip("ferry's device backend is %r: %s"
                    % (ferry.device_backend(), ferry.device_status()))
    LONG = ferrytest.LONG
    pair = ferrytest.Pair()
    try:
        n = 1 << 18
        remote = torch.zeros(n, dtype=torch.float32, device="cuda")
        mem = pair.target.register(remote)
        assert mem.path in ("cuda dmabuf", "cuda FI_HMEM", "cuda staged")
        assert mem.address == remote.data_ptr()
        rmem = pair.peer.import_region(mem.export())
        src = torch.arange(n, dtype=torch.float32)
        pair.peer.write(pair.initiator.register(src), rmem,
                        notify=(1, 1)).wait(timeout=LONG)
        pair.target.counter_wait(1, 1, timeout=LONG)
        assert torch.equal(remote.cpu(), src)
        remote.mul_(2)
        torch.cuda.synchronize()
        mem.refresh()
        local = torch.zeros(n, dtype=torch.float32, device="cuda")
        pair.peer.read(pair.initiator.register(local), rmem).wait(
            timeout=LONG)
        assert torch.equal(local.cpu(), src * 2)
        dl = pair.target.register(ferrytest.DLPackOnly(local))
        assert dl.path == mem.path and dl.nbytes == 4 * n
        with pytest.raises(ferry.InvalidArgumentError):
            pair.target.register(remote.view(512, 512)[:, ::2])
    finally:
        pair.close()
