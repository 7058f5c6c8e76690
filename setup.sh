#!/usr/bin/env bash
# Installs what flowwarden needs to build, test and run its demo on Debian
# bookworm, then configures and builds it. Idempotent: packages already
# present are not fetched again, and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")"

packages=(gcc make cmake pkg-config libmongoc-dev libbson-dev liblua5.4-dev lua5.4
          lua-cjson lua-cjson-dev libcurl4-openssl-dev libmicrohttpd-dev lua-busted
          libcmocka-dev python3-pymongo prometheus dpkg-dev file strace
          clang libclang-rt-14-dev chromium libhiredis-dev redis-server
          libpq-dev postgresql python3-psycopg2 python3-redis)
# Node.js and npm drive the console's browser test (tests/browser): Debian's
# packages, unless a node and npm are already there (another Node.js
# distribution ships npm inside its nodejs package).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# playwright-core, pinned by tests/browser/package-lock.json; it drives
# Debian's chromium and downloads no browser of its own.
if [ ! -d tests/browser/node_modules/playwright-core ] ||
   [ tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]; then
  echo "setup: installing tests/browser's npm packages"
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE="${FW_BUILD_TYPE:-RelWithDebInfo}" ${FW_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
