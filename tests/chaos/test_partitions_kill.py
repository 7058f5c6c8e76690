"""kill -9 of an instance running a stream with partitions = 6 (issue 31) while updates
arrive: every update handled at least once, each key's updates in order, each key always in
the partition its hash names (every run), and each partition resumes from its own checkpoint
(a restart repeats only a tail of what was handled before the crash). 3,000 updates over 100
keys with two kills; FW_CHAOS_LONG=1: 30,000 over 1,000 keys with twenty kills. One instance:
instances sharing partitions (ha.mode = "shared") are not built."""
import os
import random
import sys
import threading
import time
import unittest

import pymongo

from chaostest import LONG, SCALE, StandInTestCase, figures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standin"))
from fwstandin.hashing import hashed_index_key  # noqa: E402

N = 6
UPDATES = 3_000 * SCALE
KEYS = 1_000 if LONG else 100
KILLS = 2 * SCALE

SCRIPT = """
fw.stream { name = "p", collection = "c", partitions = %d,
  checkpoint = { save_every = 50, save_interval = "100ms" },
  restart = { initial_delay = "100ms" },
  on_update = function(ctx)
    local k = ctx:partition()
    report({ key = ctx:document_key()._id, n = ctx:update_description().updatedFields.n, p = k })
  end }
""" % N


class PartitionsKill(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def write_all(self):
        for lo in range(0, UPDATES, 500):
            self.db.c.bulk_write([pymongo.UpdateOne({"_id": i % KEYS}, {"$set": {"n": i}})
                                  for i in range(lo, min(lo + 500, UPDATES))])

    def test_kill9_loses_nothing_keeps_key_order_and_partitions(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_after = sorted(rng.sample(range(UPDATES // 10, UPDATES - UPDATES // 10), KILLS))
        self.db.c.insert_many([{"_id": k, "n": -1} for k in range(KEYS)])
        script = self.script(SCRIPT)
        started = time.monotonic()
        runs = []
        p = self.run_fw(script)
        p.wait_open(streams=N)
        writer = threading.Thread(target=self.write_all, daemon=True)
        writer.start()
        for target in kill_after:
            p.wait_until(lambda: p.report_count() >= target - sum(len(r) for r in runs),
                         timeout=60, what="%d reports (seed %d)" % (target, seed))
            p.kill9()
            runs.append(p.reports())
            p = self.run_fw(script)
            p.wait_open(streams=N)
        writer.join()

        def handled():
            seen = {r["n"] for rs in runs for r in rs}
            with p._cond:
                seen.update(r[1]["n"] for r in p._reports)
            return len(seen)
        p.wait_until(lambda: handled() >= UPDATES, timeout=120,
                     what="every update handled (seed %d)" % seed)
        self.assertEqual(p.stop(), 0)
        runs.append(p.reports())
        elapsed = time.monotonic() - started

        every = [r for rs in runs for r in rs]
        self.assertEqual({r["n"] for r in every}, set(range(UPDATES)), "seed %d" % seed)
        for r in every:  # always the partition its hash names
            self.assertEqual(r["p"], abs(hashed_index_key(r["key"])) % N, r)
        duplicates = 0
        for i, rs in enumerate(runs):
            per_key = {}
            for r in rs:
                per_key.setdefault(r["key"], []).append(r["n"])
            for key, ns in per_key.items():  # in order per key within a run
                self.assertEqual(ns, sorted(ns), "run %d key %s (seed %d)" % (i, key, seed))
        seen = set()
        for rs in runs:
            duplicates += sum(1 for r in rs if r["n"] in seen)
            seen.update(r["n"] for r in rs)
        figures("partitions_kill", seed=seed, partitions=N, updates=UPDATES, keys=KEYS,
                kills=KILLS, handled=len(every), duplicates=duplicates, lost=0,
                seconds="%.1f" % elapsed)


if __name__ == "__main__":
    unittest.main()
