"""exactly_once = { connection = "sink" } (issue 39) naming a MongoDB
deployment other than the stream's: the events are read on deployment A (the
class's stand-in), the read model is kept with $inc on deployment B (a second
stand-in, its own process), and each call's writes and the stream's
checkpoint (_fw_checkpoints on B) commit in one transaction on B. kill -9 at
random moments (2,000 events and 3 kills; 20,000 and 20 with FW_CHAOS_LONG=1)
leaves every counter exact; a restart resumes from B's checkpoint, even with
A's deleted; a write to "default" inside the call fails naming stream and
connection; `flowwarden check` says what is exactly once."""
import os
import random
import threading
import time

import pymongo

from chaostest import LONG, StandInTestCase, figures
from fwtest import StandIn, clean_env, needs_standin, run_cli

EVENTS = 20_000 if LONG else 2_000
KILLS = 20 if LONG else 3
CUSTOMERS = 37

SCRIPT = """
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.stream { name = "totals", collection = "orders", exactly_once = { connection = "sink" },
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" },
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals", { connection = "sink" })
      :update_one({ _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
        { upsert = true })
    report({ n = order.n })
  end }
"""


def order(n):
    return {"_id": n, "n": n, "customer": "c%d" % (n % CUSTOMERS), "total": 1 + n % 11}


@needs_standin("a second server started beside it (the sink deployment)")
class ExactlyOnceIntoAnotherDeployment(StandInTestCase):
    # The sink's transactions of a killed run are killed by the next start
    # (killSessions on the sink); a short lifetime is kept as a second net.
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sink = StandIn(args=["--transaction-lifetime-limit-seconds", "2"])
        cls.sink.start()
        cls.sink_client = pymongo.MongoClient(cls.sink.uri)

    @classmethod
    def tearDownClass(cls):
        cls.sink_client.close()
        cls.sink.stop()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.sink_db = self.sink_client[self.db_name]
        self.env = clean_env({"SINK_URI": self.sink.uri})

    def totals(self):
        return {d["_id"]: (d["orders"], d["amount"]) for d in self.sink_db.customer_totals.find()}

    def want(self, docs):
        want = {}
        for o in docs:
            c = want.setdefault(o["customer"], (0, 0))
            want[o["customer"]] = (c[0] + 1, c[1] + o["total"])
        return want

    def applied(self):
        return sum(v[0] for v in self.totals().values())

    def wait_applied(self, n, timeout=120):
        deadline = time.monotonic() + timeout
        while self.applied() < n and time.monotonic() < deadline:
            time.sleep(0.2)

    def write_all(self, lo, hi):
        for a in range(lo, hi, 250):
            self.db.orders.insert_many([order(n) for n in range(a, min(a + 250, hi))])

    def test_kill9_at_random_moments_keeps_every_counter_exact(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_at = sorted(rng.sample(range(1, EVENTS - 1), KILLS))
        script = self.script(SCRIPT)
        started = time.monotonic()
        p = self.run_fw(script, env=self.env)
        p.wait_open()
        writer = threading.Thread(target=self.write_all, args=(0, EVENTS), daemon=True)
        writer.start()
        for target in kill_at:
            p.wait_until(lambda: any(r["n"] >= target for r in p.reports()[-5:]), timeout=120,
                         what="event %d (seed %d)" % (target, seed))
            p.kill9()
            p = self.run_fw(script, env=self.env)
        writer.join()
        p.wait_open()
        self.wait_applied(EVENTS)
        self.assertEqual(p.stop(), 0)
        got, want = self.totals(), self.want(self.db.orders.find())
        applied = sum(v[0] for v in got.values())
        figures("exactly_once_sink_kill", seed=seed, events=EVENTS, kills=KILLS, applied=applied,
                lost=max(0, EVENTS - applied), doubled=max(0, applied - EVENTS),
                seconds="%.1f" % (time.monotonic() - started))
        self.assertEqual(got, want, "every counter exact after %d kills (seed %d)"
                         % (KILLS, seed))
        # The position is on the sink, and nothing of the read model on the source.
        self.assertIsNotNone(self.sink_db["_fw_checkpoints"].find_one({"_id": "totals"}))
        self.assertEqual(self.db.customer_totals.count_documents({}), 0)

    def test_restart_resumes_from_the_sink_s_checkpoint(self):
        script = self.script(SCRIPT)
        p = self.run_fw(script, env=self.env)
        p.wait_open()
        self.write_all(0, 50)
        self.wait_applied(50, timeout=60)
        self.assertEqual(p.stop(), 0)
        # Written while it is down, then the source's checkpoint deleted: without the sink's
        # checkpoint the stream would start from now and never see these.
        self.write_all(50, 80)
        self.assertEqual(self.db["_fw_checkpoints"].delete_many({"_id": "totals"}).deleted_count,
                         1)
        p = self.run_fw(script, env=self.env)
        p.wait_open()
        self.wait_applied(80, timeout=60)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), self.want(self.db.orders.find()))
        self.assertTrue(any("from its checkpoint" in m for m in p.messages()), p.messages())

    def test_write_to_the_stream_s_own_connection_fails_naming_stream_and_connection(self):
        script = self.script("""
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.stream { name = "eo", collection = "orders", exactly_once = { connection = "sink" },
  retry = { max_attempts = 1 },
  on_insert = function(ctx)
    local ok, err = pcall(function()
      fw.mongo.collection(ctx:database_name(), "inbox"):insert_one({ n = 1 })
    end)
    report({ ok = ok, kind = type(err) == "table" and err.kind or nil, msg = tostring(err) })
  end }
""")
        p = self.run_fw(script, env=self.env)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)
        r = p.reports()[0]
        self.assertFalse(r["ok"])
        self.assertIn('stream "eo" has exactly_once = { connection = "sink" }', r["msg"])
        self.assertIn('connection "default" cannot join its transaction', r["msg"])
        self.assertEqual(self.db.inbox.count_documents({}), 0)

    def test_check_says_which_effects_are_exactly_once(self):
        script = self.script(SCRIPT.replace('collection = "orders"',
                                            'database = "shop", collection = "orders"'))
        cp = run_cli(["check", script], env=self.env)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn('{ connection = "sink" }: fw.mongo reads and writes on connection "sink" '
                      'and the stream\'s checkpoint (in _fw_checkpoints there, database "shop") '
                      'commit in one transaction per event', cp.stdout)
        self.assertIn('fw.mongo on another connection ("default" too) fails the call', cp.stdout)
