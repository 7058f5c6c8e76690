"""S6 and S6b with and without exactly_once (issue 39): one $inc upsert per
event over 100 groups (S6), or the same upserts as one unordered bulk_write
per on_batch batch (S6b, the batch defaults: up to 500 events, 20 ms),
drained from a backlog of N events on the stand-in; prints events/s and
flowwarden's CPU per event for each, and checks the counters.

  FW_BINARY=build/flowwarden python3 bench/exactly_once_bench.py \
      [N] [repeat] [scenarios] [save_every]

scenarios: a comma list of s6, s6b (default both); save_every: the
checkpoint's (default 1, flowwarden's default).
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import fwtest  # noqa: E402
import pymongo  # noqa: E402

HEAD = """
fw.stream { name = "s6", database = "bench", collection = "src", %s
  checkpoint = { save_every = %d },
"""

BODIES = {
    "s6": """
  on_insert = function(ctx)
    local doc = ctx:full_document()
    fw.mongo.collection("bench", "s6_totals"):update_one({ _id = doc.group },
      { ["$inc"] = { n = 1 } }, { upsert = true })
  end }
""",
    "s6b": """
  on_batch = function(batch)
    local ops = {}
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      ops[#ops + 1] = { update_one = { filter = { _id = d.group },
        update = { ["$inc"] = { n = 1 } }, upsert = true } }
    end
    fw.mongo.collection("bench", "s6_totals"):bulk_write(ops, { ordered = false })
  end }
""",
}


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(standin, tmp, scenario, n, exactly_once, save_every):
    client = pymongo.MongoClient(standin.uri)
    client.drop_database("bench")
    db = client.bench
    body = HEAD % ("exactly_once = true," if exactly_once else "", save_every) + BODIES[scenario]
    script = fwtest.write_script(tmp, body, name="%s_%d.lua" % (scenario, exactly_once))
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
    client.close()
    if done != n:
        raise RuntimeError("counters add up to %d, expected %d" % (done, n))
    return n / elapsed, cpu * 1e6 / n


def main():
    import tempfile
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    scenarios = sys.argv[3].split(",") if len(sys.argv) > 3 else ["s6", "s6b"]
    save_every = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    standin = fwtest.StandIn()
    standin.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for scenario in scenarios:
                rates = {}
                for eo in (False, True):
                    runs = [one(standin, tmp, scenario, n, eo, save_every)
                            for _ in range(repeat)]
                    best = max(runs)
                    rates[eo] = best[0]
                    print("%-4s exactly_once=%-5s events=%d save_every=%d  %.0f events/s  "
                          "%.0f us CPU/event (best of %d)"
                          % (scenario.upper(), eo, n, save_every, best[0], best[1], repeat),
                          flush=True)
                print("%-4s exactly_once at %.0f%% of without"
                      % (scenario.upper(), 100.0 * rates[True] / rates[False]), flush=True)
    finally:
        standin.stop()


if __name__ == "__main__":
    main()
