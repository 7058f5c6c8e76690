"""exactly_once = { connection = "sink" } (issue 39) naming a MongoDB
deployment other than the stream's: the events are read on deployment A (the
class's stand-in), the read model is kept with $inc on deployment B (a second
stand-in, its own process), and each call's writes and the stream's
checkpoint (_fw_checkpoints on B) commit in one transaction on B.

- kill -9 at random moments (2,000 events and 3 kills, per event and with
  on_batch; 20,000 and 20 with FW_CHAOS_LONG=1): every counter exact.
- A restart resumes from B's checkpoint, even with A's deleted.
- A poison event with the DLQ on B: dead-lettered once there, applying nothing.
- ha.mode = "leader", the leader killed: B's checkpoint fenced with the
  lease's epoch (the lease stays on A), every counter exact.
- A write to "default" inside the call fails naming stream and connection;
  `flowwarden check` says what is exactly once."""
import os
import random
import threading
import time

import pymongo

from chaostest import LONG, StandInTestCase, figures
from read_model import IncReadModel
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


# The same read model as one bulk_write per batch: one transaction on the sink per call.
BATCH_SCRIPT = """
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.stream { name = "totals", collection = "orders", exactly_once = { connection = "sink" },
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" },
  restart = { initial_delay = "100ms" },
  on_batch = function(batch)
    local ops = {}
    for _, ctx in batch:events() do
      local order = ctx:full_document()
      ops[#ops + 1] = { update_one = { filter = { _id = order.customer },
        update = { ["$inc"] = { orders = 1, amount = order.total } }, upsert = true } }
    end
    fw.mongo.collection(batch:get(1):database_name(), "customer_totals", { connection = "sink" })
      :bulk_write(ops, { ordered = false })
    for _, ctx in batch:events() do report({ n = ctx:full_document().n }) end
  end }
"""

# A poison order (total < 0) writes, then fails: its dead letter goes to the sink's DLQ in the
# transaction of the position past it, its write never applied.
POISON_SCRIPT = SCRIPT.replace(
    "restart = {", 'dlq = { connection = "sink" }, restart = {').replace(
    "    report({ n = order.n })",
    "    if order.total < 0 then error(fw.error(\"Validation\", \"negative total\")) end\n"
    "    report({ n = order.n })").replace("max_attempts = 8", "max_attempts = 2")

# ha.mode = "leader": the lease on the source deployment, its epoch fencing the sink's checkpoint.
LEADER_SCRIPT = 'fw.defaults { ha = { mode = "leader", lease = "1000ms" } }\n' + SCRIPT


def order(n):
    return {"_id": n, "n": n, "customer": "c%d" % (n % CUSTOMERS), "total": 1 + n % 11}


@needs_standin("a second server started beside it (the sink deployment)")
class ExactlyOnceIntoAnotherDeployment(IncReadModel, StandInTestCase):
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

    @property
    def model_db(self):
        return self.sink_db

    def write_all(self, lo, hi):
        for a in range(lo, hi, 250):
            self.db.orders.insert_many([order(n) for n in range(a, min(a + 250, hi))])

    def test_kill9_at_random_moments_keeps_every_counter_exact(self):
        self.kill9_at_random_moments(SCRIPT, "exactly_once_sink_kill")

    def test_batches_kill9_at_random_moments_keep_every_counter_exact(self):
        self.kill9_at_random_moments(BATCH_SCRIPT, "exactly_once_sink_batch_kill")

    def kill9_at_random_moments(self, body, scenario):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_at = sorted(rng.sample(range(1, EVENTS - 1), KILLS))
        script = self.script(body)
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
        figures(scenario, seed=seed, events=EVENTS, kills=KILLS, applied=applied,
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

    def test_poison_event_on_the_sink_s_dlq_is_dead_lettered_once_and_applies_nothing(self):
        script = self.script(POISON_SCRIPT)
        docs = [order(n) for n in range(300)]
        docs[150]["total"] = -5
        p = self.run_fw(script, env=self.env)
        p.wait_open()
        self.db.orders.insert_many(docs[:200])
        p.wait_until(lambda: self.sink_db["_fw_dlq"].count_documents({}) == 1, timeout=60,
                     what="the poison's dead letter on the sink")
        p.kill9()  # maybe before the next checkpoint: the poison comes again
        p = self.run_fw(script, env=self.env)
        p.wait_open()
        self.db.orders.insert_many(docs[200:])
        self.wait_applied(299, timeout=60)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), self.want(d for d in docs if d["total"] >= 0))
        entries = list(self.sink_db["_fw_dlq"].find())
        self.assertEqual(len(entries), 1, "one dead letter, even after a kill")
        self.assertEqual(entries[0]["documentKey"], {"_id": 150})
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 0, "nothing on the source")

    def test_ha_leader_killed_keeps_every_counter_exact_and_fences_the_sink(self):
        script = self.script(LEADER_SCRIPT)
        a = self.run_fw(script, env=self.env)
        a.wait_open()
        b = self.run_fw(script, env=self.env)
        b.wait_log("role: standby", timeout=30)
        writer = threading.Thread(target=self.write_all, args=(0, 600), daemon=True)
        writer.start()
        a.wait_until(lambda: len(a.reports()) >= 200, timeout=60, what="200 events on a")
        a.kill9()
        b.wait_log("role: leader (epoch", timeout=30)
        writer.join()
        self.wait_applied(600, timeout=60)
        self.assertEqual(b.stop(), 0)
        self.assertEqual(self.totals(), self.want(self.db.orders.find()))
        lease = self.db["_fw_leases"].find_one({"_id": "totals"})
        sink_cp = self.sink_db["_fw_checkpoints"].find_one({"_id": "totals"})
        self.assertIsNotNone(lease)
        self.assertEqual(sink_cp["epoch"], lease["epoch"],
                         "the sink's checkpoint fenced with the lease's epoch")
        self.assertGreaterEqual(lease["epoch"], 2)


# A handler that blocks inside its transaction at order FW_TEST_BLOCK_AT, its write made:
# %s is the exactly_once setting, %s the connection option of its fw.mongo collection.
SWITCH_SCRIPT = """
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.stream { name = "totals", collection = "orders", exactly_once = %s,
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals"%s)
      :update_one({ _id = order.customer }, { ["$inc"] = { orders = 1 } }, { upsert = true })
    if order.n == tonumber(fw.env("FW_TEST_BLOCK_AT", "-1")) then
      report({ blocking = order.n })
      while true do end -- its transaction stays open, holding the customer's document
    end
    report({ n = order.n })
  end }
"""
ON_SOURCE = SWITCH_SCRIPT % ("true", "")
ON_SINK = SWITCH_SCRIPT % ('{ connection = "sink" }', ', { connection = "sink" }')


@needs_standin("a second server started beside it (the sink deployment)")
class SwitchingWhereTheTransactionsRun(StandInTestCase):
    """A stream killed inside its transaction, then started with its
    transactions on another deployment (exactly_once = true -> { connection =
    "sink" }, and back): the new start also kills the sessions recorded where
    the earlier run's transactions ran (the stream's own record names the
    sinks it used), so the document the killed transaction wrote is free at
    once, not after the server's default 60 s transactionLifetimeLimitSeconds
    (the stand-in, like mongod, makes a write outside the transaction wait
    for it)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sink = StandIn()
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

    def kill_inside_a_transaction(self, body):
        p = self.run_fw(self.script(body, "first.lua"), env=dict(self.env, FW_TEST_BLOCK_AT="2"))
        p.wait_open()
        self.db.orders.insert_many([order(n) for n in range(3)])
        p.wait_until(lambda: any(r.get("blocking") == 2 for r in p.reports()), timeout=60,
                     what="the handler blocking in its transaction")
        p.kill9()

    def restart_and_write(self, body, locked):
        """Starts body, then writes the document the killed transaction holds
        (outside any transaction); returns the seconds that write took."""
        p = self.run_fw(self.script(body, "second.lua"), env=self.env)
        p.wait_open()
        started = time.monotonic()
        locked.update_one({"_id": order(2)["customer"]}, {"$set": {"touched": True}})
        took = time.monotonic() - started
        self.assertEqual(p.stop(), 0)
        return took, p

    def test_from_true_to_a_sink_ends_the_sessions_on_the_stream_s_own_deployment(self):
        self.kill_inside_a_transaction(ON_SOURCE)
        took, p = self.restart_and_write(ON_SINK, self.db.customer_totals)
        figures("exactly_once_switch_to_sink", seconds="%.1f" % took)
        self.assertLess(took, 20, "the killed transaction was not waited out")
        self.assertGreaterEqual(p.count_log(
            'ended 1 server session(s) of an earlier run on connection "default"'), 1)

    def test_from_a_sink_to_true_ends_the_sessions_on_the_sink(self):
        self.kill_inside_a_transaction(ON_SINK)
        self.assertEqual(self.db["_fw_checkpoints"].find_one({"_id": "totals#sessions"})["sinks"],
                         ["sink"], "the stream's own record names the sink")
        took, p = self.restart_and_write(ON_SOURCE, self.sink_db.customer_totals)
        figures("exactly_once_switch_from_sink", seconds="%.1f" % took)
        self.assertLess(took, 20, "the killed transaction was not waited out")
        self.assertGreaterEqual(p.count_log(
            'ended 1 server session(s) of an earlier run on connection "sink"'), 1)
        rec = self.db["_fw_checkpoints"].find_one({"_id": "totals#sessions"})
        self.assertEqual(rec.get("sinks"), [], "the sink's sessions ended, it leaves the record")
