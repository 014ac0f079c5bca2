#!/bin/sh
# The example programs, run as a person would: each starts its two
# processes on this host, moves data through the bootstrap, verifies every
# byte and says OK.  Run by `make check`.
set -eu

: "${abs_top_builddir:?run by make check, which sets abs_top_builddir}"

ex=$abs_top_builddir/examples
. "$(dirname "$0")/runs.sh"
scratch examples

runs "demo: OK" "$ex/hello_write" demo --size 8M --iterations 3
runs "bytes verified: OK" "$ex/hello_write" demo --size 1M --iterations 2
runs "kv_transfer (pull): OK" "$ex/kv_transfer" demo --mode pull
runs "kv_transfer (push): OK" "$ex/kv_transfer" demo --mode push
runs "sequence 3 complete" "$ex/kv_transfer" demo --mode push
FERRY_PROVIDER=shm runs "demo: OK" "$ex/hello_write" demo --size 4M --iterations 2
# The provider comes from the environment: tcp (rxm over tcp on libfabric
# 1.17, its own tcp provider from 1.18), over loopback (the peer's route).
FERRY_PROVIDER=tcp runs "on domain lo" "$ex/hello_write" demo --size 4M --iterations 2
FERRY_PROVIDER=tcp runs "kv_transfer (push): OK" "$ex/kv_transfer" demo --mode push
# One call, five receivers: a chain, then a tree, and the naive copies.
runs "bytes verified: OK" "$ex/epoll_wait" --writes 16 --size 1M
runs "fanout: OK" "$ex/fanout" demo --receivers 5 --size 8M
runs "fanout: OK" "$ex/fanout" demo --receivers 3 --size 3M --degree 2 --chunk 256K
runs "(parallel)" "$ex/fanout" demo --receivers 2 --size 2M --mode parallel
# No GPU here: it says so and runs on the simulated device.
runs "verified on the device: OK" "$ex/gpu_write" --size 8M --iterations 2
FERRY_PROVIDER=tcp runs "gpu_write: OK" "$ex/gpu_write" --size 3M --iterations 2
FERRY_PROVIDER=shm runs "gpu_write: OK" "$ex/gpu_write" --size 3M --iterations 2
exit $status
