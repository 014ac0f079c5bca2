"""Lifetimes: a registered object cannot be freed under ferry, a closed
Context makes every object raise (never crash), and neither the order in
which objects go nor reference cycles matter."""
import gc
import random
import weakref

import numpy as np
import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP

torch = pytest.importorskip("torch")


class Array(np.ndarray):
    """A numpy array that takes attributes (and weak references)."""


class Bytes(bytearray):
    """A bytearray that takes weak references."""


def make(kind, n):
    if kind == "numpy":
        return np.zeros(n, dtype=np.uint8).view(Array)
    if kind == "torch":
        return torch.zeros(n, dtype=torch.uint8)
    return Bytes(n)


def content(obj):
    if isinstance(obj, torch.Tensor):
        return obj.numpy().tobytes()
    return bytes(obj)


@pytest.mark.parametrize("kind", ["bytearray", "numpy", "torch"])
def test_memory_holds_the_object(tcp_pair, kind):
    """Deleted after register, the object lives on in the Memory: data
    moves into and out of it; it goes with the Memory."""
    obj = make(kind, 4096)
    alive = weakref.ref(obj)
    mem, rmem = tcp_pair.expose(obj)
    lobj = make(kind, 4096)
    lalive = weakref.ref(lobj)
    lmem = tcp_pair.initiator.register(lobj)
    del obj, lobj
    gc.collect()
    assert alive() is not None and lalive() is not None
    lmem.obj[:] = 0x3C if kind != "bytearray" else b"\x3c" * 4096
    tcp_pair.peer.write(lmem, rmem, notify=(1, 1)).wait(timeout=LONG)
    tcp_pair.target.counter_wait(1, 1, timeout=LONG)
    assert content(mem.obj) == b"\x3c" * 4096
    mem.obj[:10] = 7 if kind != "bytearray" else b"\x07" * 10
    tcp_pair.peer.read(lmem, rmem, length=10).wait(timeout=LONG)
    assert content(lmem.obj)[:11] == b"\x07" * 10 + b"\x3c"
    # The object goes with its last Memory.
    del mem, lmem
    gc.collect()
    assert alive() is None and lalive() is None


def test_memory_holds_a_dlpack_producer(tcp_pair):
    arr = np.zeros(256, dtype=np.uint8).view(Array)
    alive = weakref.ref(arr)
    mem, rmem = tcp_pair.expose(ferrytest.DLPackOnly(arr))
    del arr
    gc.collect()
    assert alive() is not None
    src = tcp_pair.initiator.register(b"\x11" * 256, access=0)
    tcp_pair.peer.write(src, rmem, notify=(1, 1)).wait(timeout=LONG)
    tcp_pair.target.counter_wait(1, 1, timeout=LONG)
    assert mem.obj.tensor.tobytes() == b"\x11" * 256
    del mem
    gc.collect()
    assert alive() is None  # the capsule's deleter ran


def test_request_holds_what_it_touches(tcp_pair):
    dst = bytearray(1 << 20)
    mem, rmem = tcp_pair.expose(dst)
    src = make("numpy", 1 << 20)
    src[:] = 0x42
    alive = weakref.ref(src)
    lmem = tcp_pair.initiator.register(src)
    mem_alive = weakref.ref(lmem)
    req = tcp_pair.peer.write(lmem, rmem, notify=(1, 1))
    peer = tcp_pair.peer
    del src, lmem, rmem
    tcp_pair.peer = None
    del peer
    gc.collect()
    assert alive() is not None and mem_alive() is not None
    req.wait(timeout=LONG)
    tcp_pair.target.counter_wait(1, 1, timeout=LONG)
    assert dst == b"\x42" * (1 << 20)
    del req
    gc.collect()
    assert alive() is None and mem_alive() is None


def test_weakref_to_memory(tcp_pair):
    mem = tcp_pair.target.register(bytearray(64))
    ref = weakref.ref(mem)
    proxy = weakref.proxy(mem)
    assert ref() is mem and proxy.nbytes == 64
    cache = weakref.WeakValueDictionary(k=mem)
    del mem
    assert ref() is None and "k" not in cache
    with pytest.raises(ReferenceError):
        proxy.nbytes


def test_memory_in_a_reference_cycle(tcp_pair):
    """An object that refers to its own Memory: the cycle is collected and
    the registration goes with it."""
    arr = make("numpy", 4096)
    mem = tcp_pair.target.register(arr)
    arr.mem = mem  # arr -> mem -> arr
    t = torch.zeros(1024)
    tmem = tcp_pair.target.register(t)
    t.mem = tmem  # a tensor's attributes too
    refs = [weakref.ref(x) for x in (arr, mem, t, tmem)]
    del arr, mem, t, tmem
    gc.collect()
    assert [r() is None for r in refs] == [True] * 4
    assert gc.garbage == []


def test_cycle_through_a_request(tcp_pair):
    """An object that keeps the request that moves it (a tensor's pending
    transfer): a cycle through Request, Memory and the object."""
    mem, rmem = tcp_pair.expose(bytearray(4096))
    t = torch.ones(1024)
    lmem = tcp_pair.initiator.register(t)
    t.pending = tcp_pair.peer.write(lmem, rmem, notify=(1, 1))
    t.pending.wait(timeout=LONG)
    refs = [weakref.ref(t), weakref.ref(lmem)]
    del t, lmem
    gc.collect()
    assert [r() is None for r in refs] == [True, True]


def test_cycle_through_blocks_and_prepared(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(4096))
    t = torch.ones(1024)
    lmem = tcp_pair.initiator.register(t)
    t.prep = tcp_pair.peer.prepare(ferry.WRITE, ferry.Blocks(lmem, 1024, 4),
                                   ferry.Blocks(rmem, 1024, 4))
    t.prep.post([0], [3]).wait(timeout=LONG)
    refs = [weakref.ref(t), weakref.ref(lmem)]
    del t, lmem
    gc.collect()
    assert [r() is None for r in refs] == [True, True]
    # The lists went with the Prepared: the region can be closed.
    rmem.close()


def build_world():
    """Two contexts and one of each object, all live and used."""
    w = {}
    w["target"] = ferry.Context(progress_thread=True, **TCP)
    w["initiator"] = ferry.Context(progress_thread=True, **TCP)
    w["dst"] = make("numpy", 8192)
    w["tmem"] = w["target"].register(w["dst"])
    w["src"] = make("numpy", 8192)
    w["src"][:] = 9
    w["lmem"] = w["initiator"].register(w["src"])
    w["peer"] = w["initiator"].add_peer(w["target"].address())
    w["rmem"] = w["peer"].import_region(w["tmem"].export())
    w["req"] = w["peer"].write(w["lmem"], w["rmem"], notify=(1, 1))
    w["blocks"] = ferry.Blocks(w["lmem"], 1024, 8)
    w["prep"] = w["peer"].prepare(ferry.WRITE, w["blocks"],
                                  ferry.Blocks(w["rmem"], 1024, 8))
    w["preq"] = w["prep"].post([1], [2], notify=(1, 1))
    w["hub"] = w["target"].metadata("target", "bootstrap://127.0.0.1:0")
    w["hub"].publish("kv", w["tmem"])
    w["member"] = w["initiator"].metadata("initiator", w["hub"].url)
    w["krmem"] = w["member"].lookup("target", "kv", timeout=LONG)
    w["notifications"] = None
    w["req"].wait(timeout=LONG)
    w["preq"].wait(timeout=LONG)
    w["target"].counter_wait(1, 2, timeout=LONG)
    w["notifications"] = w["target"].notify_poll()
    assert bytes(w["dst"]) == b"\x09" * 8192
    return w


NAMES = ["target", "initiator", "dst", "tmem", "src", "lmem", "peer", "rmem",
         "req", "blocks", "prep", "preq", "hub", "member", "krmem",
         "notifications"]


def orders():
    rng = random.Random(20261123)
    out = [
        ("contexts-first", ["target", "initiator"] +
         [n for n in NAMES if n not in ("target", "initiator")]),
        ("creation", list(NAMES)),
        ("reverse", list(reversed(NAMES))),
        ("regions-first", ["tmem", "lmem", "rmem", "krmem", "dst", "src"] +
         [n for n in NAMES if n not in ("tmem", "lmem", "rmem", "krmem",
                                        "dst", "src")]),
    ]
    for i in range(8):
        names = list(NAMES)
        rng.shuffle(names)
        out.append(("random%d" % i, names))
    return out


@pytest.mark.parametrize("close_first", [False, True],
                         ids=["open", "closed"])
@pytest.mark.parametrize("order", [o[1] for o in orders()],
                         ids=[o[0] for o in orders()])
def test_any_deletion_order(order, close_first):
    w = build_world()
    refs = [weakref.ref(w[n]) for n in ("dst", "src", "tmem", "lmem")]
    if close_first:
        w["initiator"].close()
        w["target"].close()
    for name in order:
        del w[name]  # goes now, if nothing else holds it
        gc.collect(0)
    assert w == {}
    gc.collect()
    assert [r() is None for r in refs] == [True] * 4


def test_close_context_while_everything_lives():
    """Context.close() with one of every object alive: each call then
    raises HandleError naming the closed context, close() calls are
    quiet, and nothing crashes when they go."""
    w = build_world()
    # A request that has not ended: its peer is a closed context.
    gone = ferry.Context(**TCP)
    addr, blob = gone.address(), gone.register(bytearray(64)).export()
    gone.close()
    dead = w["initiator"].add_peer(addr)
    pending = dead.write(w["lmem"], dead.import_region(blob), length=64,
                         timeout=LONG)
    w["target"].close()
    w["initiator"].close()
    calls = {
        "Memory.export": w["tmem"].export,
        "Memory.refresh": w["lmem"].refresh,
        "Memory.path": lambda: w["tmem"].path,
        "Peer.import_region": lambda: w["peer"].import_region(b"x"),
        "Peer.write": lambda: w["peer"].write(w["lmem"], w["rmem"]),
        "Peer.read": lambda: w["peer"].read(w["lmem"], w["rmem"]),
        "Peer.notify": lambda: w["peer"].notify(1, 1),
        "Peer.state": w["peer"].state,
        "Peer.watch": w["peer"].watch,
        "Peer.declare_dead": w["peer"].declare_dead,
        "Peer.counter_wait": lambda: w["peer"].counter_wait(1, 1),
        "Peer.prepare": lambda: w["peer"].prepare(ferry.WRITE, w["blocks"],
                                                  w["blocks"]),
        "RemoteMemory.nbytes": lambda: w["rmem"].nbytes,
        "Request.wait": pending.wait,
        "Request.test": pending.test,
        "Request.cancel": pending.cancel,
        "Prepared.post": lambda: w["prep"].post([0], [0]),
        "Prepared.local_count": lambda: w["prep"].local_count,
        "Prepared.remote_count": lambda: w["prep"].remote_count,
        "Meta.publish": lambda: w["hub"].publish("x", w["tmem"]),
        "Meta.withdraw": lambda: w["hub"].withdraw("kv"),
        "Meta.peer": lambda: w["member"].peer("target", timeout=0),
        "Meta.lookup": lambda: w["member"].lookup("target", "kv", timeout=0),
        "Meta.watch": w["hub"].watch,
        "Meta.event": lambda: w["hub"].event(timeout=0),
        "Meta.url": lambda: w["member"].url,
        "Blocks in a new prepare": lambda: w["peer"].prepare(
            ferry.READ, w["blocks"], w["blocks"]),
    }
    for what, call in calls.items():
        with pytest.raises(ferry.HandleError) as e:
            call()
        assert "the Context is closed" in str(e.value), what
        assert e.value.code == -1005
    # What needs no handle still answers.
    assert w["tmem"].nbytes == 8192 and w["tmem"].obj is w["dst"]
    assert w["tmem"].closed and w["rmem"].closed and w["peer"].closed
    assert pending.done is False
    assert isinstance(w["krmem"].peer, ferry.Peer)
    # A request that had ended keeps its outcome.
    w["req"].wait()
    assert w["req"].test() is True
    # close() of each is quiet.
    for obj in ("tmem", "lmem", "rmem", "peer", "prep", "hub", "member",
                "req"):
        w[obj].close()
    pending.close()
    del pending, dead
    for name in list(w):
        del w[name]
    gc.collect()


def test_closed_context_releases_the_meta_hub():
    """Context.close() stops a bootstrap hub, its thread and its port,
    even while its Meta lives on: the next context to open its URL
    becomes the hub, without the closed context's entries."""
    a = ferry.Context(**TCP)
    meta = a.metadata("alpha", "bootstrap://127.0.0.1:0")
    url = meta.url
    a.close()
    with ferry.Context(**TCP) as b:
        m = b.metadata("beta", url)
        assert m.url == url
        with pytest.raises(TimeoutError):
            m.peer("alpha", timeout=0)
        m.close()
    del meta


def test_gc_collects_objects_of_a_closed_context_in_cycles():
    ctx = ferry.Context(**TCP)
    arr = make("numpy", 64)
    arr.mem = ctx.register(arr)
    arr.ctx = ctx
    ref = weakref.ref(arr)
    ctx.close()
    del arr, ctx
    gc.collect()
    assert ref() is None
