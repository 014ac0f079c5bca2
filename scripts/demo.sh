#!/usr/bin/env bash
# Installs what is missing (apt-get, as root), builds ferry in build/, and
# runs the demo: two processes on this host meet by name over ferry's
# embedded bootstrap (bootstrap://127.0.0.1 on a free port), one writes
# 8 x 64 MiB into the other's memory with one-sided RMA and a
# notification, the other verifies every byte.  Extra arguments
# go to examples/hello_write (e.g. --size 256M --iterations 4).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh

install_deps >&2
configure_and_make build --enable-werror >/dev/null
exec build/examples/hello_write demo "$@"
