"""on_batch at volume (issue 30): a read model kept by one unordered
bulk_write per batch, with lanes = 4, after 5,000 mixed events (50,000 with
FW_CHAOS_LONG=1: inserts, updates of the total, deletes, at random, seeded),
read from a backlog. The model must equal a recomputation from the orders
themselves; batches are full-sized under the backlog (mean >= 100)."""
import random
import time
import unittest

import pymongo

from chaostest import SCALE, StandInTestCase, figures

EVENTS = 5000 * SCALE
SEED = 30

SCRIPT = """
fw.stream { name = "m", collection = "orders", lanes = 4, full_document = "updateLookup",
  retry = { max_attempts = 3, initial_delay = "50ms" }, dlq = true,
  checkpoint = { save_every = 500, save_interval = "200ms" },
  on_batch = function(batch)
    local model = fw.mongo.collection(batch:get(1):database_name(), "model")
    local ops = {}
    for _, ctx in batch:events() do
      local o = ctx:full_document()
      if ctx:operation_type() == "delete" or o == nil then
        ops[#ops + 1] = { delete_one = { filter = { _id = ctx:document_key()._id } } }
      else
        ops[#ops + 1] = { replace_one = { filter = { _id = o._id },
          replacement = { total = o.total }, upsert = true } }
      end
    end
    model:bulk_write(ops, { ordered = true })
    report({ n = #batch })
  end }
"""


def mixed_ops(rng, n):
    """n writes to orders, one change event each: inserts, a $set of a live order's total to
    a new value (setting the same value would be a no-op, without an event), deletes."""
    live, next_id, ops, total = [], 1, [], {}
    for _ in range(n):
        r = rng.random()
        if not live or r < 0.4:
            total[next_id] = rng.randrange(1000)
            ops.append(pymongo.InsertOne({"_id": next_id, "total": total[next_id]}))
            live.append(next_id)
            next_id += 1
        elif r < 0.85:
            k = rng.choice(live)
            total[k] += 1 + rng.randrange(1000)
            ops.append(pymongo.UpdateOne({"_id": k}, {"$set": {"total": total[k]}}))
        else:
            victim = live.pop(rng.randrange(len(live)))
            ops.append(pymongo.DeleteOne({"_id": victim}))
    return ops


class BatchReadModelTest(StandInTestCase):

    def test_read_model_equals_recomputation_after_mixed_events_with_lanes(self):
        script = self.script(SCRIPT)
        p = self.run_fw(script)
        p.wait_open()
        self.assertEqual(p.stop(), 0)  # the start's checkpoint: the events below are a backlog
        ops = mixed_ops(random.Random(SEED), EVENTS)
        for at in range(0, EVENTS, 5000):
            self.db.orders.bulk_write(ops[at:at + 5000], ordered=True)

        started = time.monotonic()
        p = self.run_fw(script)
        p.wait_until(lambda: sum(r["n"] for r in p.reports()) >= EVENTS, timeout=120 * SCALE,
                     what="%d events in batches" % EVENTS)
        got = p.reports()
        elapsed = time.monotonic() - started
        self.assertEqual(p.stop(), 0)

        want = {d["_id"]: d["total"] for d in self.db.orders.find()}
        model = {d["_id"]: d["total"] for d in self.db.model.find()}
        sizes = [r["n"] for r in got]
        figures("batch_read_model", events=EVENTS, batches=len(sizes),
                mean_batch="%.1f" % (sum(sizes) / len(sizes)), max_batch=max(sizes),
                orders=len(want), seconds="%.1f" % elapsed)
        self.assertEqual(sum(sizes), EVENTS, "every event in exactly one batch")
        self.assertEqual(model, want, "the read model equals the recomputation")
        self.assertGreaterEqual(sum(sizes) / len(sizes), 100, "batches under a backlog")
        self.assertEqual(list(self.db["_fw_dlq"].find()), [])


if __name__ == "__main__":
    unittest.main()
