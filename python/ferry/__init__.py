"""ferry: one-sided RMA (write, read, notify) between host and CUDA
memories of machines, over libfabric.

    ctx = ferry.Context(provider="tcp;ofi_rxm", domain="lo", progress_thread=True)
    mem = ctx.register(tensor)                  # no copy; mem holds tensor
    peer = ctx.add_peer(other_address)
    rmem = peer.import_region(other_blob)
    peer.write(mem, rmem, notify=(7, 1)).wait(timeout=5.0)

Every call raises a ferry.Error subclass carrying ferry's code and its
sentence; waits release the GIL; a Request is awaitable in asyncio.
ctx.metrics_text() is Prometheus text, and ferry.prometheus (which alone
needs prometheus_client) serves it through prometheus_client.
See docs/python.md.
"""
from ferry._ferry import *  # noqa: F401,F403  (the C extension is the API)
from ferry._ferry import __version__  # noqa: F401
