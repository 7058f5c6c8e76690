#!/usr/bin/env bash
# Sets up, builds and runs the demo: a MongoDB stand-in, flowwarden running
# examples/orders.lua, and a client inserting, updating and deleting orders.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
exec /usr/bin/python3 examples/run_demo.py --binary build/flowwarden
