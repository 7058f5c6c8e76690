"""exactly_once = true with a sequenced DLQ (seed 004: dlq = { sequenced = true }, issue 39):
a read model that appends each order's number to its customer's list ($push, so a lost, doubled
or reordered event shows), a poison order whose customer's later orders are parked behind it,
kill -9 at random moments (300 orders and 3 kills; 3,000 and 10 with FW_CHAOS_LONG=1).

Every other customer's list is exact and in order; the poison's customer has nothing applied
from the poison on, and its sequence holds the poison and each later order once, in order
(sequenceIndex 0, 1, ...); a replay with the script fixed applies them in order, once."""
import os
import random
import threading
import time

from chaostest import LONG, StandInTestCase, figures
from fwtest import clean_env, run_cli

ORDERS = 3000 if LONG else 300
KILLS = 10 if LONG else 3
CUSTOMERS = 7
POISON = 40  # order 40, customer c5: its later orders park behind it

SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  retry = { max_attempts = 2, initial_delay = "20ms", max_delay = "50ms" },
  restart = { initial_delay = "100ms" },
  dlq = { sequenced = true, sequence_key = function(ctx) return ctx:full_document().customer end },
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "model"):update_one(
      { _id = order.customer }, { ["$push"] = { ns = order.n } }, { upsert = true })
    if order.bad and fw.env("FW_TEST_FIXED", "") == "" then
      error(fw.error("Validation", "bad order"))
    end
    report({ n = order.n })
  end }
"""


def order(n):
    return {"_id": n, "n": n, "customer": "c%d" % (n % CUSTOMERS), "bad": n == POISON}


class ExactlyOnceSequencedDlq(StandInTestCase):

    def model(self):
        return {d["_id"]: d["ns"] for d in self.db.model.find()}

    def want(self, upto, skip_poisoned=True):
        want = {}
        poisoned = order(POISON)["customer"]
        for n in range(upto):
            o = order(n)
            if skip_poisoned and o["customer"] == poisoned and n >= POISON:
                continue
            want.setdefault(o["customer"], []).append(n)
        return want

    def entries(self):
        return list(self.db["_fw_dlq"].find({"streamName": "totals"}).sort("sequenceIndex", 1))

    def write_all(self):
        for a in range(0, ORDERS, 50):
            self.db.orders.insert_many([order(n) for n in range(a, min(a + 50, ORDERS))])

    def test_kill9_keeps_the_parked_sequence_whole_and_every_other_key_exact(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_at = sorted(rng.sample(range(POISON // 2, ORDERS - 1), KILLS))
        script = self.script(SCRIPT)
        started = time.monotonic()
        p = self.run_fw(script)
        p.wait_open()
        writer = threading.Thread(target=self.write_all, daemon=True)
        writer.start()
        want = self.want(ORDERS)
        parked = [n for n in range(POISON, ORDERS) if n % CUSTOMERS == POISON % CUSTOMERS]

        checked = [0.0]

        def all_done():
            # Read at most every 0.2 s: wait_until asks under the log reader's lock.
            if writer.is_alive() or time.monotonic() - checked[0] < 0.2:
                return False
            checked[0] = time.monotonic()
            return self.model() == want and len(self.entries()) == len(parked)

        for target in kill_at:
            # A run killed just after an order's report may have committed every order written
            # (each order is its own transaction): the next run then has nothing to report (a
            # parked order reports nothing either), and is killed idle.
            p.wait_until(lambda: any(r["n"] >= target for r in p.reports()[-5:]) or all_done(),
                         timeout=120, what="order %d (seed %d)" % (target, seed))
            p.kill9()
            p = self.run_fw(script)
        writer.join()
        p.wait_open()
        self.wait_for(lambda: self.model() == want and len(self.entries()) == len(parked),
                      timeout=120, what="every other key applied and the sequence parked")
        self.assertEqual(p.stop(), 0)
        entries = self.entries()
        figures("exactly_once_sequenced_kill", seed=seed, orders=ORDERS, kills=KILLS,
                parked=len(entries), seconds="%.1f" % (time.monotonic() - started))
        self.assertEqual([e["fullDocument"]["n"] for e in entries], parked,
                         "the poison and each later order of its key once, in order (seed %d)"
                         % seed)
        self.assertEqual([e["sequenceIndex"] for e in entries], list(range(len(parked))))
        self.assertEqual(entries[0]["error"]["type"], "Validation")
        # Fixed: a replay applies the sequence in order, each once, in the
        # transactions of its writes (the DLQ is on the stream's own connection).
        cp = run_cli(["dlq", "replay", script, "--uri", self.uri],
                     env=clean_env({"FW_TEST_FIXED": "1"}), timeout=120)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(self.model(), self.want(ORDERS, skip_poisoned=False),
                         "every order applied once, in order, after the replay (seed %d)" % seed)
        self.assertEqual({e["status"] for e in self.entries()}, {"RESOLVED"})
