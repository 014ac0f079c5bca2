"""Context.metrics_text() against the traffic that made it, the
ferry.prometheus collector through prometheus_client (and promtool, when
installed), and the telemetry files of telemetry_dir."""
import os
import re
import shutil
import subprocess
import threading

import pytest

import ferry
import ferrytest
from ferrytest import LONG, TCP

# Sizes of the writes and reads: some below and some above the 4096 and
# 65536 bounds of the size histogram, one striped over several operations.
WRITES = [1000, 4096, 70000, 1 << 20]
READS = [512, 8192, 300000]

_SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)\Z')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def samples(text):
    """[(name, {label: value}, value)] of exposition text, by a parser of
    this test's own (not prometheus_client's: metrics_text must not need
    it, and a test of the collector should not check it against itself).
    Also checks the text's shape: every sample's family announced by HELP
    and TYPE before it, no family twice."""
    out, typed, helped = [], {}, set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert name not in helped, "HELP twice: " + line
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name not in typed, "TYPE twice: " + line
            typed[name] = kind
        elif line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            labels = {}
            if m.group(2):
                rest = m.group(2)
                while rest:
                    lm = _LABEL.match(rest)
                    assert lm, "bad labels in %r" % line
                    labels[lm.group(1)] = lm.group(2).replace(
                        '\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                    rest = rest[lm.end():]
            name = m.group(1)
            base = re.sub(r"_(bucket|sum|count)\Z", "", name)
            family = base if typed.get(base) == "histogram" else name
            assert family in typed and family in helped, \
                "sample before its HELP/TYPE: " + line
            out.append((name, labels, float(m.group(3))))
    return out


def total(parsed, name, **labels):
    """The sum of the samples of name whose labels include labels."""
    return sum(v for n, lab, v in parsed
               if n == name and all(lab.get(k) == w
                                    for k, w in labels.items()))


def count(parsed, name, **labels):
    """How many samples of name have labels among theirs."""
    return sum(1 for n, lab, _ in parsed
               if n == name and all(lab.get(k) == w
                                    for k, w in labels.items()))


def make_traffic(pair):
    """WRITES then READS between the pair, each waited for; returns the
    initiator's peer label."""
    dst = bytearray(2 << 20)
    mem, rmem = pair.expose(dst)
    lmem = pair.initiator.register(bytearray(b"\x3c") * (2 << 20))
    for n in WRITES:
        pair.peer.write(lmem, rmem, length=n).wait(timeout=LONG)
    for n in READS:
        pair.peer.read(lmem, rmem, length=n).wait(timeout=LONG)
    assert dst[:WRITES[-1]] == b"\x3c" * WRITES[-1]
    return pair.peer.info()["label"], mem, rmem, lmem


def test_metrics_text_counts_the_traffic(pair):
    ctx = pair.initiator
    label = pair.peer.info()["label"]
    before = samples(ctx.metrics_text())
    # A live peer has its ok series from the start, at 0.
    assert count(before, "ferry_requests_total", peer=label, op="write",
                 outcome="ok") == 1
    assert total(before, "ferry_requests_total", peer=label) == 0
    assert total(before, "ferry_bytes_total") == 0

    label, mem, rmem, lmem = make_traffic(pair)
    text = ctx.metrics_text()
    assert isinstance(text, str) and text.endswith("\n")
    got = samples(text)

    info = ctx.info()
    assert total(got, "ferry_info", provider=info["provider"],
                 domain=info["domain"], version=ferry.__version__) == 1
    # Bytes: every rail of the peer, per direction, exactly what moved.
    rails = {lab["rail"] for n, lab, _ in got
             if n == "ferry_bytes_total" and lab["peer"] == label}
    assert rails, "no ferry_bytes_total for %s" % label
    assert total(got, "ferry_bytes_total", peer=label, op="write") == \
        sum(WRITES)
    assert total(got, "ferry_bytes_total", peer=label, op="read") == \
        sum(READS)
    assert total(got, "ferry_operations_total", peer=label, op="write") >= \
        len(WRITES)
    assert total(got, "ferry_operations_total", peer=label, op="read") >= \
        len(READS)
    # Requests, by outcome: all ok.
    assert total(got, "ferry_requests_total", peer=label, op="write",
                 outcome="ok") == len(WRITES)
    assert total(got, "ferry_requests_total", peer=label, op="read",
                 outcome="ok") == len(READS)
    assert total(got, "ferry_requests_total", op="notify") == 0
    assert count(got, "ferry_requests_total") == count(
        got, "ferry_requests_total", outcome="ok")
    assert total(got, "ferry_requests_in_flight") == 0
    # Histograms: one count per request; sizes summed; buckets cumulative.
    for op, sizes in (("write", WRITES), ("read", READS)):
        assert total(got, "ferry_request_duration_seconds_count",
                     op=op) == len(sizes)
        assert total(got, "ferry_request_duration_seconds_bucket", op=op,
                     le="+Inf") == len(sizes)
        assert total(got, "ferry_request_duration_seconds_sum", op=op) > 0
        assert total(got, "ferry_request_size_bytes_count",
                     op=op) == len(sizes)
        assert total(got, "ferry_request_size_bytes_sum", op=op) == \
            sum(sizes)
        for le in (4096, 65536):
            assert total(got, "ferry_request_size_bytes_bucket", op=op,
                         le=str(le)) == sum(1 for n in sizes if n <= le), le
    assert total(got, "ferry_peer_up", peer=label) == 1
    assert total(got, "ferry_peer_state_changes_total", peer=label,
                 state="up") >= 1

    # A failing request: through the key of a region its owner
    # deregistered, it ends with StaleError, counted under "stale".
    mem.close()
    with pytest.raises(ferry.StaleError):
        pair.peer.write(lmem, rmem, length=4096).wait(timeout=LONG)
    got = samples(ctx.metrics_text())
    assert total(got, "ferry_requests_total", peer=label, op="write",
                 outcome="stale") == 1
    assert total(got, "ferry_requests_total", peer=label, op="write",
                 outcome="ok") == len(WRITES)
    assert total(got, "ferry_request_duration_seconds_count",
                 op="write") == len(WRITES) + 1
    assert total(got, "ferry_requests_in_flight") == 0


def test_in_flight_and_cancelled():
    """A request to a peer that never answers is in flight until it is
    cancelled, then counted as canceled."""
    ctx, peer, rmem, mem = ferrytest.dead_region(liveness_ms=0)
    with ctx:
        label = peer.info()["label"]
        req = peer.write(mem, rmem, timeout=LONG)
        # The gauge is what the last progress pass counted (lib/progress:
        # req.running); no progress thread here, so drive one.
        ctx.progress()
        got = samples(ctx.metrics_text())
        assert total(got, "ferry_requests_in_flight") == 1
        assert total(got, "ferry_requests_total", peer=label) == 0
        req.cancel()
        with pytest.raises(ferry.CanceledError):
            req.wait(timeout=LONG)
        ctx.progress()
        got = samples(ctx.metrics_text())
        assert total(got, "ferry_requests_in_flight") == 0
        assert total(got, "ferry_requests_total", peer=label, op="write",
                     outcome="canceled") == 1
        assert total(got, "ferry_requests_total", peer=label,
                     outcome="ok") == 0


def test_metrics_text_grows_with_the_peers():
    """A call sized by the last one (PyfContext.metrics_len) that the text
    has outgrown since is made again, larger: never NoSpaceError."""
    # Peers of 24 addresses (two handles of one address are one series),
    # held open meanwhile so that no port is given twice.
    others = [ferry.Context(**TCP) for _ in range(24)]
    addrs = [o.address() for o in others]
    for o in others:
        o.close()
    with ferry.Context(**TCP) as ctx:
        small = ctx.metrics_text()
        peers = [ctx.add_peer(addr) for addr in addrs]
        label = peers[0].info()["label"]
        big = ctx.metrics_text()
        # Beyond the last size and the room context.c adds to it.
        assert len(big) > len(small) + 2 * 4096
        got = samples(big)
        assert count(got, "ferry_peer_up", peer=label) == 1
        assert count(got, "ferry_peer_up") == 24
        # Whole: the last family is there.
        assert "\n# TYPE ferry_fanout_receivers_total counter\n" in big
        assert samples(ctx.metrics_text()) == got
        for p in peers:
            p.close()


def test_metrics_text_from_threads(tcp_pair):
    """Scrapes in other threads (the GIL released) while requests run:
    each text whole, the counts only ever growing, the last one exact."""
    dst = bytearray(1 << 16)
    mem, rmem = tcp_pair.expose(dst)
    lmem = tcp_pair.initiator.register(bytearray(1 << 16))
    label = tcp_pair.peer.info()["label"]
    seen, errors, stop = ([], []), [], threading.Event()

    def scrape_loop(mine):
        try:
            while not stop.is_set():
                got = samples(tcp_pair.initiator.metrics_text())
                mine.append(total(got, "ferry_bytes_total", peer=label))
        except BaseException as e:  # noqa: B902 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=scrape_loop, args=(mine,))
               for mine in seen]
    for t in threads:
        t.start()
    try:
        for _ in range(50):
            tcp_pair.peer.write(lmem, rmem, length=1 << 16).wait(
                timeout=LONG)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    for mine in seen:
        assert mine and mine == sorted(mine)
        assert mine[-1] <= 50 << 16
    assert total(samples(tcp_pair.initiator.metrics_text()),
                 "ferry_bytes_total", peer=label) == 50 << 16


def test_metrics_text_closed_context():
    ctx = ferry.Context(**TCP)
    ctx.close()
    with pytest.raises(ferry.HandleError, match="the Context is closed"):
        ctx.metrics_text()


# ---- ferry.prometheus ----------------------------------------------------

def prometheus():
    return pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed "
        "(Debian: python3-prometheus-client; pip: prometheus-client)")


def scrape(*collectors):
    """generate_latest of a fresh registry holding the collectors: the
    text, and its samples as the test's parser reads them."""
    pc = prometheus()
    registry = pc.CollectorRegistry()
    for c in collectors:
        registry.register(c)
    text = pc.generate_latest(registry).decode()
    return text, samples(text)


def families(text):
    """{family name: type} of the TYPE lines."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def promtool_check(text):
    """promtool check metrics on text, when promtool is installed."""
    promtool = shutil.which("promtool") or (
        "/usr/bin/promtool" if os.path.exists("/usr/bin/promtool") else None)
    if promtool is None:
        return
    proc = subprocess.run([promtool, "check", "metrics"], input=text,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_collector_renders_what_metrics_text_says(tcp_pair):
    prometheus()
    from ferry.prometheus import FerryCollector
    label, *_ = make_traffic(tcp_pair)
    ctx = tcp_pair.initiator
    collector = FerryCollector(ctx, labels={"role": "decode"})
    text, got = scrape(collector)
    raw = ctx.metrics_text()
    # Every family under the name and type ferry gave it: counters keep
    # their _total, though the parser drops it from the family's name.
    assert families(text) == families(raw)
    assert "# TYPE ferry_bytes_total counter" in text
    assert all(lab.get("role") == "decode" for _, lab, _ in got)
    assert "context" not in {k for _, lab, _ in got for k in lab}
    assert total(got, "ferry_bytes_total", peer=label, op="write",
                 role="decode") == sum(WRITES)
    assert total(got, "ferry_bytes_total", peer=label, op="read") == \
        sum(READS)
    assert total(got, "ferry_requests_total", peer=label, op="write",
                 outcome="ok") == len(WRITES)
    assert total(got, "ferry_request_duration_seconds_count",
                 op="write") == len(WRITES)
    assert total(got, "ferry_request_size_bytes_sum", op="read") == \
        sum(READS)
    assert total(got, "ferry_requests_in_flight") == 0
    # Sample for sample, the same as metrics_text: nothing moved since
    # (heartbeats may have: liveness sends them on its own).
    want = sorted((n, sorted(dict(lab, role="decode").items()), v)
                  for n, lab, v in samples(raw)
                  if n != "ferry_heartbeats_total")
    have = sorted((n, sorted(lab.items()), v) for n, lab, v in got
                  if n != "ferry_heartbeats_total")
    assert have == want
    # prometheus_client's own parser reads it back the same.
    from prometheus_client.parser import text_string_to_metric_families
    back = {f.name: f for f in text_string_to_metric_families(text)}
    assert back["ferry_bytes"].type == "counter"
    assert sum(s.value for s in back["ferry_bytes"].samples
               if s.labels["op"] == "write") == sum(WRITES)
    promtool_check(text)
    promtool_check(raw)


def test_collector_of_two_contexts(tcp_pair):
    prometheus()
    from ferry.prometheus import FerryCollector
    label, *_ = make_traffic(tcp_pair)
    collector = FerryCollector(tcp_pair.initiator, tcp_pair.target,
                               labels={"job_part": 3})
    text, got = scrape(collector)
    # One family per name, merged: TYPE once each (samples() checks).
    assert families(text) == families(tcp_pair.initiator.metrics_text())
    assert {lab.get("context") for _, lab, _ in got} == {"0", "1"}
    assert all(lab["job_part"] == "3" for _, lab, _ in got)
    assert count(got, "ferry_info", context="0") == 1
    assert count(got, "ferry_info", context="1") == 1
    assert total(got, "ferry_bytes_total", context="0", peer=label,
                 op="write") == sum(WRITES)
    # The target moved nothing itself: its peers (none) have no bytes.
    assert total(got, "ferry_bytes_total", context="1") == 0
    assert total(got, "ferry_requests_in_flight", context="1") == 0
    assert total(got, "ferry_request_size_bytes_count", context="0",
                 op="write") == len(WRITES)
    promtool_check(text)
    # A context closed since is left out; the other still scraped.
    tcp_pair.target.close()
    text, got = scrape(collector)
    assert {lab.get("context") for _, lab, _ in got} == {"0"}
    assert total(got, "ferry_bytes_total", peer=label, op="write") == \
        sum(WRITES)


def test_collector_name_clashes_refused(tcp_pair):
    pc = prometheus()
    from ferry.prometheus import FerryCollector
    ctx = tcp_pair.initiator
    # describe() names the families: the registry refuses a second
    # collector of the same names.
    registry = pc.CollectorRegistry()
    registry.register(FerryCollector(ctx))
    with pytest.raises(ValueError, match="Duplicated"):
        registry.register(FerryCollector(ctx))
    # A constant label that is also ferry's: refused at registration.
    with pytest.raises(ValueError, match="peer"):
        pc.CollectorRegistry().register(
            FerryCollector(ctx, labels={"peer": "x"}))
    for bad in ({"le": "1"}, {"quantile": "1"}, {"__x": "1"},
                {"1a": "1"}, {"a-b": "1"}):
        with pytest.raises(ValueError):
            FerryCollector(ctx, labels=bad)
    # context: the collector's own with several contexts, free with one.
    with pytest.raises(ValueError, match="context"):
        FerryCollector(ctx, tcp_pair.target, labels={"context": "a"})
    _, got = scrape(FerryCollector(ctx, labels={"context": "a"}))
    assert {lab["context"] for _, lab, _ in got} == {"a"}
    with pytest.raises(TypeError):
        FerryCollector()
    with pytest.raises(TypeError, match="metrics_text"):
        FerryCollector(object())


def test_served_over_http():
    """docs/python.md's example, in a process of its own (the default
    registry, its own collectors beside ferry's, an HTTP server)."""
    prometheus()
    out = ferrytest.run_python("""
        import urllib.request
        import ferry, ferry.prometheus
        from prometheus_client import REGISTRY, start_http_server

        ctx = ferry.Context(provider="tcp;ofi_rxm", domain="lo",
                            progress_thread=True)
        REGISTRY.register(ferry.prometheus.FerryCollector(
            ctx, labels={"role": "decode"}))
        start_http_server(%d, addr="127.0.0.1")
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics",
                                    timeout=30) as r:
            print(r.read().decode())
        ctx.close()
    """ % ((ferrytest.free_port(),) * 2))
    got = samples(out)
    assert total(got, "ferry_info", role="decode",
                 provider="tcp;ofi_rxm") == 1
    # One series per peer: this context has none yet.
    assert "\n# TYPE ferry_requests_in_flight gauge\n" in out
    assert "\n# TYPE ferry_bytes_total counter\n" in out
    promtool_check(out)


def test_prometheus_client_needed_only_by_ferry_prometheus():
    """import ferry never imports prometheus_client; without it,
    ferry.prometheus says which package to install."""
    out = ferrytest.run_python("""
        import sys
        import ferry
        assert "prometheus_client" not in sys.modules
        ctx = ferry.Context(provider="shm")
        assert ctx.metrics_text().startswith("# HELP ferry_info ")
        ctx.close()
        sys.modules["prometheus_client"] = None  # as if not installed
        try:
            import ferry.prometheus
        except ImportError as e:
            print(e)
        else:
            raise SystemExit("ferry.prometheus imported")
    """)
    for words in ("python3-prometheus-client", "pip install "
                  "prometheus-client"):
        assert words in out, out


# ---- telemetry_dir --------------------------------------------------------

def test_telemetry_file(tmp_path):
    d = tmp_path / "telemetry"  # made by the context
    ctx = ferry.Context(telemetry_dir=str(d), telemetry_interval_ms=200,
                        progress_thread=True, **TCP)
    try:
        def found():
            return [n for n in os.listdir(d) if n.endswith(".prom")] \
                if d.exists() else []
        ferrytest.wait_until(lambda: found(), timeout=2.0,
                             what="a telemetry file")
        names = found()
        assert len(names) == 1, names
        m = re.match(r"ferry-(\d+)-(\d+)\.prom\Z", names[0])
        assert m, names
        assert int(m.group(1)) == os.getpid()
        path = d / names[0]
        text = path.read_text()
        header = text.split("\n# HELP", 1)[0].splitlines()
        assert header[0] == "# ferry telemetry 1"
        assert "# pid %d" % os.getpid() in header
        assert "# context %s" % m.group(2) in header
        got = samples(text)
        assert total(got, "ferry_info", provider="tcp;ofi_rxm") == 1
        # Written again every interval: traffic shows up in the file.
        peer = ctx.add_peer(ctx.address())
        mem = ctx.register(bytearray(8192))
        rmem = peer.import_region(mem.export())
        peer.write(ctx.register(bytearray(b"\x01") * 8192), rmem,
                   length=5000).wait(timeout=LONG)
        ferrytest.wait_until(
            lambda: total(samples(path.read_text()), "ferry_bytes_total",
                          op="write") == 5000,
            timeout=LONG, what="the write in the telemetry file")
        # A second context: a file of its own, numbered apart.
        with ferry.Context(telemetry_dir=str(d), **TCP):
            ferrytest.wait_until(lambda: len(found()) == 2, timeout=2.0,
                                 what="the second context's file")
        assert found() == names
    finally:
        ctx.close()
    # Closed: its file is gone, and no temporary is left behind.
    assert os.listdir(d) == []


def test_telemetry_refusals(tmp_path):
    with pytest.raises(ferry.InvalidArgumentError, match="100 ms"):
        ferry.Context(telemetry_dir=str(tmp_path), telemetry_interval_ms=50,
                      **TCP)
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(ferry.InvalidArgumentError, match="telemetry_dir"):
        ferry.Context(telemetry_dir=str(afile), **TCP)
    assert os.listdir(tmp_path) == ["file"]
