#!/usr/bin/python3
"""What the console costs (issue 42: under 1% CPU on a stream at 5,000 events/s while one tab
watches it): a stream fed at a fixed rate through the MongoDB stand-in, measured in phases of
D seconds with no tab open and with one headless chromium tab on the console (alternating, in
one run). Prints, per phase, flowwarden's CPU (user+sys, % of one core), the events handled per
second, and the CPU of the endpoint's own threads (fw-admin-http, fw-admin-ctl, fw-admin-hist:
what the page's polling and the history sampler cost, read per thread from /proc).

    /usr/bin/python3 bench/console_overhead.py [--rate 5000] [--seconds 20] [--repeat 3]
                                               [--build-dir DIR]

DIR holds flowwarden (default build-bench/, a Release build, else build/). Needs Debian's
chromium and tests/browser's npm packages (./setup.sh installs both).
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
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "standin"))
sys.path.insert(0, HERE)

import pymongo  # noqa: E402
from bench_proc import Child, log, proc_cpu_s  # noqa: E402
from standin_process import StandIn  # noqa: E402

ADMIN_THREADS = ("fw-admin-http", "fw-admin-ctl", "fw-admin-hist")
SCRIPT = """
local fw = require("flowwarden")
local n = 0
fw.stream { name = "feed", collection = "feed",
  on_insert = function(ctx) n = n + (ctx:full_document().i and 1 or 0) end }
"""


def admin_cpu_s(pid):
    """Seconds the endpoint's threads ran, from the scheduler's nanosecond count
    (/proc/PID/task/TID/schedstat; /stat's clock ticks are too coarse for them)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() not in ADMIN_THREADS:
                    continue
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except OSError:
            continue
    return total / 1e9


def events(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/v1/streams/feed" % port, timeout=10) as r:
        return json.load(r)["events"]["total"]


def feed(uri, rate, stop):
    """Inserts rate documents a second, in batches every 50 ms, until stop is set."""
    coll = pymongo.MongoClient(uri)["bench"]["feed"]
    batch, i, t = max(1, rate // 20), 0, time.monotonic()
    while not stop.is_set():
        coll.insert_many([{"i": i + k, "pad": "x" * 40} for k in range(batch)], ordered=False)
        i += batch
        t += batch / rate
        delay = t - time.monotonic()
        if delay > 0:
            stop.wait(delay)


def phase(fw, port, seconds, tab):
    """(flowwarden CPU %, events/s, admin threads' CPU %) over one phase."""
    watcher = None
    if tab:
        env = dict(os.environ, FW_URL="http://127.0.0.1:%d" % port, FW_SECONDS=str(seconds + 5))
        watcher = subprocess.Popen(["node", "console_watch.mjs"], env=env, text=True,
                                   cwd=os.path.join(ROOT, "tests", "browser"),
                                   stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        if watcher.stdout.readline().strip() != "watching":
            raise RuntimeError("the console did not load in chromium")
    cpu0, adm0, ev0, t0 = proc_cpu_s(fw.pid), admin_cpu_s(fw.pid), events(port), time.monotonic()
    time.sleep(seconds)
    cpu1, adm1, ev1, t1 = proc_cpu_s(fw.pid), admin_cpu_s(fw.pid), events(port), time.monotonic()
    if watcher:
        watcher.wait(timeout=60)
    wall = t1 - t0
    return 100 * (cpu1 - cpu0) / wall, (ev1 - ev0) / wall, 100 * (adm1 - adm0) / wall


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=int, default=5000)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--build-dir", default=None)
    a = p.parse_args()
    build = a.build_dir or next((d for d in (os.path.join(ROOT, "build-bench"),
                                             os.path.join(ROOT, "build"))
                                 if os.access(os.path.join(d, "flowwarden"), os.X_OK)), None)
    if not build:
        sys.exit("no flowwarden in build-bench/ or build/: build it first")
    tmp = tempfile.mkdtemp(prefix="fw_console_bench_")
    script = os.path.join(tmp, "feed.lua")
    with open(script, "w") as f:
        f.write(SCRIPT)
    rows = {"no tab": [], "one tab": []}
    with StandIn() as s:
        uri = s.uri.replace("/?", "/bench?") if "/?" in s.uri else s.uri
        fw = Child([os.path.join(build, "flowwarden"), "run", script, "--uri", uri,
                    "--log-format", "json", "--admin", "127.0.0.1:0"])
        if not fw.wait_for(lambda: any("change stream open" in x[1] for x in fw.err), 30):
            raise RuntimeError("flowwarden did not start:\n" + "\n".join(x[1] for x in fw.err))
        line = next(x[1] for x in fw.err if "admin endpoint on" in x[1])
        port = int(line.split("(port ")[1].split(")")[0])
        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(s.uri, a.rate, stop))
        feeder.start()
        try:
            time.sleep(3)  # the feed settles
            for rep in range(a.repeat):
                for mode in ("no tab", "one tab"):
                    cpu, rate, adm = phase(fw, port, a.seconds, mode == "one tab")
                    rows[mode].append((cpu, rate, adm))
                    log("run %d, %s: flowwarden %.2f%% CPU, %.0f events/s, admin threads "
                        "%.3f%% CPU" % (rep + 1, mode, cpu, rate, adm))
        finally:
            stop.set()
            feeder.join()
            fw.stop()

    def med(mode, i):
        return statistics.median(r[i] for r in rows[mode])

    result = {"rate_asked": a.rate, "seconds": a.seconds, "repeat": a.repeat,
              "runs": rows,
              "median_cpu_percent_no_tab": round(med("no tab", 0), 2),
              "median_cpu_percent_one_tab": round(med("one tab", 0), 2),
              "median_events_per_s": round(med("one tab", 1)),
              "median_admin_threads_cpu_percent_one_tab": round(med("one tab", 2), 4),
              "median_admin_threads_cpu_percent_no_tab": round(med("no tab", 2), 4)}
    result["console_share_of_flowwarden_cpu_percent"] = round(
        100 * result["median_admin_threads_cpu_percent_one_tab"]
        / max(result["median_cpu_percent_one_tab"], 1e-9), 3)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
