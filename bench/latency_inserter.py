#!/usr/bin/python3
"""Steady-rate inserter for the latency scenario (S5) of bench/run_bench.py.

    /usr/bin/python3 bench/latency_inserter.py --uri URI --db DB --coll COLL
        [--rate 2000] [--seconds 10]

Inserts small documents one insert_one at a time on a fixed schedule (document i is due at
start + i / rate; a late insert is sent at once, so the average rate holds). Each document
carries `seq` and `t_us`, the wall clock (time.time_ns() // 1000) taken just before its
insert_one is sent. Prints one JSON line: sent, seconds, achieved rate, worst lag behind the
schedule.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pymongo  # noqa: E402

from bench_docs import small_doc  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--uri", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--coll", required=True)
    p.add_argument("--rate", type=float, default=2000.0)
    p.add_argument("--seconds", type=float, default=10.0)
    a = p.parse_args()

    coll = pymongo.MongoClient(a.uri)[a.db][a.coll]
    coll.database.command("ping")
    total = int(a.rate * a.seconds)
    docs = [small_doc(i) for i in range(total)]
    worst_lag = 0.0
    start = time.monotonic()
    for i, d in enumerate(docs):
        due = start + i / a.rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        else:
            worst_lag = max(worst_lag, now - due)
        d["t_us"] = time.time_ns() // 1000
        coll.insert_one(d)
    elapsed = time.monotonic() - start
    print(json.dumps({"sent": total, "seconds": round(elapsed, 3),
                      "rate": round(total / elapsed, 1), "worst_lag_ms": round(worst_lag * 1e3, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
