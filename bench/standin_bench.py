#!/usr/bin/python3
"""Benchmark the MongoDB stand-in: bulk insert rate (pymongo) and drain rate (bench/drain.c).

    /usr/bin/python3 bench/standin_bench.py [--docs 200000] [--drain build/fw_drain]

Starts a stand-in, inserts --docs small (~300 byte) documents with insert_many and prints
inserts/s, then runs the drain binary over the same events (startAtOperationTime taken before
the inserts) and prints its events/s line. Requirements: >= 30k inserts/s, >= 300k events/s.
"""

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "standin"))

import pymongo  # noqa: E402

from standin_process import StandIn  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--docs", type=int, default=200000)
    p.add_argument("--drain", default=os.path.join(ROOT, "build", "fw_drain"),
                   help="path of the fw_drain binary (default build/fw_drain)")
    p.add_argument("--data-dir", default=None, help="run the stand-in with --data-dir")
    args = p.parse_args()

    extra = ["--data-dir", args.data_dir] if args.data_dir else []
    with StandIn(extra) as s:
        client = pymongo.MongoClient(s.uri)
        coll = client.bench.events
        start = client.admin.command("ping")["operationTime"]
        pad = "x" * 230
        docs = [{"seq": i, "kind": "order", "amount": i * 3, "pad": pad}
                for i in range(args.docs)]
        t0 = time.monotonic()
        coll.insert_many(docs, ordered=True)
        dt = time.monotonic() - t0
        print("inserted %d docs in %.3f s: %.0f inserts/s" % (args.docs, dt, args.docs / dt))
        client.close()
        if not os.path.exists(args.drain):
            print("drain binary %s not found; build it first (cmake --build build)"
                  % args.drain)
            return 1
        cmd = [args.drain, s.uri, "bench", "events", str(args.docs), "--start-at",
               "%d:%d" % (start.time, start.inc)]
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True)
        sys.stdout.write(res.stdout)
        return res.returncode


if __name__ == "__main__":
    sys.exit(main())
