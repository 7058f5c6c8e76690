"""ha.mode = "shared" (issue 31): three instances share a stream with partitions = 6 (lease 1 s)
while updates arrive, and one is killed with kill -9 mid-run. Every update is handled at least
once; each key's updates in order within each instance; each key always in the partition its
hash names; while all three run each holds two units and handles at least 15% of the events;
the killed instance's units are taken within about lease + 2 x lease / 3 + 250 ms (its leases
and member document expire; the survivors count the members every lease / 3 and read a free
lease within 250 ms), asserted with a margin at 2 x lease + 500 ms from the kill to the
survivors' log lines of their takes. 3,000 updates over 100 keys; FW_CHAOS_LONG=1: 30,000 over 1,000."""
import datetime
import os
import random
import sys
import threading
import time

import pymongo

from chaostest import LONG, SCALE, StandInTestCase, figures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standin"))
from fwstandin.hashing import hashed_index_key  # noqa: E402

N = 6
LEASE_MS = 1000
UPDATES = 3_000 * SCALE
KEYS = 1_000 if LONG else 100

SCRIPT = """
fw.defaults { ha = { mode = "shared", lease = "%dms" } }
fw.stream { name = "p", collection = "c", partitions = %d,
  checkpoint = { save_every = 50, save_interval = "100ms" },
  restart = { initial_delay = "100ms" },
  on_update = function(ctx)
    local k = ctx:partition()
    report({ key = ctx:document_key()._id, n = ctx:update_description().updatedFields.n, p = k })
  end }
""" % (LEASE_MS, N)


class SharedUnits(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def holders(self):
        now = self.db.command("hello")["localTime"]
        return {d["_id"]: d["owner"] for d in self.db["_fw_leases"].find()
                if d.get("owner") and d["expiresAt"] > now}

    def counts(self):
        per = {}
        for owner in self.holders().values():
            per[owner] = per.get(owner, 0) + 1
        return sorted(per.values())

    @staticmethod
    def take_over_time(survivors, dead, killed, units):
        """Seconds from the kill of `dead` (time.time() just before it) to the last take of
        its `units` units, from the survivors' log lines of their takes (their ts): how fast
        this test polls the leases adds nothing."""
        needle, owner = "it had no live holder for", ":%d:" % dead.proc.pid

        def takes():
            out = []
            for p in survivors:
                with p._cond:
                    out += [r["ts"] for r in p.records
                            if needle in r.get("msg", "") and owner in r.get("msg", "")]
            return out
        deadline = time.monotonic() + 10
        while len(takes()) < units:
            if time.monotonic() > deadline:
                raise AssertionError("the survivors logged %d take(s) of the killed instance's "
                                     "units, not %d" % (len(takes()), units))
            time.sleep(0.02)
        return max(datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ")
                   .replace(tzinfo=datetime.timezone.utc).timestamp() for t in takes()) - killed

    def started(self):
        return self.units_started("p", N)

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return time.monotonic()
            time.sleep(0.02)
        raise AssertionError("timed out after %.1f s waiting for %s (holders %s)"
                             % (timeout, what, self.holders()))

    def write_all(self, pace):
        for lo in range(0, UPDATES, 100):
            self.db.c.bulk_write([pymongo.UpdateOne({"_id": i % KEYS}, {"$set": {"n": i}})
                                  for i in range(lo, min(lo + 100, UPDATES))])
            time.sleep(pace)

    def test_three_share_then_one_is_killed(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        self.db.c.insert_many([{"_id": k, "n": -1} for k in range(KEYS)])
        script = self.script(SCRIPT)
        procs = [self.run_fw(script) for _ in range(3)]
        self.wait_for(lambda: self.counts() == [2, 2, 2] and self.started(), 15,
                      "two units each, every unit started")
        writer = threading.Thread(target=self.write_all, args=(0.02,), daemon=True)
        writer.start()
        victim = procs[rng.randrange(3)]
        self.wait_for(lambda: sum(p.report_count() for p in procs) >= UPDATES // 3, 60,
                      "a third of the updates (seed %d)" % seed)
        before = [p.report_count() for p in procs]
        killed = time.time()
        victim.kill9()
        self.wait_for(lambda: self.counts() == [3, 3], LEASE_MS / 1000 * 5,
                      "the survivors holding three units each")
        survivors = [p for p in procs if p is not victim]
        takeover = self.take_over_time(survivors, victim, killed, 2)
        writer.join()

        def seen():
            out = set()
            for p in procs:
                with p._cond:
                    out.update(r[1]["n"] for r in p._reports)
            return out
        try:
            self.wait_for(lambda: len(seen()) >= UPDATES, 120, "every update (seed %d)" % seed)
        except AssertionError:
            missing = sorted(set(range(UPDATES)) - seen())
            units = sorted({abs(hashed_index_key(n % KEYS)) % N for n in missing})
            for p in survivors:
                print("--- %d:\n%s" % (p.proc.pid, "\n".join(
                    m for m in p.messages() if "REPORT" not in m)[-6000:]))
            raise AssertionError("%d updates never handled (first %s), of units %s (seed %d)"
                                 % (len(missing), missing[:10], units, seed))
        for p in survivors:
            self.assertEqual(p.stop(), 0)

        every = [r for p in procs for r in p.reports()]
        self.assertEqual({r["n"] for r in every}, set(range(UPDATES)), "seed %d" % seed)
        for r in every:
            self.assertEqual(r["p"], abs(hashed_index_key(r["key"])) % N, r)
        for p in procs:  # each instance handled each key's updates in order
            per_key = {}
            for r in p.reports():
                per_key.setdefault(r["key"], []).append(r["n"])
            for key, ns in per_key.items():
                self.assertEqual(ns, sorted(ns), "key %s (seed %d)" % (key, seed))
        total = sum(before)
        for b in before:  # a fair share while all three ran
            self.assertGreaterEqual(b, 0.15 * total, "%s (seed %d)" % (before, seed))
        self.assertLess(takeover, (2 * LEASE_MS + 500) / 1000,
                        "takeover %.2f s (seed %d)" % (takeover, seed))
        figures("shared_units", seed=seed, instances=3, partitions=N, updates=UPDATES,
                keys=KEYS, handled=len(every), duplicates=len(every) - UPDATES,
                lost=UPDATES - len({r["n"] for r in every}),
                shares_before_kill="/".join(str(b) for b in before),
                takeover_s="%.2f" % takeover)
