"""exactly_once with an incremental snapshot (issue 39): each snapshot row's
handler call commits its writes and the snapshot's progress past the row (the
`snapshot` field of the stream's checkpoint, `after: { _id }`) in one
transaction, as a change event commits its position. So kill -9 in the middle
of a snapshot resumes after the last committed row, and no row is applied twice
or skipped; the live events that come during and after it stay exactly once.

The read model is the README's $inc one (orders and amount per customer),
plus one counter per order (`applied`: each must end at 1). The collection
holds N orders before the first start (start_position = "snapshot"); M more
are inserted live, half while the snapshot runs and half after it finished,
with _ids above the snapshot's bound (`until`, stored by its first row), so
each order reaches the handler once: as a snapshot row or as an insert.
kill -9 at random moments across both (N = 1,500, M = 400, 4 kills, per event
into the stream's own deployment and with on_batch into another deployment;
FW_CHAOS_LONG=1: 20,000, 6,000 and 20). Under ha.mode = "leader" the leader
killed in the middle of the snapshot (inside a row's transaction, held there
by the test's HTTP gate): the standby resumes it after the last row the
leader committed, its rows fenced with its own epoch."""
import os
import random
import threading
import time

import pymongo

from chaostest import LONG, StandInTestCase, figures
from fwtest import StandIn, clean_env, needs_standin, run_cli
from read_model import IncReadModel
from test_exactly_once_ha import Gate

N = 20_000 if LONG else 1_500
M = 6_000 if LONG else 400
KILLS = 20 if LONG else 4
CUSTOMERS = 37
CHUNK = 100

APPLY = """
local function apply(ctx, conn)
  local order = ctx:full_document()
  local db = ctx:database_name()
  fw.mongo.collection(db, "customer_totals", conn):update_one({ _id = order.customer },
    { ["$inc"] = { orders = 1, amount = order.total } }, { upsert = true })
  fw.mongo.collection(db, "applied", conn):update_one({ _id = order._id },
    { ["$inc"] = { n = 1 } }, { upsert = true })
  report({ n = order.n })
end
"""

# exactly_once = true: the stream's own deployment; per event.
SCRIPT = APPLY + """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  checkpoint = { start_position = "snapshot" }, snapshot = { chunk_size = %d },
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" },
  restart = { initial_delay = "100ms" },
  on_snapshot = function(ctx) apply(ctx) end,
  on_insert = function(ctx) apply(ctx) end }
""" % CHUNK

# exactly_once = { connection = "sink" } with on_batch: a snapshot row is a call of its own
# (a batch of one), live events come in batches; every call one transaction on the sink.
BATCH_SCRIPT = APPLY + """
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.stream { name = "totals", collection = "orders", exactly_once = { connection = "sink" },
  checkpoint = { start_position = "snapshot" }, snapshot = { chunk_size = %d },
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" },
  restart = { initial_delay = "100ms" },
  on_batch = function(batch)
    for _, ctx in batch:events() do apply(ctx, { connection = "sink" }) end
  end }
""" % CHUNK


# ha.mode = "leader", a snapshot asked on demand (flowwarden snapshot): only the lease's holder
# hands out rows; each row's progress is fenced with the lease's epoch in its transaction. The
# row FW_TEST_GATE_AT, once applied and reported, waits inside its transaction on the test's
# gate (its first request is held, later ones answer at once): the leader is killed there,
# mid-snapshot and mid-row, whatever the machine's pace.
LEADER_SCRIPT = ('fw.defaults { ha = { mode = "leader", lease = "1000ms" } }\n'
                 + SCRIPT.replace('checkpoint = { start_position = "snapshot" }, ', '').replace(
                     'on_snapshot = function(ctx) apply(ctx) end',
                     'on_snapshot = function(ctx)\n    apply(ctx)\n'
                     '    if ctx:full_document().n == tonumber(fw.env("FW_TEST_GATE_AT")) then\n'
                     '      fw.http.get(fw.env("FW_TEST_GATE_URL"), { timeout = "100s" })\n'
                     '    end\n  end'))


def order(n):
    return {"_id": n, "n": n, "customer": "c%d" % (n % CUSTOMERS), "total": 1 + n % 11}


class ExactlyOnceSnapshot(IncReadModel, StandInTestCase):
    # A killed run's open transaction is killed by the next start (killSessions); the short
    # lifetime is a second net.
    standin_args = ("--transaction-lifetime-limit-seconds", "2")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sink = None

    @classmethod
    def tearDownClass(cls):
        if cls.sink:
            cls.sink_client.close()
            cls.sink.stop()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.sink_db = None
        self.env = None

    @property
    def model_db(self):
        return self.sink_db if self.sink_db is not None else self.db

    def progress(self):
        cp = self.model_db["_fw_checkpoints"].find_one({"_id": "totals"}) or {}
        return cp.get("snapshot") or {}

    def write_live(self, stop):
        """M live inserts above the snapshot's bound: half while it runs, half after."""
        deadline = time.monotonic() + 300
        while "until" not in self.progress() and time.monotonic() < deadline:
            if stop.wait(0.05):
                return
        half = N + M // 2
        for lo in range(N, half, 50):
            self.db.orders.insert_many([order(n) for n in range(lo, min(lo + 50, half))])
        while self.progress().get("state") != "done" and time.monotonic() < deadline:
            if stop.wait(0.05):
                return
        for lo in range(half, N + M, 50):
            self.db.orders.insert_many([order(n) for n in range(lo, min(lo + 50, N + M))])

    def test_kill9_during_and_after_the_snapshot_keeps_every_counter_exact(self):
        self.kill9_at_random_moments(SCRIPT, "exactly_once_snapshot_kill")

    @needs_standin("a second server started beside it (the sink deployment)")
    def test_batches_into_a_sink_kill9_during_and_after_the_snapshot_keep_every_counter_exact(
            self):
        cls = type(self)
        if cls.sink is None:
            cls.sink = StandIn(args=["--transaction-lifetime-limit-seconds", "2"])
            cls.sink.start()
            cls.sink_client = pymongo.MongoClient(cls.sink.uri)
        self.sink_db = cls.sink_client[self.db_name]
        self.env = clean_env({"SINK_URI": cls.sink.uri})
        try:
            self.kill9_at_random_moments(BATCH_SCRIPT, "exactly_once_snapshot_batch_kill")
            self.assertEqual(self.db.customer_totals.count_documents({}), 0,
                             "nothing of the read model on the source")
            self.assertIsNone(self.db["_fw_checkpoints"].find_one(
                {"_id": "totals", "snapshot": {"$exists": True}}),
                "the snapshot's progress is on the sink")
        finally:
            cls.sink_client.drop_database(self.db_name)

    def test_ha_leader_killed_during_the_snapshot_keeps_every_counter_exact(self):
        n = N // 2
        gate_at = n // 3
        gate = Gate()
        self.addCleanup(gate.close)
        env = clean_env({"FW_TEST_GATE_AT": str(gate_at), "FW_TEST_GATE_URL": gate.url})
        # Written before the first start (which starts from now): only the snapshot, asked once
        # both instances run, hands them to the handler.
        self.db.orders.insert_many([order(i) for i in range(n)])
        script = self.script(LEADER_SCRIPT)
        a = self.run_fw(script, extra=["--admin", "127.0.0.1:0"], env=env)
        a.wait_log("role: leader (epoch", timeout=30)
        a.wait_open()
        b = self.run_fw(script, env=env)
        b.wait_log("role: standby", timeout=30)
        r = run_cli(["snapshot", "totals", "--admin", "http://127.0.0.1:%d" % a.admin_port()])
        self.assertEqual(r.returncode, 0, r.stderr)
        # A third of the snapshot on the leader, its row gate_at held in its transaction: the
        # kill lands mid-snapshot, however late this thread runs.
        gate.wait_entered(120)
        a.kill9()
        b.wait_log("role: leader (epoch", timeout=30)
        try:
            self.wait_for(lambda: self.progress().get("state") == "done", timeout=120,
                          what="the new leader to finish the snapshot")
        except AssertionError:
            print("\n".join(m for m in b.messages() if "REPORT" not in m)[-6000:])
            print(self.db["_fw_checkpoints"].find_one({"_id": "totals"}), len(b.reports()))
            raise
        self.db.orders.insert_many([order(i) for i in range(n, n + 100)])
        self.wait_applied(n + 100)
        self.assertEqual(b.stop(), 0)
        self.assertLess(len(a.reports()), n, "the leader was killed before the snapshot ended")
        self.assertEqual(max(r["n"] for r in a.reports()), gate_at,
                         "the leader was killed in the row held at the gate")
        self.assertTrue(any("snapshot resuming" in m for m in b.messages()), b.messages())
        self.assertEqual({d["_id"]: d["n"] for d in self.db.applied.find()},
                         {i: 1 for i in range(n + 100)}, "every order applied once")
        self.assertEqual(self.totals(), self.want(self.db.orders.find()))
        cp = self.db["_fw_checkpoints"].find_one({"_id": "totals"})
        self.assertEqual(cp["snapshot"]["documents"], n)
        self.assertEqual(cp["epoch"], self.db["_fw_leases"].find_one({"_id": "totals"})["epoch"])
        self.assertGreaterEqual(cp["epoch"], 2)

    def kill9_at_random_moments(self, body, scenario):
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        # Half the kills while the snapshot runs (once it handed out a row past the target:
        # rows come by _id, n < N; live inserts have n >= N), half after it, among the live
        # inserts written once it finished.
        during = sorted(rng.sample(range(CHUNK, N - CHUNK), KILLS // 2))
        after = sorted(rng.sample(range(N + M // 2, N + M - 1), KILLS - KILLS // 2))
        kill_at = [(t, lambda r, t=t: t <= r["n"] < N) for t in during] + \
                  [(t, lambda r, t=t: r["n"] >= t) for t in after]
        for lo in range(0, N, 1000):
            self.db.orders.insert_many([order(n) for n in range(lo, min(lo + 1000, N))])
        script = self.script(body)
        started = time.monotonic()
        p = self.run_fw(script, env=self.env)
        stop = threading.Event()
        writer = threading.Thread(target=self.write_live, args=(stop,), daemon=True)
        writer.start()
        logs = []
        checked = [0.0]

        def nothing_to_report(during):
            """A run killed just after a row's report may have committed the snapshot's last
            row (then no row is left to report) or, after it, every order written (then no
            order is): the next run is killed idle. Read at most every 0.2 s: wait_until asks
            under the log reader's lock."""
            if time.monotonic() - checked[0] < 0.2:
                return False
            checked[0] = time.monotonic()
            done = self.progress().get("state") == "done"
            return done and (during or (not writer.is_alive() and self.applied() >= N + M))

        try:
            for target, past in kill_at:
                during = target < N
                p.wait_until(lambda: any(past(r) for r in p.reports())
                             or nothing_to_report(during), timeout=120,
                             what="order %d (seed %d)" % (target, seed))
                p.kill9()
                logs += [m for m in p.messages() if "REPORT" not in m]
                p = self.run_fw(script, env=self.env)
            writer.join(timeout=300)
            self.assertFalse(writer.is_alive(), "the live writes ended")
            self.wait_for(lambda: self.progress().get("state") == "done", timeout=120,
                          what="the snapshot to finish (seed %d)" % seed)
            self.wait_applied(N + M)
        finally:
            stop.set()
        self.assertEqual(p.stop(), 0)
        logs += [m for m in p.messages() if "REPORT" not in m]
        got, want = self.totals(), self.want(self.db.orders.find())
        counts = {d["_id"]: d["n"] for d in self.model_db.applied.find()}
        wrong = {k: v for k, v in counts.items() if v != 1}
        missing = [n for n in range(N + M) if n not in counts]
        applied = sum(v[0] for v in got.values())
        if got != want or wrong or missing:
            print("\n".join(logs[:80]))
        figures(scenario, seed=seed, rows=N, live=M, kills=KILLS, applied=applied,
                lost=len(missing), doubled=sum(v - 1 for v in wrong.values() if v > 1),
                seconds="%.1f" % (time.monotonic() - started))
        self.assertEqual(wrong, {}, "orders applied more than once (seed %d)" % seed)
        self.assertEqual(missing[:20], [], "orders never applied (seed %d)" % seed)
        self.assertEqual(got, want, "every counter exact after %d kills (seed %d)"
                         % (KILLS, seed))
        # Every row counted once in the snapshot's committed progress, whatever the kills.
        self.assertEqual(self.progress().get("documents"), N)
        self.assertTrue(any("snapshot resuming" in m for m in logs),
                        "a kill came while the snapshot ran (seed %d)" % seed)
