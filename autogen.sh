#!/bin/sh
# Generate configure, Makefile.in and friends from a git checkout.
# Release tarballs already contain them; there, just run ./configure.
set -e
cd "$(dirname "$0")"
autoreconf -fi
