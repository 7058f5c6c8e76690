"""S6 with and without exactly_once (issue 39): one $inc upsert per event
over 100 groups, drained from a backlog of N events on the stand-in; prints
events/s and flowwarden's CPU per event for both, and checks the counters.

  FW_BINARY=build/flowwarden python3 bench/exactly_once_bench.py [N] [repeat]
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import fwtest  # noqa: E402
import pymongo  # noqa: E402

SCRIPT = """
fw.stream { name = "s6", database = "bench", collection = "src", %s
  checkpoint = { save_every = 100 },
  on_insert = function(ctx)
    local doc = ctx:full_document()
    fw.mongo.collection("bench", "s6_totals"):update_one({ _id = doc.group },
      { ["$inc"] = { n = 1 } }, { upsert = true })
  end }
"""


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(standin, tmp, n, exactly_once):
    client = pymongo.MongoClient(standin.uri)
    client.drop_database("bench")
    db = client.bench
    script = fwtest.write_script(tmp, SCRIPT % ("exactly_once = true," if exactly_once else ""),
                                 name="s6_%d.lua" % exactly_once)
    p = fwtest.Flowwarden(script, standin.uri)
    p.wait_open()
    p.stop()
    for lo in range(0, n, 1000):
        db.src.insert_many([{"group": i % 100} for i in range(lo, min(lo + 1000, n))])
    p = fwtest.Flowwarden(script, standin.uri)
    t0 = time.monotonic()
    while True:
        done = sum(d["n"] for d in db.s6_totals.find())
        if done >= n or time.monotonic() - t0 > 600:
            break
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    cpu = cpu_s(p.proc.pid)
    p.stop()
    if done != n:
        raise RuntimeError("counters add up to %d, expected %d" % (done, n))
    return n / elapsed, cpu * 1e6 / n


def main():
    import tempfile
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    standin = fwtest.StandIn()
    standin.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for eo in (False, True):
                runs = [one(standin, tmp, n, eo) for _ in range(repeat)]
                best = max(runs)
                print("S6 exactly_once=%-5s events=%d  %.0f events/s  %.0f us CPU/event "
                      "(best of %d)" % (eo, n, best[0], best[1], repeat))
    finally:
        standin.stop()


if __name__ == "__main__":
    main()
