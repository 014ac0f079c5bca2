"""Helpers of ferry's Python tests: providers, context pairs, parsers of
ferry's headers, free ports, subprocesses, and the entry points of the
child processes that test_processes.py spawns (they must be importable
by name, which a test module is not in a spawned child).

Providers: tcp;ofi_rxm on the loopback domain "lo" and shm both work
with two contexts in one process; a context that is only a target needs
a progress thread (docs/semantics.md)."""
import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import ferry

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FERRY_H = os.path.join(ROOT, "include", "ferry", "core.h")
ERRNO_H = os.path.join(ROOT, "include", "ferry", "errno.h")

TCP = {"provider": "tcp;ofi_rxm", "domain": "lo"}
SHM = {"provider": "shm"}
PROVIDERS = {"tcp": TCP, "shm": SHM}

# Waits that only end early when something is wrong: generous, so that a
# loaded machine does not fail a test.
LONG = 30.0


class Pair:
    """A target context (progress thread on) and an initiator context, and
    the initiator's Peer of the target."""

    def __init__(self, provider=TCP, target=None, initiator=None):
        self.target = ferry.Context(progress_thread=True,
                                    **provider, **(target or {}))
        self.initiator = ferry.Context(**provider, **(initiator or {}))
        self.peer = self.initiator.add_peer(self.target.address())

    def expose(self, obj, access=ferry.REMOTE_READ | ferry.REMOTE_WRITE):
        """Registers obj on the target; returns (Memory, RemoteMemory)."""
        mem = self.target.register(obj, access=access)
        return mem, self.peer.import_region(mem.export())

    def close(self):
        self.initiator.close()
        self.target.close()


def config_fields():
    """The fields of struct ferry_config, from include/ferry/core.h."""
    text = open(FERRY_H).read()
    body = re.search(r"struct ferry_config \{(.*?)\n\};", text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for decl in body.split(";"):
        decl = decl.strip()
        if decl:
            # "size_t mr_key_size" or "const char *provider", one per line
            fields.append(re.search(r"(\w+)\s*$", decl).group(1))
    return fields


def errno_table():
    """[(NAME, value, Kind, text)] from include/ferry/errno.h's X table."""
    text = open(ERRNO_H).read().replace("\\\n", " ")
    base = int(re.search(r"#define FERRY__OWN_ERRNO_BASE (\d+)",
                         text).group(1))
    import errno
    names = dict(vars(errno), FERRY__OWN_ERRNO_BASE=base)
    rows = []
    for m in re.finditer(r'X\((\w+),\s*([^,]+?),\s*(\w+),\s*"([^"]*)"\)',
                         text):
        value = eval(m.group(2), {"__builtins__": {}}, names)
        rows.append((m.group(1), value, m.group(3), m.group(4)))
    return rows


def free_port():
    """A TCP port free on the loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_env(**extra):
    """The environment of a child Python that must import ferry and these
    helpers as this process does, with extra added (None: removed)."""
    env = dict(os.environ)
    paths = [os.path.dirname(os.path.dirname(ferry.__file__)), HERE]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_python(code, timeout=120, **env):
    """Runs code in a fresh Python with env added to the environment;
    fails the test with its output unless it exits 0.  Returns stdout."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=python_env(**env), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (
        "child exited %d\n--- stdout\n%s\n--- stderr\n%s"
        % (proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout


def wait_until(cond, timeout=LONG, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("%s not met within %s s" % (what, timeout))
        time.sleep(0.01)


def busy_close(close, what):
    """Calls close() until it raises ferry.BusyError (another thread's wait
    may not have released the GIL yet), and returns that error."""
    out = {}

    def refused():
        try:
            close()
        except ferry.BusyError as e:
            out["busy"] = e
            return True
        return False
    wait_until(refused, what=what)
    return out["busy"]


def dead_region(**cfg):
    """A context whose peer (a closed context) never answers, its Peer and
    a RemoteMemory there, and a local Memory: requests stay in flight."""
    gone = ferry.Context(**TCP)
    addr, blob = gone.address(), gone.register(bytearray(4096)).export()
    # Opened before gone closes, so that it cannot be given gone's port:
    # its peer would then be itself, and answer.
    ctx = ferry.Context(**TCP, **cfg)
    gone.close()
    peer = ctx.add_peer(addr)
    return ctx, peer, peer.import_region(blob), ctx.register(bytearray(4096))


class DLPackOnly:
    """Only DLPack: no buffer protocol, not a tensor."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__()

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


# ---- buffers of each kind ------------------------------------------------

def make_buffer(kind, nbytes, fill):
    """A buffer of kind ("bytearray", "numpy", "torch") of nbytes bytes,
    every byte fill."""
    if kind == "bytearray":
        return bytearray([fill]) * nbytes
    if kind == "numpy":
        import numpy as np
        return np.full(nbytes, fill, dtype=np.uint8)
    if kind == "torch":  # of int32: 4-byte elements
        import numpy as np
        import torch
        return torch.from_numpy(
            np.full(nbytes, fill, dtype=np.uint8).view(np.int32)).clone()
    raise ValueError(kind)


def buffer_bytes(buf):
    """The bytes of a buffer made by make_buffer."""
    if hasattr(buf, "numpy") and hasattr(buf, "data_ptr"):  # torch
        return buf.numpy().tobytes()
    return bytes(memoryview(buf).cast("B"))


# ---- child processes (multiprocessing, spawn) ----------------------------

def child_target(conn, provider, kind, nbytes):
    """A target: registers a buffer of kind filled with 0xC1, sends its
    address and key blob, waits for the parent's notification (id 1),
    sends back its buffer's bytes, waits for "bye"."""
    with ferry.Context(progress_thread=True, **provider) as ctx:
        buf = make_buffer(kind, nbytes, 0xC1)
        mem = ctx.register(buf)
        conn.send((ctx.address(), mem.export(), mem.nbytes))
        ctx.counter_wait(1, 1, timeout=LONG)
        conn.send(buffer_bytes(buf))
        assert conn.recv() == "bye"
        mem.close()


def child_bootstrap(conn, token):
    """A bootstrap hub, "child", on a free port: publishes "kv" (0xB0) for
    the parent to write into, sends the hub's URL, reads the region
    "client" the parent ("parent") published, writes 2048 bytes of 0xB1
    into it with notification (5, 1), waits for the parent's (6, 1) and
    reports what it read and kv."""
    with ferry.Context(progress_thread=True, oob_token=token, **TCP) as ctx:
        kv = bytearray(b"\xb0") * 4096
        mem = ctx.register(kv)
        out = ctx.register(bytearray(b"\xb1") * 2048)
        got = bytearray(4096)
        local = ctx.register(got)
        meta = ctx.metadata("child", "bootstrap://127.0.0.1:0")
        meta.publish("kv", mem)
        conn.send(meta.url)
        offered = meta.lookup("parent", "client", timeout=LONG)
        offered.peer.read(local, offered).wait(timeout=LONG)
        offered.peer.write(out, offered, notify=(5, 1)).wait(timeout=LONG)
        # What the parent wrote into kv arrives before its notification.
        ctx.counter_wait(6, 1, timeout=LONG)
        conn.send((bytes(got), bytes(kv)))
        assert conn.recv() == "bye"
        meta.close()


def child_replacer(conn, provider, nbytes):
    """A target whose region is replaced on request: registers nbytes,
    sends (address, key blob); on "replace" deregisters it and sends the
    blob of a new zeroed region in its place; on "bytes" sends the new
    region's bytes; returns on "bye"."""
    with ferry.Context(progress_thread=True, **provider) as ctx:
        mem = ctx.register(bytearray(nbytes))
        conn.send((ctx.address(), mem.export()))
        assert conn.recv() == "replace"
        mem.close()
        buf = bytearray(nbytes)
        mem = ctx.register(buf)
        conn.send(mem.export())
        while True:
            what = conn.recv()
            if what == "bye":
                break
            assert what == "bytes"
            ctx.progress()  # orders the landing before the look
            conn.send(bytes(buf))
        mem.close()


def child_sleeper(conn, provider, initiator):
    """Registers a region, sends (address, blob); if initiator, also adds
    the parent (address received) and notifies it once; then sleeps until
    killed."""
    ctx = ferry.Context(progress_thread=True, **provider)
    buf = bytearray(4096)
    mem = ctx.register(buf)
    conn.send((ctx.address(), mem.export()))
    if initiator:
        peer = ctx.add_peer(conn.recv())
        peer.notify(3, 1).wait(timeout=LONG)
        conn.send("notified")
    time.sleep(3600)
