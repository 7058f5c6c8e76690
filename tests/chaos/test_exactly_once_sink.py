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
  `flowwarden check` says what is exactly once.
- Switching exactly_once = true <-> { connection = "sink" } after a kill -9 inside a
  transaction: the start kills the sessions left where the transactions ran before.
- A holder deposed inside its transaction on the sink (leader mode after its write, shared
  mode before it): nothing of it committed on the sink, the event applied once.
- ha.mode = "shared", partitions = 2, two instances killed at random: every counter exact.
- `dlq replay` with the DLQ on the sink, killed inside its transaction: the next replay
  ends it and applies the entry once."""
import datetime
import os
import random
import subprocess
import threading
import time

import pymongo

from chaostest import LONG, StandInTestCase, figures
from read_model import IncReadModel
from fwtest import BINARY, StandIn, clean_env, needs_standin, run_cli
from test_exactly_once_ha import WAIT_FIRST, WRITE_FIRST, DeposedHolder, owned_by
from test_exactly_once_ha import ReadModel as HaReadModel

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
class WithSink:
    """A second stand-in as the sink deployment (self.sink, self.sink_client,
    self.sink_db), and self.env giving flowwarden its URI as SINK_URI."""
    sink_args = ()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sink = StandIn(args=list(cls.sink_args))
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


class ExactlyOnceIntoAnotherDeployment(WithSink, IncReadModel, StandInTestCase):
    # The sink's transactions of a killed run are killed by the next start
    # (killSessions on the sink); a short lifetime is kept as a second net.
    sink_args = ("--transaction-lifetime-limit-seconds", "2")

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
        self.run_with_kills(body, scenario, EVENTS, KILLS, lambda: self.write_all(0, EVENTS),
                            env=self.env)
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
class SwitchingWhereTheTransactionsRun(WithSink, StandInTestCase):
    """A stream killed inside its transaction, then started with its
    transactions on another deployment (exactly_once = true -> { connection =
    "sink" }, and back): the new start also kills the sessions recorded where
    the earlier run's transactions ran (the stream's own record names the
    sinks it used), so the document the killed transaction wrote is free at
    once, not after the server's default 60 s transactionLifetimeLimitSeconds
    (the stand-in, like mongod, makes a write outside the transaction wait
    for it)."""

    def kill_inside_a_transaction(self, body):
        p = self.run_fw(self.script(body, "first.lua"), env=dict(self.env, FW_TEST_BLOCK_AT="2"))
        p.wait_open()
        # One customer: its document exists (orders 0 and 1) when order 2's transaction
        # writes it, so a write outside the transaction waits for that one to end.
        self.db.orders.insert_many([{"_id": n, "n": n, "customer": "c", "total": 1}
                                    for n in range(3)])
        p.wait_until(lambda: any(r.get("blocking") == 2 for r in p.reports()), timeout=60,
                     what="the handler blocking in its transaction")
        p.kill9()

    def restart_and_write(self, body, locked):
        """Starts body, then writes the document the killed transaction holds
        (outside any transaction); returns the seconds that write took."""
        p = self.run_fw(self.script(body, "second.lua"), env=self.env)
        p.wait_open()
        started = time.monotonic()
        self.assertIsNotNone(locked.find_one({"_id": "c"}))
        locked.update_one({"_id": "c"}, {"$set": {"touched": True}})
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


@needs_standin("a second server started beside it (the sink deployment)")
class DeposedHolderOnASink(WithSink, DeposedHolder, StandInTestCase):
    """test_exactly_once_ha.py's deposed holder with the transactions on the sink: the lease
    (on the stream's deployment) is taken over while the holder's handler is inside its
    transaction on the sink; the new holder kills the sessions recorded on the sink and raises
    the sink's checkpoint's epoch, so the old holder commits nothing there (its write aborted,
    or, begun after the take-over, its checkpoint write matching no checkpoint of its epoch),
    the new one applies the event once. Leader mode (lease client cut off) after the write,
    shared mode (SIGSTOP) before it; the server's default transaction lifetime."""

    @property
    def model_db(self):
        return self.sink_db

    def extra_env(self):
        return {"SINK_URI": self.sink.uri}

    def sinked(self, body):
        return ('fw.connection { name = "sink", uri = fw.env("SINK_URI") }\n'
                + body.replace("exactly_once = true,", 'exactly_once = { connection = "sink" },', 1)
                .replace('"customer_totals")', '"customer_totals", { connection = "sink" })'))

    def test_leader_deposed_after_its_write_commits_nothing_on_the_sink(self):
        procs, old, took = self.leader(WRITE_FIRST)
        self.finish(procs, old, False, "exactly_once_sink_leader_deposed_after_write", took)
        self.assertEqual(self.db.customer_totals.count_documents({}), 0, "nothing on the source")

    def test_shared_holder_deposed_before_its_write_is_fenced_on_the_sink(self):
        procs, old, took = self.shared(WAIT_FIRST)
        self.finish(procs, old, True, "exactly_once_sink_shared_fenced", took)
        self.assertEqual(self.db.customer_totals.count_documents({}), 0, "nothing on the source")


SHARED_EVENTS = 6_000 if LONG else 600
SHARED_KILLS = 10 if LONG else 2
SHARED_SCRIPT = """
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.defaults { ha = { mode = "shared", lease = "1000ms" } }
fw.stream { name = "totals", collection = "orders", exactly_once = true, partitions = 2,
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" }, dlq = true,
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals", { connection = "sink" })
      :update_one({ _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
        { upsert = true })
    report({ n = order.n })
  end }
"""


@needs_standin("a second server started beside it (the sink deployment)")
class SharedUnitsIntoASink(WithSink, HaReadModel, StandInTestCase):
    """ha.mode = "shared", partitions = 2, two instances, the transactions on the sink: either
    instance killed with kill -9 at random moments and restarted at once (600 orders and 2
    kills; 6,000 and 10 with FW_CHAOS_LONG=1): every counter on the sink exact, nothing on the
    source, each unit's checkpoint on the sink fenced with its lease's epoch."""
    standin_args = ("--server-version", "7.0")  # partitions: $toHashedIndexKey

    @property
    def model_db(self):
        return self.sink_db

    def write_all(self):
        for lo in range(0, SHARED_EVENTS, 100):
            self.db.orders.insert_many([order(n) for n in
                                        range(lo, min(lo + 100, SHARED_EVENTS))])

    def test_two_instances_killed_at_random_keep_every_counter_on_the_sink_exact(self):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_at = sorted(rng.sample(range(1, SHARED_EVENTS - 1), SHARED_KILLS))
        script = self.script(self.pinned(SHARED_SCRIPT).replace(
            "exactly_once = true,", 'exactly_once = { connection = "sink" },', 1))
        procs = [self.run_fw(script, env=self.env), self.run_fw(script, env=self.env)]
        self.wait_for(lambda: sorted(len([u for u, o in self.holders().items()
                                          if owned_by(o, p)]) for p in procs) == [1, 1],
                      30, "one unit each")
        writer = threading.Thread(target=self.write_all, daemon=True)
        writer.start()
        dead = []
        for target in kill_at:
            self.wait_for(lambda: sum(p.report_count() for p in procs + dead) >= target, 120,
                          "order %d (seed %d)" % (target, seed))
            i = rng.randrange(2)
            procs[i].kill9()
            dead.append(procs[i])
            procs[i] = self.run_fw(script, env=self.env)
        writer.join()
        self.wait_applied(SHARED_EVENTS, 120)
        for p in procs:
            self.assertEqual(p.stop(), 0)
        figures("exactly_once_sink_shared_kill", seed=seed, events=SHARED_EVENTS,
                kills=SHARED_KILLS, applied=self.applied())
        self.assertEqual(self.totals(), self.want(self.db.orders.find()),
                         "every counter exact after %d kills (seed %d)" % (SHARED_KILLS, seed))
        self.assertEqual(self.db.customer_totals.count_documents({}), 0, "nothing on the source")
        for unit in ("totals#0/2", "totals#1/2"):
            lease = self.db["_fw_leases"].find_one({"_id": unit})
            cp = self.sink_db["_fw_checkpoints"].find_one({"_id": unit})
            self.assertEqual(cp["epoch"], lease["epoch"], "%s fenced on the sink" % unit)


REPLAY_SCRIPT = """
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.stream { name = "totals", collection = "orders", exactly_once = { connection = "sink" },
  dlq = { connection = "sink" }, retry = { max_attempts = 2, initial_delay = "20ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    local db = ctx:database_name()
    fw.mongo.collection(db, "customer_totals", { connection = "sink" })
      :update_one({ _id = order.customer }, { ["$inc"] = { orders = 1 } }, { upsert = true })
    if not fw.mongo.collection(db, "switch", { connection = "sink" }):find_one({ _id = "fixed" })
    then
      error(fw.error("Validation", "not fixed yet"))
    end
    if fw.env("FW_TEST_BLOCK", "") ~= "" then
      report({ blocking = order._id })
      while true do end -- its transaction stays open, holding the customer's document
    end
  end }
"""


def read_text(path):
    with open(path) as f:
        return f.read()


@needs_standin("a second server started beside it (the sink deployment)")
class ReplayIntoASink(WithSink, StandInTestCase):
    """`flowwarden dlq replay` of a dead letter on the sink's DLQ: the handler's writes and
    the entry's RESOLVED status commit in one transaction on the sink; a replay killed inside
    that transaction (the server's default 60 s lifetime) leaves its session recorded on the
    sink ("totals#replay#sessions"), and the next replay kills it there and applies the entry
    once, at once."""

    def replay(self, script, *args, env=None):
        return run_cli(["dlq", "replay", script, "--uri", self.uri, "--claim-ttl", "1s"]
                       + list(args), env=env or self.env, timeout=60)

    def test_a_replay_killed_in_its_transaction_on_the_sink_is_ended_by_the_next(self):
        script = self.script(REPLAY_SCRIPT)
        p = self.run_fw(script, env=self.env)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "customer": "ada"})
        self.wait_for(lambda: self.sink_db["_fw_dlq"].find_one(), what="the dead letter")
        self.assertEqual(p.stop(), 0)
        self.sink_db.switch.insert_one({"_id": "fixed"})
        log = os.path.join(self.tmp.name, "blocked-replay.log")
        with open(log, "w") as err:
            blocked = subprocess.Popen(
                [BINARY, "dlq", "replay", script, "--uri", self.uri, "--claim-ttl", "1s"],
                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                env=dict(self.env, FW_TEST_BLOCK="1"))
        try:
            # Its $inc on the sink is in (uncommitted), the handler spins in the transaction.
            self.wait_for(lambda: '"blocking"' in read_text(log), timeout=30,
                          what="the replay's handler blocking after its write")
            self.assertTrue(self.sink_db["_fw_checkpoints"].find_one(
                {"_id": "totals#replay#sessions"})["lsids"], "its session recorded on the sink")
        finally:
            blocked.kill()
            blocked.wait(timeout=10)
        killed = time.monotonic()
        self.wait_for(lambda: datetime.datetime.utcnow() > self.sink_db["_fw_dlq"].find_one()[
            "claimedUntil"] + datetime.timedelta(milliseconds=100), timeout=10,
            what="the claim's expiry")
        cp = self.replay(script)
        took = time.monotonic() - killed
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("in the transaction of its writes", cp.stdout + cp.stderr)
        self.assertLess(took, 30, "the replay waited out the 60 s transaction lifetime")
        self.assertEqual(self.sink_db.customer_totals.find_one({"_id": "ada"})["orders"], 1,
                         "applied once")
        self.assertEqual(self.sink_db["_fw_dlq"].find_one()["status"], "RESOLVED")
        self.assertIsNone(self.db.customer_totals.find_one(), "nothing on the source")
        self.assertEqual(self.sink_db["_fw_checkpoints"].find_one(
            {"_id": "totals#replay#sessions"})["lsids"], [])
