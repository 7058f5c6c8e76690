#!/usr/bin/python3
"""The hand-written pymongo consumer flowwarden is compared with (run by bench/run_bench.py).

    /usr/bin/python3 bench/pymongo_loop.py --uri URI --db DB --coll COLL
        [--resume-after JSON_TOKEN] [--events N] [--scenario s1|s2|s3|s6|s7] [--save-every K]
        [--name STREAM] [--latency] [--http-url URL]

A plain `coll.watch()` loop: each change goes to a Python function doing the scenario's work
(bench_docs.Work), and every --save-every events the resume token is checkpointed the way
flowwarden does it: update_one upsert of {_id: name} in DB._fw_checkpoints setting
lastProcessedToken (the event _id), lastSeenToken (the stream's resume token) and updatedAt.

S6 and S7 (bench/io_scenarios.py) do one round trip per event, waiting for its answer: S6 an
update_one upsert {_id: group} {$inc: {n: 1}} into DB.s6_totals; S7 a POST of
{"id": {"$oid": ...}, "k": group} to --http-url with http.client (one keep-alive connection).

S6b (issue 30) batches the same way flowwarden's on_batch does: the changes read are kept until
500 of them are there, the stream has nothing more at once, or 20 ms passed since the first; then
one unordered bulk_write of their update_one upserts, and the checkpoint after it.

Throughput mode (--events N): stops after N events, saves the checkpoint and prints one JSON
line {"events", "first_ns", "last_ns", "checksum"} (CLOCK_MONOTONIC, taken after the first and
the Nth event were handled, and "open_ns" just before the change stream is opened) and
"hwm_kb", this process's peak RSS (VmHWM). Latency mode (--latency): watches from now, prints
"ready", then "<seq> <t_us>" for every event as the handler starts, until SIGTERM.
"""

import argparse
import datetime
import http.client
import json
import os
import signal
import sys
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pymongo  # noqa: E402

from bench_docs import Work  # noqa: E402


def vm_hwm_kb():
    """Peak RSS of this process image. (ru_maxrss would include the RSS of the Python process
    that forked us: Linux keeps it across exec.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def io_handler(scenario, db, url):
    """The S6/S7 handler: one round trip per event, as flowwarden's fw.mongo / fw.http do."""
    if scenario == "s6":
        totals = db["s6_totals"]

        def s6(change):
            totals.update_one({"_id": change["fullDocument"]["group"]}, {"$inc": {"n": 1}},
                              upsert=True)
        return s6
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    headers = {"Content-Type": "application/json"}

    def s7(change):
        d = change["fullDocument"]
        body = json.dumps({"id": {"$oid": str(d["_id"])}, "k": d["group"]},
                          separators=(",", ":")).encode()
        conn.request("POST", u.path, body, headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError("HTTP status %d" % resp.status)
    return s7


def batched(stream, totals, events, save, max_events=500, max_wait_s=0.02):
    """S6b: up to max_events changes within max_wait_s of the first, one bulk_write of their
    upserts, then the checkpoint. Returns (events, first_ns, last_ns)."""
    n, first, buf, since = 0, 0, [], None
    last_change = None
    while n < events:
        change = stream.try_next()  # None: nothing more at once (after one getMore)
        if change is not None:
            buf.append(pymongo.UpdateOne({"_id": change["fullDocument"]["group"]},
                                         {"$inc": {"n": 1}}, upsert=True))
            last_change = change
            since = since or time.monotonic()
        if buf and (change is None or len(buf) >= max_events or n + len(buf) >= events
                    or time.monotonic() - since >= max_wait_s):
            totals.bulk_write(buf, ordered=False)
            n += len(buf)
            if not first:
                first = time.monotonic_ns()
            buf, since = [], None
            save(last_change, stream)
    return n, first, time.monotonic_ns()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--uri", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--coll", required=True)
    p.add_argument("--resume-after", default=None, help="resume token as JSON ({\"_data\": ...})")
    p.add_argument("--events", type=int, default=0)
    p.add_argument("--scenario", default="s2", choices=["s1", "s2", "s3", "s6", "s7", "s6b"])
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--name", default="bench")
    p.add_argument("--latency", action="store_true")
    p.add_argument("--http-url", default=None, help="S7: where to POST each event")
    a = p.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    client = pymongo.MongoClient(a.uri)
    coll = client[a.db][a.coll]
    ckpt = client[a.db]["_fw_checkpoints"]
    work = Work()
    if a.scenario == "s6b":
        handle = None
    elif a.scenario in ("s6", "s7"):
        handle = io_handler(a.scenario, client[a.db], a.http_url)
    else:
        handle = getattr(work, a.scenario)
    token = json.loads(a.resume_after) if a.resume_after else None
    out = sys.stdout

    def save(change, stream):
        ckpt.update_one({"_id": a.name},
                        {"$set": {"lastProcessedToken": change["_id"],
                                  "lastSeenToken": stream.resume_token,
                                  "updatedAt": datetime.datetime.utcnow()}},
                        upsert=True)

    n = since = 0
    first = last = 0
    client.admin.command("ping")  # connected before the clock starts
    opened = time.monotonic_ns()
    with coll.watch(resume_after=token) as stream:
        if a.latency:
            out.write("ready\n")
            out.flush()
            for change in stream:
                d = change["fullDocument"]
                out.write("%d %d\n" % (d["seq"], d["t_us"]))
                out.flush()
                handle(change)
                since += 1
                if since >= a.save_every:
                    save(change, stream)
                    since = 0
            return 0
        if a.scenario == "s6b":
            n, first, last = batched(stream, client[a.db]["s6_totals"], a.events, save)
            out.write(json.dumps({"events": n, "open_ns": opened, "first_ns": first,
                                  "last_ns": last, "hwm_kb": vm_hwm_kb(), "checksum": 0}) + "\n")
            out.flush()
            return 0
        change = None
        for change in stream:
            handle(change)
            n += 1
            since += 1
            if since >= a.save_every:
                save(change, stream)
                since = 0
            if n == 1:
                first = time.monotonic_ns()
            if n >= a.events:
                last = time.monotonic_ns()
                break
        if since and change is not None:
            save(change, stream)
    out.write(json.dumps({"events": n, "open_ns": opened, "first_ns": first, "last_ns": last,
                          "hwm_kb": vm_hwm_kb(), "checksum": work.checksum()}) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
