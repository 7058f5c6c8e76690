#!/usr/bin/env bash
# Installs what flowwarden needs to build, test and run its demo on Debian
# bookworm, then configures and builds it. Idempotent: packages already
# present are not fetched again, and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")"

packages=(gcc make cmake pkg-config libmongoc-dev libbson-dev liblua5.4-dev lua5.4
          lua-cjson lua-cjson-dev libcurl4-openssl-dev libmicrohttpd-dev lua-busted
          libcmocka-dev python3-pymongo prometheus dpkg-dev file strace
          clang libclang-rt-14-dev libhiredis-dev redis-server
          libpq-dev postgresql python3-psycopg2 python3-redis)
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

cmake -S . -B build -DCMAKE_BUILD_TYPE="${FW_BUILD_TYPE:-RelWithDebInfo}" ${FW_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
