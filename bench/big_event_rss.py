#!/usr/bin/python3
"""Peak RSS of one stream catching up over events near 16 MiB, or over small ones (issue 41).

    /usr/bin/python3 bench/big_event_rss.py [--events 6] [--mib 15] [--binary build/flowwarden]
    /usr/bin/python3 bench/big_event_rss.py --small 100000

Loads the events after taking a resume token (documents of --mib MiB: one string field, so
each change event is just under 16 MiB; or --small N documents of ~300 bytes), then runs
flowwarden with one stream resuming before them whose handler reads the whole document
(`#ctx:full_document().blob`, or S2's fields), and prints the process's peak RSS (VmHWM, read
just before it is stopped) and RSS at the end. docs/performance.md gives the bound: the batch
libmongoc is on (16 MiB, or one event), plus FW_READ_AHEAD_BYTES (or one event) copied ahead,
plus the event being handled and the handler's own copy of it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "standin"))
sys.path.insert(0, HERE)

import pymongo  # noqa: E402

from bench_docs import small_doc  # noqa: E402
from standin_process import StandIn  # noqa: E402

BIG = """
local fw = require("flowwarden")
local N, n, total = %d, 0, 0
fw.stream { name = "rss", database = "bench", collection = "ev",
  on_insert = function(ctx)
    total = total + #ctx:full_document().blob
    n = n + 1
    if n == N then fw.log.info("RSS done " .. total) end
  end }
"""

SMALL = """
local fw = require("flowwarden")
local N, n, acc = %d, 0, 0
fw.stream { name = "rss", database = "bench", collection = "ev",
  on_insert = function(ctx)
    local d = ctx:full_document()
    acc = acc + d.seq + d.amount + #d.customer.name
    n = n + 1
    if n == N then fw.log.info("RSS done " .. acc) end
  end }
"""


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--events", type=int, default=6)
    p.add_argument("--mib", type=float, default=15.0)
    p.add_argument("--small", type=int, default=0, help="N small events instead")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "flowwarden"))
    a = p.parse_args()

    n = a.small or a.events
    with StandIn() as s:
        client = pymongo.MongoClient(s.uri)
        coll = client.bench.ev
        coll.insert_one({"blob": "", "seq": 0, "amount": 0, "customer": {"name": ""}})
        with coll.watch() as cs:
            cs.try_next()
            tok = dict(cs.resume_token)
        if a.small:
            for lo in range(0, n, 5000):
                coll.insert_many([small_doc(i) for i in range(lo, min(n, lo + 5000))])
        else:
            blob = "x" * int(a.mib * 1024 * 1024)
            for i in range(n):
                coll.insert_one({"i": i, "blob": blob})
        client.bench["_fw_checkpoints"].replace_one(
            {"_id": "rss"}, {"_id": "rss", "lastProcessedToken": tok}, upsert=True)
        client.close()
        d = tempfile.mkdtemp()
        path = os.path.join(d, "rss.lua")
        with open(path, "w") as f:
            f.write((SMALL if a.small else BIG) % n)
        proc = subprocess.Popen([a.binary, "run", path, "--uri", s.uri, "--log-format", "json"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                universal_newlines=True)
        done = threading.Event()
        peak = [0]

        def read():
            for line in proc.stderr:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg", "").startswith("RSS done"):
                    peak[0] = status_kb(proc.pid, "VmHWM")
                    done.set()
                elif rec.get("level") == "error":
                    sys.stderr.write(line)

        threading.Thread(target=read, daemon=True).start()
        t0 = time.monotonic()
        ok = done.wait(300)
        dt = time.monotonic() - t0
        rss_end = status_kb(proc.pid, "VmRSS") if proc.poll() is None else None
        proc.terminate()
        proc.wait(60)
        if not ok:
            raise SystemExit("flowwarden did not handle the %d events" % n)
        what = ("%d small events" % n) if a.small else ("%d events of %.1f MiB" % (n, a.mib))
        print("%s: handled in %.1f s; peak RSS %.1f MB, RSS at the end %s MB"
              % (what, dt, peak[0] / 1024.0,
                 "%.1f" % (rss_end / 1024.0) if rss_end else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
