#!/usr/bin/env bash
# Sets up, builds and runs every test (cmocka, busted, the stand-in's
# conformance suite, integration tests, the reload test under ASan/LSan)
# under ctest.
set -euo pipefail
cd "$(dirname "$0")"
FW_CMAKE_ARGS="-DFW_ASAN_BINARY=$PWD/build-asan/flowwarden" ./setup.sh
cmake -S . -B build-asan -DFW_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$(nproc)" --target flowwarden
cd build
ctest --output-on-failure -j 2 "$@"
