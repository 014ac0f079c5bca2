"""The examples (python/examples) and the post bench (python/bench), run as
the user runs them: each in a process of its own, with a deadline.
The examples need torch (skipped without it); the bench, numpy and the C
program bench/post_bench."""
import os
import re
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(PYTHON_DIR)
EXAMPLES = os.path.join(PYTHON_DIR, "examples")
# Any one wait of the two-process examples may take 90 s, not 30: under
# AddressSanitizer on two busy CPUs a side that imports torch once took
# over 30 s to join (decode's wait for prefill timed out).
PATIENT = ["--timeout", "90"]
BENCH = os.path.join(PYTHON_DIR, "bench", "post_bench.py")
TIMEOUT = 120


def run(argv, timeout=TIMEOUT):
    """Runs a script with this interpreter, finding the ferry this test
    imports (built in place, or in the build tree under make check)."""
    import ferry
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__)))] +
        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        r = subprocess.run([sys.executable] + argv, env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%s did not end within %d s; its output so far:\n%s\n%s"
                    % (" ".join(argv), timeout, e.stdout or "",
                       e.stderr or ""))
    return r


def needs(module):
    pytest.importorskip(module, reason="the example needs %s" % module)


def check_ok(r, line):
    out = r.stdout + r.stderr
    assert r.returncode == 0, "exit %d:\n%s" % (r.returncode, out)
    assert re.search(line, r.stdout, re.M), out


def test_kv_disagg():
    needs("torch")
    needs("numpy")
    r = run([os.path.join(EXAMPLES, "kv_disagg.py"), "--blocks", "64",
             "--sequences", "3", "--heads", "2", "--head-dim", "32",
             "--dtype", "bfloat16", "--deadline", "100"] + PATIENT)
    check_ok(r, r"^kv_disagg: OK$")
    assert "decode: sequence 2 complete" in r.stdout, r.stdout
    assert re.search(r"^decode: verified \d+ blocks of 3 sequences and \d+ "
                     r"untouched blocks: OK$", r.stdout, re.M), r.stdout


def test_kv_disagg_refuses_bad_options():
    r = run([os.path.join(EXAMPLES, "kv_disagg.py"), "--blocks", "3",
             "--sequences", "4"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--blocks 3" in r.stderr


def test_weights():
    needs("torch")
    r = run([os.path.join(EXAMPLES, "weights.py"), "--vocab", "512",
             "--dim", "64", "--layers", "2", "--deadline", "100"] + PATIENT)
    check_ok(r, r"^weights: OK \(\d+ tensors, \d+ bytes, [0-9.]+ GB/s warm\)$")


def test_weights_per_tensor():
    needs("torch")
    r = run([os.path.join(EXAMPLES, "weights.py"), "--vocab", "256",
             "--dim", "32", "--layers", "1", "--per-tensor",
             "--deadline", "100"] + PATIENT)
    check_ok(r, r"^weights: OK ")


def c_bench():
    """The C post_bench: this build's under make check, else the
    repository's build-opt/ or build/."""
    builds = [os.environ.get("abs_top_builddir")]
    builds += [os.path.join(REPO, b) for b in ("build-opt", "build")]
    for build in builds:
        if build:
            p = os.path.join(build, "bench", "post_bench")
            if os.path.exists(p):
                return p
    return None


def test_post_bench_line():
    needs("numpy")
    if c_bench() is None:
        pytest.skip("no C post_bench (build-opt/bench/post_bench or "
                    "build/bench/post_bench): make bench/post_bench")
    r = run([BENCH, "--blocks", "64", "--iters", "5", "--warmup", "1",
             "--repeat", "1", "--provider", "shm", "--domain", "",
             "--c-bench", c_bench()])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines()
             if l.startswith("post_bench_compare ")]
    assert len(lines) == 1, r.stdout
    fields = dict(kv.split("=", 1) for kv in lines[0].split()[1:])
    assert fields["blocks"] == "64" and fields["iters"] == "5"
    assert fields["provider"] == "shm"
    for key in ("c_post_p50_us", "py_post_p50_us", "post_ratio",
                "c_round_p50_us", "py_round_p50_us", "round_ratio"):
        assert float(fields[key]) >= 0, (key, lines[0])
    assert fields["verdict"] in ("holds", "missed")


def test_post_bench_twin_alone():
    """The twin prints the C program's line, with lang=python."""
    needs("numpy")
    r = run([BENCH, "--lang", "python", "--blocks", "16", "--iters", "3",
             "--warmup", "0", "--provider", "shm", "--domain", ""])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(r"^post_bench lang=python blocks=16 block_size=4096 "
                    r"iters=3 post_p50_us=[0-9.]+ post_p99_us=[0-9.]+ "
                    r"round_p50_us=[0-9.]+ round_p99_us=[0-9.]+$",
                    r.stdout.strip()), r.stdout
