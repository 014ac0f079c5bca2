"""ferry.Context: every ferry_config field a keyword, what a context says
about itself, counters, closing."""
import threading
import time

import pytest

import ferry
import ferrytest
from ferrytest import TCP

# A plausible value for every field of struct ferry_config, each accepted
# by a context on tcp;ofi_rxm over lo (the provider and domain come from
# TCP unless the field is one of them).
PLAUSIBLE = {
    "provider": "tcp;ofi_rxm",
    "domain": "lo",
    "max_rails": 1,
    "local_only": True,
    "mr_mode_offer": 0x7f,  # FERRY_MR_ALL
    "mr_mode_force": 1,     # FERRY_MR_LOCAL
    "mr_key_size": 8,
    "max_msg_size": 256 << 10,
    "tx_depth": 32,
    "timeout_ms": 5000,
    "progress_thread": True,
    "oob_token": "a secret",
    "registration_cache": False,
    "rcache_max_entries": 100,
    "rcache_max_bytes": 1 << 30,
    "cuda_device": -1,
    "topology_xml": None,
    "notify_queue_max": 1000,
    "stripe_threshold": 64 << 10,
    "staging_buffers": 4,
    "staging_chunk": 256 << 10,
    "peer_host": "127.0.0.1",
    "liveness_ms": 1000,
    "oob_insecure": True,
    "metadata": "bootstrap://127.0.0.1:1",
    "metadata_ttl_s": 5,
    "metadata_timeout_ms": 1000,
    "endpoints_per_domain": 2,
    "shm_peers": 1,
    "telemetry_dir": "TMP",  # the test's own directory (tmp_path)
    "telemetry_interval_ms": 200,
}


def test_config_fields_match_the_header():
    fields = ferrytest.config_fields()
    assert fields[0] == "size"
    assert list(ferry.CONFIG_FIELDS) == fields[1:]
    assert set(PLAUSIBLE) == set(fields[1:])


@pytest.mark.parametrize("field", ferrytest.config_fields()[1:])
def test_every_config_field_is_a_keyword(field, tmp_path):
    cfg = dict(TCP)
    cfg[field] = PLAUSIBLE[field]
    if cfg[field] == "TMP":
        cfg[field] = str(tmp_path)
    with ferry.Context(**cfg) as ctx:
        assert ctx.info()["provider"] == "tcp;ofi_rxm"
        # Each context works with the field set: a write to itself.
        buf = bytearray(4096)
        mem = ctx.register(buf)
        src = ctx.register(bytearray(b"\x5a") * 4096)
        peer = ctx.add_peer(ctx.address())
        rmem = peer.import_region(mem.export())
        peer.write(src, rmem).wait(timeout=ferrytest.LONG)
        assert buf == bytearray(b"\x5a") * 4096


def test_config_fields_take_effect():
    # max_msg_size caps one operation: a 1 MiB write goes as 16 of 64 KiB,
    # and still arrives whole.
    with ferry.Context(max_msg_size=64 << 10, **TCP) as ctx:
        buf = bytearray(1 << 20)
        mem = ctx.register(buf)
        src = bytes(range(256)) * 4096
        peer = ctx.add_peer(ctx.address())
        peer.write(ctx.register(src, access=ferry.REMOTE_READ),
                   peer.import_region(mem.export())).wait(
                       timeout=ferrytest.LONG)
        assert buf == src
    # timeout_ms is a request's default deadline (liveness off, so that
    # only the deadline can end it).
    ctx, peer, rmem, mem = ferrytest.dead_region(timeout_ms=300,
                                                 liveness_ms=0)
    with ctx:
        req = peer.write(mem, rmem)
        start = time.monotonic()
        with pytest.raises(ferry.TimeoutError) as e:
            req.wait(timeout=ferrytest.LONG)
        assert time.monotonic() - start < ferrytest.LONG / 2
        assert e.value.name == "ETIMEDOUT"
        assert "deadline passed" in str(e.value)


def test_unknown_keyword_names_every_field():
    with pytest.raises(TypeError) as e:
        ferry.Context(provder="tcp")
    msg = str(e.value)
    assert "'provder'" in msg
    for field in ferry.CONFIG_FIELDS:
        assert field in msg


def test_keywords_only():
    with pytest.raises(TypeError, match="keywords only"):
        ferry.Context("tcp;ofi_rxm")


@pytest.mark.parametrize("kwargs,exc,words", [
    ({"provider": 5}, TypeError, "provider must be a str or None"),
    ({"max_rails": "1"}, TypeError, "max_rails must be a non-negative int"),
    ({"timeout_ms": 1.5}, TypeError, "timeout_ms must be an int"),
    ({"max_rails": -1}, OverflowError, "max_rails=-1 is out of range"),
    ({"liveness_ms": 1 << 32}, OverflowError, "out of range"),
    ({"timeout_ms": 1 << 31}, OverflowError, "out of range"),
    ({"max_msg_size": 1 << 64}, OverflowError, "out of range"),
    ({"provider": "tcp\0"}, ValueError, "NUL"),
])
def test_bad_field_values(kwargs, exc, words):
    with pytest.raises(exc) as e:
        ferry.Context(**kwargs)
    assert words in str(e.value)


def test_no_provider_error_lists_candidates():
    with pytest.raises(ferry.NoProviderError) as e:
        ferry.Context(provider="nonexistent")
    assert e.value.name == "ENOPROVIDER"
    assert "nonexistent" in str(e.value)
    assert "tcp" in str(e.value)  # the providers libfabric has


def test_malformed_environment_variable(monkeypatch):
    monkeypatch.setenv("FERRY_LIVENESS_MS", "soon")
    with pytest.raises(ferry.InvalidArgumentError) as e:
        ferry.Context(**TCP)
    assert "FERRY_LIVENESS_MS=soon" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_environment_defaults_and_keyword_override(monkeypatch):
    monkeypatch.setenv("FERRY_PROVIDER", "nonexistent")
    with pytest.raises(ferry.NoProviderError):
        ferry.Context()
    with ferry.Context(**TCP) as ctx:  # the keyword wins
        assert ctx.info()["provider"] == "tcp;ofi_rxm"


@pytest.mark.parametrize("name", sorted(ferrytest.PROVIDERS))
def test_info_address_stats_progress(name):
    with ferry.Context(**ferrytest.PROVIDERS[name]) as ctx:
        info = ctx.info()
        assert set(info) == {"provider", "fabric", "domain", "rails",
                             "mr_mode", "why", "device_path",
                             "local_provider", "local_why"}
        # A named provider serves every peer: no shm beside it.
        assert info["local_provider"] is None
        assert "the provider was named" in info["local_why"] or \
            info["provider"] == "shm"
        assert info["provider"] == ferrytest.PROVIDERS[name]["provider"]
        # The sentence that says why: the provider and domain chosen.
        assert info["why"].startswith("chose %s on domain %s" % (
            info["provider"], info["domain"]))
        # shm opens two endpoints on its one domain (ferry.h says why).
        assert info["rails"] == (2 if name == "shm" else 1)
        assert info["domain"] == ferrytest.PROVIDERS[name].get("domain",
                                                              info["domain"])
        addr = ctx.address()
        assert isinstance(addr, bytes) and len(addr) > 16
        assert ctx.address() == addr
        stats = ctx.stats()
        assert len(stats["bytes_posted"]) == 8
        assert len(stats["rma_ops_posted"]) == 8
        assert set(stats) >= {"rcache_hits", "notifications_received",
                              "staged_bytes", "heartbeats", "peers_declared"}
        assert all(v == 0 for k, v in stats.items() if k != "bytes_posted"
                   and k.startswith("notifications"))
        assert ctx.progress() >= 0
        assert ctx.closed is False
    assert ctx.closed is True


def test_stats_count_bytes(tcp_pair):
    mem, rmem = tcp_pair.expose(bytearray(3000))
    before = tcp_pair.initiator.stats()
    src = tcp_pair.initiator.register(bytearray(3000))
    # Three pieces contiguous on both sides go as one write.
    tcp_pair.peer.write([(src, 0, 0, 1000), (src, 1000, 1000, 1000),
                         (src, 2000, 2000, 1000)],
                        rmem).wait(timeout=ferrytest.LONG)
    after = tcp_pair.initiator.stats()
    assert after["bytes_posted"][0] == before["bytes_posted"][0] + 3000
    assert after["rma_ops_posted"][0] == before["rma_ops_posted"][0] + 1


def test_counters(tcp_pair):
    tgt = tcp_pair.target
    assert tgt.counter_get(11) == 0
    for _ in range(3):
        tcp_pair.peer.notify(11, 5).wait(timeout=ferrytest.LONG)
    tgt.counter_wait(11, 15, timeout=ferrytest.LONG)
    assert tgt.counter_get(11) == 15
    tgt.counter_reset(11)
    assert tgt.counter_get(11) == 0
    with pytest.raises(ferry.TimeoutError) as e:
        tgt.counter_wait(11, 1, timeout=0.05)
    assert "counter 11 reached 0 of 1" in str(e.value)
    # ids and values are unsigned 64-bit; ids from 0xfe << 56 up are
    # ferry's own (the fan-out's).
    top = (0xFE << 56) - 1
    tcp_pair.peer.notify(top, 2**64 - 1).wait(timeout=ferrytest.LONG)
    tgt.counter_wait(top, 2**64 - 1, timeout=ferrytest.LONG)
    with pytest.raises(ferry.InvalidArgumentError) as e:
        tcp_pair.peer.notify(top + 1, 1)
    assert "one of ferry's own" in str(e.value)
    with pytest.raises(OverflowError):
        tgt.counter_get(-1)
    with pytest.raises(TypeError):
        tgt.counter_reset("11")


def test_notify_poll(tcp_pair):
    for value in (1, 2, 3):
        tcp_pair.peer.notify(21, value).wait(timeout=ferrytest.LONG)
    tcp_pair.target.counter_wait(21, 6, timeout=ferrytest.LONG)
    first = tcp_pair.target.notify_poll(max=2)
    rest = tcp_pair.target.notify_poll()
    got = first + rest
    assert [(n.kind, n.id, n.value) for n in got] == [
        ("data", 21, 1), ("data", 21, 2), ("data", 21, 3)]
    assert len(first) == 2
    assert got[0].peer is None  # only peer_down events name a peer
    assert isinstance(got[0], ferry.Notification)
    assert tcp_pair.target.notify_poll() == []
    for bad in (0, -1, (1 << 20) + 1):
        with pytest.raises(ferry.InvalidArgumentError):
            tcp_pair.target.notify_poll(max=bad)


def test_notify_wait(tcp_pair):
    tgt = tcp_pair.target
    started = time.monotonic()
    assert tgt.notify_wait(timeout=0.2) == []
    assert time.monotonic() - started >= 0.2

    def send_later():
        time.sleep(0.15)
        for value in (1, 2):
            tcp_pair.peer.notify(22, value).wait(timeout=ferrytest.LONG)

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    got = []
    while len(got) < 2:
        # No limit: it returns only once something arrived, and the
        # sender's thread runs meanwhile (the wait holds no GIL).
        got += tgt.notify_wait(max=1)
    sender.join()
    assert time.monotonic() - started >= 0.14
    assert [(n.kind, n.id, n.value) for n in got] == [
        ("data", 22, 1), ("data", 22, 2)]
    for bad in (0, (1 << 20) + 1):
        with pytest.raises(ferry.InvalidArgumentError):
            tgt.notify_wait(max=bad)
    with pytest.raises(ferry.InvalidArgumentError):
        tgt.notify_wait(timeout=-1)


def test_close_is_idempotent_and_final():
    ctx = ferry.Context(**TCP)
    ctx.close()
    ctx.close()
    assert ctx.closed
    for call in (ctx.address, ctx.info, ctx.stats, ctx.metrics_text,
                 ctx.progress,
                 lambda: ctx.add_peer(b"x" * 32),
                 lambda: ctx.register(bytearray(8)),
                 lambda: ctx.metadata("x", "bootstrap://127.0.0.1:1"),
                 lambda: ctx.counter_get(1),
                 lambda: ctx.counter_wait(1, 1, timeout=0),
                 lambda: ctx.counter_reset(1),
                 ctx.notify_poll, ctx.notify_wait):
        with pytest.raises(ferry.HandleError) as e:
            call()
        assert "the Context is closed" in str(e.value)
        assert e.value.name == "EHANDLE"


def test_context_manager_closes_on_error():
    with pytest.raises(RuntimeError):
        with ferry.Context(**TCP) as ctx:
            raise RuntimeError("boom")
    assert ctx.closed
