"""exactly_once into PostgreSQL (issue 40) with examples/pg_orders.lua as
shipped: orders inserted and updated in MongoDB, copied to a PostgreSQL
table by the example, whose statements and the stream's position commit in
one SQL transaction.

A trigger on the table counts every applied statement (rows of a rolled-back
transaction vanish with it), so "0 lost, 0 doubled" is checked per order:
one application per change event, besides the table equal to the orders
collection (keys, and the sum of totals). kill -9 at random moments (2,000
orders and 4 kills; 20,000 and 20 with FW_CHAOS_LONG=1), and PostgreSQL
restarted twice in the middle (once with -m immediate, a crash): nothing
lost, nothing doubled, nothing dead-lettered.

examples/pg_orders_batch.lua, one SQL transaction per call of on_batch with
the position past its last event, under the same kill -9 loop. A batch
writes only each order's last change, so the count of applications is not
the count of events; each order is updated at most once instead, so each
(order, total) the trigger records stands for one change event: seen twice,
a batch was applied twice."""
import os
import random
import threading
import time
from decimal import Decimal

from chaostest import LONG, StandInTestCase, figures
from fwtest import SOURCE_DIR, clean_env
from pgserver import WithPgServer

ORDERS = 20_000 if LONG else 2_000
KILLS = 20 if LONG else 4
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "pg_orders.lua")
BATCH_EXAMPLE = os.path.join(SOURCE_DIR, "examples", "pg_orders_batch.lua")

SCHEMA = """
DROP TABLE IF EXISTS orders, applied, flowwarden_checkpoints;
CREATE TABLE orders (id text PRIMARY KEY, customer text, total numeric, status text, doc jsonb);
CREATE TABLE applied (id text, total numeric);
CREATE OR REPLACE FUNCTION count_applied() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN INSERT INTO applied VALUES (NEW.id, NEW.total); RETURN NEW; END $$;
CREATE TRIGGER count_applied AFTER INSERT OR UPDATE ON orders
  FOR EACH ROW EXECUTE FUNCTION count_applied();
"""


class ExactlyOncePg(WithPgServer, StandInTestCase):

    def setUp(self):
        super().setUp()
        self.pg.sql(SCHEMA)
        self.events = {}  # order id -> change events written (inserts + updates)
        self.rng = random.Random()

    def run_example(self, example=EXAMPLE):
        return self.run_fw(example, env=clean_env({"PG_URI": self.pg.uri()}))

    def write_orders(self, n):
        """Inserts n orders in chunks, updating a few earlier ones after each."""
        for lo in range(0, n, 100):
            docs = [{"_id": i, "customer": "c%d" % (i % 37), "total": 1 + i % 11,
                     "status": "new"} for i in range(lo, min(lo + 100, n))]
            self.db.orders.insert_many(docs)
            for d in docs:
                self.events[d["_id"]] = 1
            for i in self.rng.sample(range(0, min(lo + 100, n)), 20):
                self.db.orders.update_one({"_id": i}, {"$inc": {"total": 3},
                                                       "$set": {"status": "paid"}})
                self.events[i] += 1

    def applied(self):
        return int(self.pg.sql("SELECT count(*) FROM applied")[0][0])

    def wait_applied(self, n, timeout):
        deadline = time.monotonic() + timeout
        while self.applied() < n and time.monotonic() < deadline:
            time.sleep(0.2)

    def check_exact(self, what):
        """The table equals the collection; each event applied exactly once."""
        want = {str(d["_id"]): (d["customer"], Decimal(d["total"]), d["status"])
                for d in self.db.orders.find()}
        got = {r[0]: (r[1], Decimal(r[2]), r[3])
               for r in self.pg.sql("SELECT id, customer, total, status FROM orders")}
        self.assertEqual(sorted(got), sorted(want), "the same keys (%s)" % what)
        self.assertEqual(sum(v[1] for v in got.values()), sum(v[1] for v in want.values()),
                         "the same sum of totals (%s)" % what)
        self.assertEqual(got, want, what)
        counts = {r[0]: int(r[1]) for r in self.pg.sql(
            "SELECT id, count(*) FROM applied GROUP BY id")}
        want_counts = {str(k): v for k, v in self.events.items()}
        lost = sum(max(0, v - counts.get(k, 0)) for k, v in want_counts.items())
        doubled = sum(max(0, v - want_counts.get(k, 0)) for k, v in counts.items())
        self.assertEqual((lost, doubled), (0, 0), "events lost, doubled (%s)" % what)
        self.assertEqual(list(self.db["_fw_dlq"].find()), [], "nothing dead-lettered")
        return lost, doubled

    def test_kill9_at_random_moments_applies_every_event_once(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        self.rng.seed(seed)
        total = ORDERS * 6 // 5  # inserts and one update in five
        kill_at = sorted(self.rng.sample(range(1, total - 1), KILLS))
        started = time.monotonic()
        p = self.run_example()
        p.wait_open()
        writer = threading.Thread(target=self.write_orders, args=(ORDERS,), daemon=True)
        writer.start()
        for target in kill_at:
            deadline = time.monotonic() + 120
            while self.applied() < target and time.monotonic() < deadline:
                time.sleep(0.05)
            p.kill9()
            p = self.run_example()
        writer.join()
        p.wait_open()
        self.wait_applied(sum(self.events.values()), 180)
        self.assertEqual(p.stop(), 0)
        figures("exactly_once_pg_kill", seed=seed, orders=ORDERS,
                events=sum(self.events.values()), kills=KILLS, applied=self.applied(),
                seconds="%.1f" % (time.monotonic() - started))
        self.check_exact("after %d kills (seed %d)" % (KILLS, seed))
        self.assertEqual(p.count_log("resuming from the position committed"), 1)

    def test_postgresql_restarted_twice_loses_nothing(self):
        n = ORDERS // 2
        p = self.run_example()
        p.wait_open()
        writer = threading.Thread(target=self.write_orders, args=(n,), daemon=True)
        writer.start()
        for i, (at, mode) in enumerate(((n // 3, "fast"), (2 * n // 3, "immediate"))):
            self.wait_applied(at, 120)
            self.pg.stop(mode)
            time.sleep(1)  # down for a while: handlers meet refused connections
            self.pg.start()
        writer.join()
        self.wait_applied(sum(self.events.values()), 180)
        self.assertEqual(p.stop(), 0)
        self.assertGreater(p.count_log("Pg.Connection"), 0, "the restarts were seen")
        self.check_exact("PostgreSQL restarted twice")

    def write_orders_updated_once(self, n):
        """Inserts n orders in chunks, then updates a few earlier ones, each
        order at most once (its update's looked-up document is then the one
        after that update)."""
        fresh = []
        for lo in range(0, n, 100):
            docs = [{"_id": i, "customer": "c%d" % (i % 37), "total": 1 + i % 11,
                     "status": "new"} for i in range(lo, min(lo + 100, n))]
            self.db.orders.insert_many(docs)
            fresh.extend(d["_id"] for d in docs)
            for i in self.rng.sample(fresh, min(20, len(fresh))):
                fresh.remove(i)
                self.db.orders.update_one({"_id": i}, {"$inc": {"total": 3},
                                                       "$set": {"status": "paid"}})

    def table_matches(self):
        rows = self.pg.sql("SELECT count(*), coalesce(sum(total), 0) FROM orders")[0]
        want = list(self.db.orders.aggregate([{"$group": {"_id": None, "n": {"$sum": 1},
                                                          "t": {"$sum": "$total"}}}]))
        return bool(want) and (int(rows[0]), Decimal(rows[1])) == (want[0]["n"],
                                                                     Decimal(want[0]["t"]))

    def test_on_batch_kill9_at_random_moments_applies_each_batch_once(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        self.rng.seed(seed)
        kill_at = sorted(self.rng.sample(range(1, ORDERS - 1), KILLS))
        started = time.monotonic()
        p = self.run_example(BATCH_EXAMPLE)
        p.wait_open()
        writer = threading.Thread(target=self.write_orders_updated_once, args=(ORDERS,),
                                  daemon=True)
        writer.start()
        for target in kill_at:
            deadline = time.monotonic() + 120
            while self.applied() < target and time.monotonic() < deadline:
                time.sleep(0.05)
            p.kill9()
            p = self.run_example(BATCH_EXAMPLE)
        writer.join()
        p.wait_open()
        deadline = time.monotonic() + 180
        while not self.table_matches() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(p.stop(), 0)
        doubled = self.pg.sql("SELECT id, total, count(*) FROM applied GROUP BY id, total "
                              "HAVING count(*) > 1 ORDER BY id LIMIT 10")
        figures("exactly_once_pg_batch_kill", seed=seed, orders=ORDERS, kills=KILLS,
                applied=self.applied(), doubled=len(doubled),
                seconds="%.1f" % (time.monotonic() - started))
        want = {str(d["_id"]): (d["customer"], Decimal(d["total"]), d["status"])
                for d in self.db.orders.find()}
        got = {r[0]: (r[1], Decimal(r[2]), r[3])
               for r in self.pg.sql("SELECT id, customer, total, status FROM orders")}
        what = "after %d kills (seed %d)" % (KILLS, seed)
        self.assertEqual(sorted(got), sorted(want), "the same keys (%s)" % what)
        self.assertEqual(sum(v[1] for v in got.values()), sum(v[1] for v in want.values()),
                         "the same sum of totals (%s)" % what)
        self.assertEqual(got, want, what)
        self.assertEqual(doubled, [], "changes applied twice (%s)" % what)
        self.assertEqual(list(self.db["_fw_dlq"].find()), [], "nothing dead-lettered")
        self.assertEqual(p.count_log("resuming from the position committed"), 1)
