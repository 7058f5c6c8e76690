"""The lanes part of bench/run_bench.py (issue 16, `lanes = N`), run alone with
`--only lanes`:

  S3-lanes  S3 (walk the whole full document) on `large` (~4 KB) documents, each its own key:
            flowwarden with lanes = 1 and lanes = 2 (CPU-bound: the goal is >= 1.7x on 2 cores)
  S3x8      the same walk 8 times per event: a handler where CPU is all the work (S3's walk
            costs a few microseconds, about what reading and routing an event cost, so on 2
            cores its lanes = 2 figure is bounded by those, not by the lanes)
  S8        one HTTP POST per event to fw_http_sink --delay-ms 5 (a web hook that answers after
            5 ms) on 127.0.0.1: lanes = 1 and lanes = 16 (IO-bound: the goal is >= 10x)

Every figure is the median of --repeat runs, end to end (the stream's "starting on" to its last
event), checkpoints every 100 events, on its own stand-in. After each S8 run the server must have
got N valid POSTs with N distinct ids.
"""

import os
import statistics

import io_scenarios
from bench_docs import io_doc, large_doc
from bench_proc import log

PART = "lanes"
DELAY_MS = 5
CPU_LANES = (1, 2)
IO_LANES = (1, 16)


def s8_work(url):
    return ("fw.defaults { http = { allow_hosts = { \"127.0.0.1\" } } }\n"
            "local URL = %r\n" % url,
            "    local d = ctx:full_document()\n"
            "    local res = fw.http.post(URL, { json = { id = d._id, k = d.group } })\n"
            "    if res.status ~= 200 then error(\"HTTP status \" .. res.status) end\n")


def run(bench, db, repeat, fw_work, build_dir, n):
    """Loads the two data sets and measures; returns {"runs": ..., "rows": ..., "goals": ...}."""
    n_io = max(200, n // 10)
    bench.load("lanes_cpu", n, large_doc)
    bench.load("lanes_io", n_io, io_doc)
    sink = io_scenarios.HttpSink(os.path.join(build_dir, "fw_http_sink"), delay_ms=DELAY_MS)
    fw_work["s8"] = s8_work(sink.url)
    prelude, body = fw_work["s3"]
    fw_work["s3x8"] = (prelude, "    for _ = 1, 8 do\n  " + body.replace("\n", "\n  ").rstrip()
                       + "\n    end\n")
    raw = {}
    try:
        for rep in range(repeat):
            for sc in ("s3", "s3x8"):
                for lanes in CPU_LANES:
                    r = bench.run("flowwarden", "lanes_cpu", sc, lanes=lanes)
                    raw.setdefault((sc.upper(), lanes), []).append(r)
                    log("rep %d %s large lanes=%-2d %8.0f ev/s  %.2f us/ev" % (
                        rep + 1, sc.upper(), lanes, r["events_per_s"],
                        r["cpu_s"] / r["events"] * 1e6))
            for lanes in IO_LANES:
                sink.get("/_reset")
                r = bench.run("flowwarden", "lanes_io", "s8", lanes=lanes,
                              timeout=120 + n_io * DELAY_MS / 1000.0)
                st = sink.get("/_stats")
                io_scenarios.check_posts(st, n_io, "flowwarden lanes=%d" % lanes)
                raw.setdefault(("S8", lanes), []).append(r)
                log("rep %d S8 post+%dms lanes=%-2d %8.0f ev/s  %.2f us/ev" % (
                    rep + 1, DELAY_MS, lanes, r["events_per_s"],
                    r["cpu_s"] / r["events"] * 1e6))
    finally:
        sink.stop()
    rows = []
    for (sc, lanes), runs in sorted(raw.items()):
        rows.append({"scenario": sc, "lanes": lanes, "events": runs[0]["events"],
                     "events_per_s": statistics.median(r["events_per_s"] for r in runs),
                     "cpu_us_per_event": statistics.median(r["cpu_s"] / r["events"] * 1e6
                                                           for r in runs),
                     "runs": [round(r["events_per_s"]) for r in runs]})
    rate = {(r["scenario"], r["lanes"]): r["events_per_s"] for r in rows}
    goals = []
    for sc, lo, hi, target in (("S3", 1, 2, 1.7), ("S3X8", 1, 2, 1.7), ("S8", 1, 16, 10.0)):
        if (sc, lo) in rate and (sc, hi) in rate:
            x = rate[(sc, hi)] / rate[(sc, lo)]
            goals.append({"goal": "%s lanes = %d >= %.1fx lanes = %d" % (sc, hi, target, lo),
                          "met": x >= target, "measured": "%.2fx (%.0f vs %.0f events/s)"
                          % (x, rate[(sc, hi)], rate[(sc, lo)])})
    return {"rows": rows, "goals": goals, "delay_ms": DELAY_MS, "cpus": os.cpu_count()}


def print_table(L):
    if not L:
        return
    print("\nPer-key lanes (issue 16; %s CPUs; S8: POST answered after %d ms)"
          % (L["cpus"], L["delay_ms"]))
    print("%-6s %6s %8s %12s %10s  %s" % ("scen.", "lanes", "events", "events/s", "CPU us/ev",
                                          "runs"))
    for r in L["rows"]:
        print("%-6s %6d %8d %12.0f %10.2f  %s" % (r["scenario"], r["lanes"], r["events"],
                                                r["events_per_s"], r["cpu_us_per_event"],
                                                r["runs"]))
    for g in L["goals"]:
        print("goal %-28s %s  %s" % (g["goal"], "MET " if g["met"] else "NOT MET", g["measured"]))
