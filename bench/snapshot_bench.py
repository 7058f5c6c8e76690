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
(median, p99, max). On Linux each drain and snapshot line is followed by the CPU time the
stand-in (and flowwarden) used in it and how long their threads waited for a core
(/proc/<pid>/task/*/schedstat: run time, run-queue wait): the CPU time is what the round cost,
the wait is the machine's load, which moves a round's percentage by 2x on a shared machine.
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


def sched(pid):
    """(CPU ns, ns waited for a core) of pid's threads from /proc (Linux), or None."""
    run = wait = 0
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                fields = f.read().split()
            run += int(fields[0])
            wait += int(fields[1])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile: its time is no longer counted
    return run, wait


def sched_delta(a, b):
    """(CPU ms, waited ms) from two sched() readings, or None."""
    if a is None or b is None:
        return None
    return (b[0] - a[0]) / 1e6, (b[1] - a[1]) / 1e6


def cpu_text(what, d):
    return "%s %.0f ms CPU, waited %.0f ms for a core" % (what, d[0], d[1]) if d else ""


def drain(uri, standin_pid):
    """(documents, seconds, the stand-in's sched_delta during the find)."""
    client = pymongo.MongoClient(uri, document_class=RawBSONDocument)
    client.admin.command("ping")  # connected: the find alone is timed
    s0 = sched(standin_pid)
    t0 = time.monotonic()
    n = sum(1 for _ in client.bench.events.find({}, sort=[("_id", 1)], batch_size=1000))
    dt = time.monotonic() - t0
    cpu = sched_delta(s0, sched(standin_pid))
    client.close()
    return n, dt, cpu


def log_s(ts):
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp()


def snapshot(uri, binary, chunk_size, round_no=0, exactly_once=False, every=0.05, standin_pid=0):
    """(documents, seconds, live latencies in s during, after, the stand-in's and flowwarden's
    sched_delta from its "snapshot starting" to its "snapshot finished") of one run of
    flowwarden."""
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
                result["sched0"] = (sched(standin_pid), sched(proc.pid))
                started.set()
            m = re.match(r"snapshot finished: (\d+) documents handed out in ([\d.]+) s", msg)
            if m:
                result["cpu"] = (sched_delta(result["sched0"][0], sched(standin_pid)),
                                 sched_delta(result["sched0"][1], sched(proc.pid)))
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
    return result["docs"], result["s"], lat, lat_after, result["cpu"]


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
        shares, during, after, cpu = [], [], [], []
        pid = s.proc.pid
        for k in range(args.repeat):
            n, dt, c1 = drain(s.uri, pid)
            print("drain     %7d docs in %6.3f s: %8.0f docs/s (one find by _id, raw BSON)"
                  % (n, dt, n / dt))
            if c1:
                print("          %s" % cpu_text("stand-in", c1))
            sn, sdt, lat, lat_after, (cs, cf) = snapshot(
                s.uri, args.binary, args.chunk_size, k, args.exactly_once,
                args.live_every_ms / 1000.0, pid)
            n2, dt2, c2 = drain(s.uri, pid)
            print("drain     %7d docs in %6.3f s: %8.0f docs/s (after the snapshot)"
                  % (n2, dt2, n2 / dt2))
            if c2:
                print("          %s" % cpu_text("stand-in", c2))
            rate = (n / dt + n2 / dt2) / 2
            shares.append(100.0 * (sn / sdt) / rate)
            print("snapshot  %7d docs in %6.3f s: %8.0f docs/s (chunk_size %d%s), %.0f%% of the "
                  "drain (%.0f docs/s)" % (sn, sdt, sn / sdt, args.chunk_size,
                                           ", exactly_once" if args.exactly_once else "",
                                           shares[-1], rate))
            if cs and cf and c1 and c2:
                print("          %s; %s" % (cpu_text("stand-in", cs), cpu_text("flowwarden", cf)))
                cpu.append((cs[0] / ((c1[0] + c2[0]) / 2), cs[1], (c1[1] + c2[1]) / 2))
            print_latency("during the snapshot", lat)
            print_latency("after it", lat_after)
            during += lat
            after += lat_after
        if args.repeat > 1:
            print("%d rounds: snapshot %.0f%% to %.0f%% of the drain (median %.0f%%)"
                  % (args.repeat, min(shares), max(shares), statistics.median(shares)))
            if cpu:
                print("the stand-in's CPU for a snapshot, median %.2fx its CPU for a drain; it "
                      "waited for a core, median %.0f ms in a snapshot, %.0f ms in a drain"
                      % (statistics.median(c[0] for c in cpu), statistics.median(c[1] for c in cpu),
                         statistics.median(c[2] for c in cpu)))
            print_latency("during (all rounds)", during)
            print_latency("after (all rounds)", after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
