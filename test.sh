#!/usr/bin/env bash
# Sets up, builds and runs every test under ctest, in three build trees:
#   build/       cmocka, busted, the stand-in's conformance suite and the
#                integration tests;
#   build-asan/  the C and integration tests again against a flowwarden built
#                with AddressSanitizer, LeakSanitizer and UBSan (FW_SANITIZE;
#                the busted and stand-in suites run no flowwarden C code, so
#                they run once, above; the chaos suite measures throughput and
#                timing, which a sanitized build distorts, so it runs in
#                build/ only); any sanitizer report fails the run;
#   build-fuzz/  each libFuzzer target (FW_FUZZ, clang) for a few seconds
#                from its seed corpus (tests/fuzz/README: long campaigns).
# Arguments go to every ctest (e.g. -R bson).
#
# ./test.sh --tsan [ctest args] runs only the ThreadSanitizer pass instead
# (build-tsan/, FW_SANITIZE=thread with clang): the C and integration tests
# against a TSan flowwarden, failing on any report (docs/testing.md#threadsanitizer;
# about 11 minutes on 2 cores with the build, so not part of the default run).
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh

if [ "${1:-}" = "--tsan" ]; then
  shift
  CC=clang cmake -S . -B build-tsan -DFW_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build build-tsan -j "$(nproc)"
  status=0
  rm -rf build-tsan/sanitizer-reports/*
  (cd build-tsan && ctest --output-on-failure -j 2 -E '^(lua|standin|chaos)/' "$@") || status=1
  if compgen -G "build-tsan/sanitizer-reports/*" >/dev/null; then
    echo "test.sh: ThreadSanitizer reports in build-tsan/sanitizer-reports:"
    cat build-tsan/sanitizer-reports/*
    status=1
  fi
  exit $status
fi
cmake -S . -B build-asan -DFW_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$(nproc)"
CC=clang cmake -S . -B build-fuzz -DFW_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz

status=0
(cd build && ctest --output-on-failure -j 2 "$@") || status=1

# ASan writes its reports (child processes' too) under sanitizer-reports/:
# one there fails the run even if the test that caused it did not notice.
rm -rf build-asan/sanitizer-reports/*
(cd build-asan && ctest --output-on-failure -j 2 -E '^(lua|standin|chaos)/' "$@") || status=1
if compgen -G "build-asan/sanitizer-reports/*" >/dev/null; then
  echo "test.sh: sanitizer reports in build-asan/sanitizer-reports:"
  cat build-asan/sanitizer-reports/*
  status=1
fi

(cd build-fuzz && ctest --output-on-failure -j 2 -L fuzz "$@") || status=1
exit $status
