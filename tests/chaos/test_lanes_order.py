"""Per-key order with lanes (issue 16) at volume: 8 lanes, 100,000 updates
(1,000,000 with FW_CHAOS_LONG=1) of documents drawn at random (seeded), every
event handled exactly once (no crash here) and each document's events in the
order they were written, while the keys really run in different lanes. The
key is the default one, the event's documentKey."""
import random
import time
import unittest

import pymongo

from chaostest import SCALE, StandInTestCase, figures

LANES = 8
EVENTS = 100000 * SCALE
KEYS = 1000
SEED = 16

SCRIPT = """
local STATE = string.format("%%p", {})
fw.stream {
  name = "s", collection = "c", lanes = %d,
  checkpoint = { save_every = 100 },
  on_update = function(ctx)
    report({ k = ctx:document_key()._id, n = ctx:update_description().updatedFields.n,
             st = STATE })
  end,
}
""" % LANES


class LanesOrderTest(StandInTestCase):

    def test_per_key_order_across_eight_lanes_with_random_keys(self):
        rng = random.Random(SEED)
        keys = [rng.randrange(KEYS) for _ in range(EVENTS)]
        # Each document's own counter: its n-th update sets n.
        seen, ops = {}, []
        for k in keys:
            seen[k] = seen.get(k, 0) + 1
            ops.append(pymongo.UpdateOne({"_id": k}, {"$set": {"n": seen[k]}}))
        self.db.c.insert_many([{"_id": k, "n": 0} for k in range(KEYS)])

        p = self.run_fw(self.script(SCRIPT))
        p.wait_open()
        started = time.monotonic()
        for at in range(0, EVENTS, 5000):
            self.db.c.bulk_write(ops[at:at + 5000], ordered=True)
        got = p.wait_reports(EVENTS, timeout=300 * SCALE)
        elapsed = time.monotonic() - started
        self.assertEqual(p.stop(), 0)

        per_key, lanes_of = {}, {}
        for r in got:
            per_key.setdefault(r["k"], []).append(r["n"])
            lanes_of.setdefault(r["k"], set()).add(r["st"])
        out_of_order = [k for k, ns in per_key.items() if ns != list(range(1, len(ns) + 1))]
        figures("lanes_order", lanes=LANES, events=EVENTS, keys=len(per_key),
                handled=len(got), out_of_order_keys=len(out_of_order),
                states=len({r["st"] for r in got}), seconds="%.1f" % elapsed)
        self.assertEqual(len(got), EVENTS, "every event handled once")
        self.assertEqual(p.report_count(), EVENTS)
        self.assertEqual(sorted(per_key), sorted(seen), "every key handled")
        self.assertEqual(out_of_order, [], "keys whose events ran out of order")
        for k, ns in per_key.items():
            self.assertEqual(len(ns), seen[k], "key %d: events handled" % k)
        # A key lives in one lane (its order depends on it); the keys are
        # spread over all of them.
        self.assertEqual([k for k, s in lanes_of.items() if len(s) != 1], [])
        self.assertEqual(len({r["st"] for r in got}), LANES, "every lane handled events")


if __name__ == "__main__":
    unittest.main()
