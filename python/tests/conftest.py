"""Fixtures of ferry's Python tests.

make check runs them (test/python.sh).  By hand, with the module built
in place:

    cd python && FERRY_INCLUDE_DIR=../include \\
        FERRY_LIB_DIR=../build/lib/.libs python3 setup.py build_ext -i
    cd .. && PYTHONPATH=python python3 -m pytest -q python/tests

The helpers live in ferrytest.py, which child processes import too."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
try:
    import ferry  # noqa: F401
except ImportError:
    # Not installed: the package beside the tests, built in place.
    sys.path.insert(0, os.path.dirname(HERE))
    import ferry  # noqa: F401

import ferrytest  # noqa: E402


@pytest.fixture
def tcp_pair():
    pair = ferrytest.Pair(ferrytest.TCP)
    yield pair
    pair.close()


@pytest.fixture(params=sorted(ferrytest.PROVIDERS))
def pair(request):
    """A Pair on each provider (tcp;ofi_rxm on lo, shm)."""
    pair = ferrytest.Pair(ferrytest.PROVIDERS[request.param])
    yield pair
    pair.close()
