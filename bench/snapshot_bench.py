#!/usr/bin/python3
"""Benchmark incremental snapshots (issue 28): snapshot documents/s against a plain find drain.

    /usr/bin/python3 bench/snapshot_bench.py [--docs 50000] [--chunk-size 1000] [--repeat 1]
                                             [--binary build/flowwarden] [--exactly-once]
                                             [--live-every-ms 50]

Starts a stand-in, inserts --docs small (~300 byte) documents (bench_docs.small_doc), then
--repeat times (each round a new stream name, so a new snapshot):
  drain     one find sorted by _id over the collection, batches of 1,000, documents kept as raw
            BSON (pymongo's RawBSONDocument: no decoding), the rate the server gives a reader;
            run before and after each snapshot, the round's drain rate is their mean;
  snapshot  flowwarden with checkpoint.start_position = "snapshot", snapshot.chunk_size and a
            handler that does nothing, timed by its own log records (from "snapshot starting"
            to "snapshot finished", their millisecond timestamps), while a live insert every
            --live-every-ms (50) measures the live stream's latency (insert sent -> the
            handler's log line read) during the snapshot and for 40 inserts after it (the
            baseline); a smaller interval gives more samples during a short snapshot.
Prints one line each, the snapshot's rate as a percentage of the round's drain (goal >= 70%),
and with --repeat > 1 the lowest and median percentage and the latencies of all rounds
(median, p99, max).
--exactly-once: the stream has exactly_once = true, so each row's (empty) handler call is a
transaction that commits the snapshot's progress past the row (issue 39): its cost per row.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "standin"))

import pymongo  # noqa: E402
from bson.raw_bson import RawBSONDocument  # noqa: E402

from bench_docs import small_doc  # noqa: E402
from standin_process import StandIn  # noqa: E402

SCRIPT = """
local fw = require("flowwarden")
fw.stream { name = "snap%d", database = "bench", collection = "events",
  checkpoint = { start_position = "snapshot" }, snapshot = { chunk_size = %d },%s
  on_snapshot = function(ctx) end,
  on_insert = function(ctx) fw.log.info("LIVE " .. ctx:full_document().k) end }
"""


def drain(uri):
    client = pymongo.MongoClient(uri, document_class=RawBSONDocument)
    t0 = time.monotonic()
    n = sum(1 for _ in client.bench.events.find({}, sort=[("_id", 1)], batch_size=1000))
    dt = time.monotonic() - t0
    client.close()
    return n, dt


def log_s(ts):
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp()


def snapshot(uri, binary, chunk_size, round_no=0, exactly_once=False, every=0.05):
    """(documents, seconds, live latencies in s during, after) of one run of flowwarden."""
    d = tempfile.mkdtemp()
    path = os.path.join(d, "snap.lua")
    with open(path, "w") as f:
        f.write(SCRIPT % (round_no, chunk_size, " exactly_once = true," if exactly_once else ""))
    proc = subprocess.Popen([binary, "run", path, "--uri", uri, "--log-format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            universal_newlines=True)
    sent, seen, result = {}, {}, {}
    started = threading.Event()

    def read():
        for line in proc.stderr:
            try:
                rec = json.loads(line)
                msg = rec.get("msg", "")
            except ValueError:
                continue
            if msg.startswith("LIVE "):
                seen[int(msg[5:])] = time.monotonic()
            elif msg.startswith("snapshot starting"):
                result["t0"] = log_s(rec["ts"])
                started.set()
            m = re.match(r"snapshot finished: (\d+) documents handed out in ([\d.]+) s", msg)
            if m:
                # The record's own figure has 0.1 s steps: the timestamps give milliseconds.
                result["docs"] = int(m.group(1))
                result["s"] = max(log_s(rec["ts"]) - result["t0"], 0.001)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    client = pymongo.MongoClient(uri)
    if not started.wait(60):
        raise SystemExit("flowwarden did not start its snapshot")
    k, after = 0, []
    deadline = time.monotonic() + 600
    while len(after) < 40 and time.monotonic() < deadline:
        if "s" in result:
            after.append(k)   # the snapshot finished: the baseline
        sent[k] = time.monotonic()
        client.bench.events.insert_one({"k": k})
        k += 1
        time.sleep(every)
    client.close()
    time.sleep(1.5)
    proc.terminate()
    proc.wait(30)
    if "s" not in result:
        raise SystemExit("the snapshot did not finish")
    base = set(after)
    lat = [seen[i] - sent[i] for i in sent if i in seen and i not in base]
    lat_after = [seen[i] - sent[i] for i in base if i in seen]
    return result["docs"], result["s"], lat, lat_after


def print_latency(what, v):
    if v:
        p99 = sorted(v)[min(len(v) - 1, int(round(0.99 * (len(v) - 1))))]
        print("live latency %-19s %4d inserts, median %7.1f ms, p99 %7.1f ms, max %7.1f ms"
              % (what + ":", len(v), statistics.median(v) * 1000, p99 * 1000, max(v) * 1000))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--docs", type=int, default=50000)
    p.add_argument("--chunk-size", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "flowwarden"))
    p.add_argument("--exactly-once", action="store_true")
    p.add_argument("--live-every-ms", type=float, default=50.0)
    args = p.parse_args()

    with StandIn() as s:
        client = pymongo.MongoClient(s.uri)
        client.bench.events.insert_many([small_doc(i) for i in range(args.docs)], ordered=True)
        client.close()
        shares, during, after = [], [], []
        for k in range(args.repeat):
            n, dt = drain(s.uri)
            print("drain     %7d docs in %6.3f s: %8.0f docs/s (one find by _id, raw BSON)"
                  % (n, dt, n / dt))
            sn, sdt, lat, lat_after = snapshot(s.uri, args.binary, args.chunk_size, k,
                                               args.exactly_once, args.live_every_ms / 1000.0)
            n2, dt2 = drain(s.uri)
            print("drain     %7d docs in %6.3f s: %8.0f docs/s (after the snapshot)"
                  % (n2, dt2, n2 / dt2))
            rate = (n / dt + n2 / dt2) / 2
            shares.append(100.0 * (sn / sdt) / rate)
            print("snapshot  %7d docs in %6.3f s: %8.0f docs/s (chunk_size %d%s), %.0f%% of the "
                  "drain (%.0f docs/s)" % (sn, sdt, sn / sdt, args.chunk_size,
                                           ", exactly_once" if args.exactly_once else "",
                                           shares[-1], rate))
            print_latency("during the snapshot", lat)
            print_latency("after it", lat_after)
            during += lat
            after += lat_after
        if args.repeat > 1:
            print("%d rounds: snapshot %.0f%% to %.0f%% of the drain (median %.0f%%)"
                  % (args.repeat, min(shares), max(shares), statistics.median(shares)))
            print_latency("during (all rounds)", during)
            print_latency("after (all rounds)", after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
