#!/usr/bin/python3
"""What the admin endpoint costs: benchmark S2 (three fields of the full document) through the
MongoDB stand-in, with `--admin` and /metrics scraped every second, against the same run without
the endpoint, alternating, in one run (issue 13: the endpoint's run must reach >= 97% of the
other's events/s).

    /usr/bin/python3 bench/admin_overhead.py [--events N] [--repeat K] [--build-dir DIR]
                                             [--baseline-build DIR2]

Uses run_bench.py's stand-in loading and S2 script; DIR is a Release build with flowwarden in it
(default build-bench/, as run_bench.py). DIR2, a Release build of another version (one without
metrics, say), adds a third row run the same way without the endpoint.
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run_bench  # noqa: E402
from bench_docs import small_doc  # noqa: E402
from bench_proc import Child, log  # noqa: E402
from standin_process import StandIn  # noqa: E402


def scrape_every_second(port, stop, counts):
    url = "http://127.0.0.1:%d/metrics" % port
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
                counts.append(r.status)
        except OSError:
            counts.append(0)
        if stop.wait(1.0):
            return


def run_s2(build, bench, coll, admin):
    """One flowwarden S2 run over the pre-loaded events: events/s (and scrapes done)."""
    n = bench.counts[coll]
    bench.db["_fw_checkpoints"].delete_many({})
    bench.seed_checkpoint(coll)
    script = os.path.join(bench.tmp, "admin_s2.lua")
    run_bench.fw_script(script, coll, "s2", 100, n=n)
    cmd = [os.path.join(build, "flowwarden"), "run", script, "--uri", bench.s.uri,
           "--log-format", "json", "--log-level", "info"]
    if admin:
        cmd += ["--admin", "127.0.0.1:0"]
    c = Child(cmd)
    stop, scrapes = threading.Event(), []
    scraper = None
    if admin:
        c.wait_for(lambda: any("admin endpoint on" in x[1] for x in c.err), 30)
        port = int(re.search(r"\(port (\d+)\)", next(x[1] for x in c.err
                                                    if "admin endpoint on" in x[1])).group(1))
        scraper = threading.Thread(target=scrape_every_second, args=(port, stop, scrapes))
        scraper.start()
    ok = c.wait_for(lambda: any('"BENCH done"' in x[1] for x in c.err), 120 + n / 2000.0)
    stop.set()
    if scraper:
        scraper.join()
    c.stop()
    recs = run_bench.json_records(c)
    first = [r for _, r in recs if r.get("msg", "").startswith("starting on")]
    done = [r for _, r in recs if r.get("msg") == "BENCH done"]
    if not ok or not first or not done:
        raise RuntimeError("flowwarden did not finish:\n" + c.tail())
    seconds = (run_bench.parse_log_ms(done[0]["ts"]) -
               run_bench.parse_log_ms(first[0]["ts"])) / 1e3
    return n / seconds, sum(1 for s in scrapes if s == 200)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=300000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--build-dir", default=os.path.join(os.path.dirname(HERE), "build-bench"))
    p.add_argument("--baseline-build", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    build = os.path.abspath(a.build_dir)
    if not os.access(os.path.join(build, "flowwarden"), os.X_OK):
        sys.exit("no flowwarden in %s: build it first (Release)" % build)
    tmp = tempfile.mkdtemp(prefix="fw_admin_bench_")
    with StandIn() as s:
        bench = run_bench.Bench(a, s, tmp)
        bench.load("small", a.events, small_doc)
        modes = ["off", "on"] + (["baseline"] if a.baseline_build else [])
        rates = {m: [] for m in modes}
        scrapes = []
        for rep in range(a.repeat):
            for mode in modes:
                rate, k = run_s2(os.path.abspath(a.baseline_build) if mode == "baseline"
                                 else build, bench, "small", mode == "on")
                rates[mode].append(rate)
                if mode == "on":
                    scrapes.append(k)
                log("run %d, endpoint %s: %.0f events/s%s" % (
                    rep + 1, mode, rate, " (%d scrapes)" % k if mode == "on" else ""))
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    result = {"events": a.events, "repeat": a.repeat, "events_per_s_off": rates["off"],
              "events_per_s_on": rates["on"], "median_off": round(off),
              "median_on": round(on), "ratio": round(on / off, 4), "scrapes": scrapes}
    if a.baseline_build:
        base = statistics.median(rates["baseline"])
        result.update({"events_per_s_baseline": rates["baseline"], "median_baseline": round(base),
                       "ratio_on_to_baseline": round(on / base, 4)})
    print(json.dumps(result, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
