#!/usr/bin/env bash
# Sets up, builds and runs every test (cmocka, busted, the stand-in's
# conformance suite, integration tests) under ctest.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
cd build
ctest --output-on-failure -j 2 "$@"
