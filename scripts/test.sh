#!/usr/bin/env bash
# Installs what is missing (apt-get, as root), builds ferry in build/ with
# warnings as errors, and runs the whole test suite (make check).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh

install_deps
configure_and_make build --enable-werror
run_check build
