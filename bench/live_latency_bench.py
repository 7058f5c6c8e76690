#!/usr/bin/python3
"""Latency of a live event on a quiet stream while another stream catches up (issue 41).

    /usr/bin/python3 bench/live_latency_bench.py [--backlog 200000] [--large]
                                                 [--interval-ms 10] [--latency-ms 0]
                                                 [--binary build/flowwarden]

Starts a stand-in (with --latency-ms: every reply leaves that many ms late, a network), loads
--backlog documents into `backlog` (small ~300-byte ones, or ~4 KB with --large) after taking a
resume token, and runs one flowwarden with two streams: `catchup` on `backlog`, resuming before
the load (its checkpoint is seeded), with S2's handler; and `quiet` on `live`, from now, whose
handler logs "LIVE <k>". One document is inserted into `live` every --interval-ms while the
catch-up runs and for 50 inserts after it; latency = the handler's log line read - just before
the insert was sent (it includes the stand-in's insert and the pipe, so it is an upper bound).
Prints median, p99 and max during the catch-up and after it, and the catch-up's events/s.
"""

import argparse
import json
import os
import statistics
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

from bench_docs import large_doc, small_doc  # noqa: E402
from standin_process import StandIn  # noqa: E402

SCRIPT = """
local fw = require("flowwarden")
local N, n, acc, nlen = %d, 0, 0, 0
fw.stream { name = "catchup", database = "bench", collection = "backlog",
  checkpoint = { save_every = 100 },
  on_insert = function(ctx)
    local d = ctx:full_document()
    acc = acc + d.seq + d.amount
    nlen = nlen + #d.customer.name
    n = n + 1
    if n == 1 then fw.log.info("CATCHUP first") elseif n == N then fw.log.info("CATCHUP done") end
  end }
fw.stream { name = "quiet", database = "bench", collection = "live",
  on_insert = function(ctx) fw.log.info("LIVE " .. ctx:full_document().k) end }
"""


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--backlog", type=int, default=200000)
    p.add_argument("--large", action="store_true", help="~4 KB documents instead of ~300 B")
    p.add_argument("--interval-ms", type=float, default=10.0)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "flowwarden"))
    a = p.parse_args()

    make = large_doc if a.large else small_doc
    with StandIn(["--latency-ms", str(a.latency_ms)] if a.latency_ms else []) as s:
        client = pymongo.MongoClient(s.uri)
        db = client.bench
        db.live.insert_one({"k": -1})
        with db.backlog.watch() as cs:
            cs.try_next()
            tok = dict(cs.resume_token)
        t0 = time.monotonic()
        for lo in range(0, a.backlog, 5000):
            db.backlog.insert_many([make(i) for i in range(lo, min(a.backlog, lo + 5000))],
                                   ordered=False)
        print("loaded %d %s documents in %.1f s" % (a.backlog, "large" if a.large else "small",
                                                   time.monotonic() - t0))
        db["_fw_checkpoints"].replace_one({"_id": "catchup"},
                                          {"_id": "catchup", "lastProcessedToken": tok},
                                          upsert=True)
        d = tempfile.mkdtemp()
        path = os.path.join(d, "live.lua")
        with open(path, "w") as f:
            f.write(SCRIPT % a.backlog)
        proc = subprocess.Popen([a.binary, "run", path, "--uri", s.uri, "--log-format", "json"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                universal_newlines=True)
        seen, marks = {}, {}
        quiet_up = threading.Event()

        def read():
            for line in proc.stderr:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                msg = rec.get("msg", "")
                now = time.monotonic()
                if msg.startswith("LIVE "):
                    k = int(msg[5:])
                    seen[k] = now
                    if k == -2:
                        quiet_up.set()
                elif msg.startswith("CATCHUP "):
                    marks[msg[8:]] = now
                elif rec.get("level") == "error":
                    sys.stderr.write(line)

        threading.Thread(target=read, daemon=True).start()
        try:
            # The quiet stream is open once an insert reaches it (the catch-up starts at once).
            deadline = time.monotonic() + 60
            while not quiet_up.is_set() and time.monotonic() < deadline:
                db.live.insert_one({"k": -2})
                quiet_up.wait(0.2)
            if not quiet_up.is_set():
                raise SystemExit("the quiet stream never handled an insert")
            sent, during, after = {}, [], []
            k = 0
            deadline = time.monotonic() + 600
            while len(after) < 50 and time.monotonic() < deadline:
                (after if "done" in marks else during).append(k)
                sent[k] = time.monotonic()
                db.live.insert_one({"k": k})
                k += 1
                time.sleep(a.interval_ms / 1000.0)
            end = time.monotonic() + 10
            while k - 1 not in seen and time.monotonic() < end:
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(60)
            client.close()
        if "done" not in marks:
            raise SystemExit("the catch-up did not finish")
        # Inserts sent before the catch-up's first event were not behind anything yet.
        during = [i for i in during if sent[i] >= marks.get("first", 0)]
        lost = [i for i in sent if i not in seen]
        print("catch-up: %d events in %.2f s (%.0f events/s, first to last handled)"
              % (a.backlog, marks["done"] - marks["first"],
                 a.backlog / max(1e-6, marks["done"] - marks["first"])))
        for what, ks in (("during the catch-up", during), ("after it", after)):
            lat = [(seen[i] - sent[i]) * 1000 for i in ks if i in seen]
            if lat:
                print("quiet stream's live latency %-20s %4d inserts: median %6.1f ms, "
                      "p99 %6.1f ms, max %6.1f ms" % (what + ":", len(lat),
                                                     statistics.median(lat), pct(lat, 99),
                                                     max(lat)))
        if lost:
            print("not handled before the end: %d inserts" % len(lost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
