"""exactly_once = true with the DLQ on the sink (issue 39): a poison event's
dead letter and the stream's position past it are one transaction. kill -9
while that commit is in flight leaves either both (the event never runs
again: its entry counts its attempts once) or neither (the event runs again
from nothing applied and is dead-lettered once); never a second delivery of
a dead-lettered event, and never a write of the poison's handler."""
import datetime
import os
import subprocess
import time

from chaostest import StandInTestCase
from fwtest import BINARY, clean_env, run_cli

MAX_ATTEMPTS = 3

SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  retry = { max_attempts = %d, initial_delay = "20ms", max_delay = "50ms" }, dlq = true,
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1 } }, { upsert = true })
    if order.total < 0 then error(fw.error("Validation", "negative total")) end
    report({ n = order.n })
  end }
""" % MAX_ATTEMPTS


class ExactlyOnceDeadLetter(StandInTestCase):
    command_log = True  # to see the dead letter's commitTransaction arrive
    standin_args = ("--transaction-lifetime-limit-seconds", "5")

    def commits(self):
        return len(self.commands("commitTransaction", db="admin"))

    def start_caught_up(self, script, n):
        """A running stream that has handled orders 0..n-1 (customer c0)."""
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_many([{"_id": i, "n": i, "customer": "c0", "total": 1}
                                    for i in range(n)])
        p.wait_reports(n, timeout=60)
        self.wait_for(lambda: (self.db.customer_totals.find_one({"_id": "c0"}) or {})
                      .get("orders") == n, what="%d orders applied" % n)
        return p

    def poison_under_blocked_commit(self, data):
        """Sends a poison event while the next commitTransaction (the dead
        letter's: the poison's attempts abort) is held by the server, and
        kills flowwarden while it is held."""
        script = self.script(SCRIPT)
        p = self.start_caught_up(script, 5)
        before = self.commits()
        self.fail_point({"times": 1}, dict(data, failCommands=["commitTransaction"],
                                           blockConnection=True, blockTimeMS=1500))
        self.db.orders.insert_one({"_id": 99, "n": 99, "customer": "poison", "total": -1})
        self.wait_for(lambda: self.commits() > before, what="the dead letter's commit")
        p.kill9()
        return script

    def finish(self, script):
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_one({"_id": 100, "n": 100, "customer": "c0", "total": 1})
        p.wait_until(lambda: any(r["n"] == 100 for r in p.reports()), timeout=60,
                     what="the event after the poison")
        self.assertEqual(p.stop(), 0)
        self.assertIsNone(self.db.customer_totals.find_one({"_id": "poison"}),
                          "nothing of the poison's handler applied")
        self.assertEqual(self.db.customer_totals.find_one({"_id": "c0"})["orders"], 6)
        entries = list(self.db["_fw_dlq"].find())
        self.assertEqual(len(entries), 1, "one dead letter")
        e = entries[0]
        self.assertEqual(e["attempts"], MAX_ATTEMPTS, "its attempts counted once: the "
                         "dead-lettered event was not delivered again")
        self.assertEqual([h["action"] for h in e["history"]], ["enqueued"])
        return e, p

    def test_commit_held_then_applied_brings_entry_and_position(self):
        script = self.poison_under_blocked_commit({})
        # The server finishes the held commit after the kill: entry and
        # position land together.
        entry = self.wait_for(lambda: self.db["_fw_dlq"].find_one(), what="the committed entry")
        cp = self.wait_for(lambda: (lambda c: c if c["lastProcessedToken"]["_data"] ==
                                    entry["eventId"] else None)(self.checkpoint("totals")),
                           timeout=10, what="the checkpoint at the poison")
        self.assertEqual(cp["lastProcessedToken"]["_data"], entry["eventId"])
        e, p = self.finish(script)
        self.assertEqual(e["_id"], entry["_id"])
        self.assertEqual(p.count_log("dead-lettered"), 0, "the poison did not run again")

    def test_commit_lost_brings_neither(self):
        script = self.poison_under_blocked_commit({"closeConnection": True})
        # The server drops the held commit: the restart runs the poison
        # again from nothing applied and dead-letters it once.
        e, p = self.finish(script)
        self.assertEqual(p.count_log("dead-lettered"), 1)
        self.assertEqual(self.checkpoint("totals")["lastProcessedToken"]["_data"] > e["eventId"],
                         True, "the position moved past the poison")

    def test_entry_and_checkpoint_in_one_transaction(self):
        # Watched on the sink: the entry's insert and the checkpoint's update
        # past the poison carry one lsid and txnNumber (one transaction).
        script = self.script(SCRIPT)
        p = self.start_caught_up(script, 2)
        with self.db.watch() as watch:
            self.db.orders.insert_one({"_id": 99, "n": 99, "customer": "poison", "total": -1})
            self.wait_for(lambda: self.db["_fw_dlq"].find_one(), what="the dead letter")
            events, deadline = [], time.monotonic() + 10
            while time.monotonic() < deadline:
                ev = watch.try_next()
                if ev is not None:
                    events.append(ev)
                if any(e["ns"]["coll"] == "_fw_dlq" for e in events) and \
                        sum(1 for e in events if e["ns"]["coll"] == "_fw_checkpoints"
                            and "txnNumber" in e) >= 1:
                    break
        self.assertEqual(p.stop(), 0)
        dlq = [e for e in events if e["ns"]["coll"] == "_fw_dlq"]
        self.assertEqual(len(dlq), 1)
        self.assertIn("txnNumber", dlq[0], "the entry was written in a transaction")
        same = [e for e in events if e["ns"]["coll"] == "_fw_checkpoints"
                and e.get("txnNumber") == dlq[0]["txnNumber"]
                and e.get("lsid") == dlq[0]["lsid"]]
        self.assertEqual(len(same), 1, "the checkpoint was written in the entry's transaction")


REPLAY_SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  retry = { max_attempts = 2, initial_delay = "20ms" }, dlq = true,
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1 } }, { upsert = true })
    local fixed = fw.mongo.collection(ctx:database_name(), "switch"):find_one({ _id = "fixed" })
    if not fixed then error(fw.error("Validation", "not fixed yet")) end
  end }
"""


class ExactlyOnceReplay(StandInTestCase):
    """`flowwarden dlq replay` of an exactly_once stream's dead letter, its DLQ
    on the sink: the handler's writes and the entry's RESOLVED status commit
    in one transaction. A replay killed while that commit is lost applies
    nothing and leaves the entry claimed; the next replay (once the claim has
    expired) applies it once. Without the transaction the killed replay's
    $inc would stay and the next replay would add it again."""
    command_log = True
    standin_args = ("--transaction-lifetime-limit-seconds", "5")

    def dead_letter_one(self, script):
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "customer": "ada"})
        self.wait_for(lambda: self.db["_fw_dlq"].find_one(), what="the dead letter")
        self.assertEqual(p.stop(), 0)
        self.assertIsNone(self.db.customer_totals.find_one(), "nothing of the failed calls")
        self.db.switch.insert_one({"_id": "fixed"})

    def replay(self, script, *args):
        return run_cli(["dlq", "replay", script, "--uri", self.uri] + list(args), timeout=60)

    def test_a_replay_resolves_its_entry_in_the_transaction_of_its_writes(self):
        script = self.script(REPLAY_SCRIPT)
        self.dead_letter_one(script)
        with self.db.watch() as watch:
            cp = self.replay(script)
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
            self.assertIn("in the transaction of its writes", cp.stdout + cp.stderr)
            events, deadline = [], time.monotonic() + 10
            while len(events) < 2 and time.monotonic() < deadline:
                ev = watch.try_next()
                if ev is None:
                    continue
                coll = ev["ns"]["coll"]
                resolved = (ev.get("updateDescription", {}).get("updatedFields", {})
                            .get("status") == "RESOLVED")
                if coll == "customer_totals" or (coll == "_fw_dlq" and resolved):
                    events.append(ev)
        self.assertEqual(self.db.customer_totals.find_one()["orders"], 1)
        entry = self.db["_fw_dlq"].find_one()
        self.assertEqual((entry["status"], entry["resolution"]), ("RESOLVED", "REPLAYED"))
        txns = {(str(e.get("lsid")), e.get("txnNumber")) for e in events}
        self.assertEqual(len(events), 2, events)
        self.assertEqual(len(txns), 1, "one transaction: %s" % txns)
        self.assertIsNotNone(events[0].get("txnNumber"))

    def test_a_replay_killed_while_its_commit_is_lost_applies_nothing(self):
        script = self.script(REPLAY_SCRIPT)
        self.dead_letter_one(script)
        before = self.commits()
        self.fail_point({"times": 1}, {"failCommands": ["commitTransaction"],
                                       "blockConnection": True, "blockTimeMS": 1500,
                                       "closeConnection": True})
        p = subprocess.Popen([BINARY, "dlq", "replay", script, "--uri", self.uri,
                              "--claim-ttl", "1s"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=clean_env(), stdin=subprocess.DEVNULL)
        try:
            self.wait_for(lambda: self.commits() > before, what="the replay's commit")
        finally:
            p.kill()
            p.wait(timeout=10)
        entry = self.db["_fw_dlq"].find_one()
        self.assertEqual(entry["status"], "REPROCESSING", "claimed, not resolved")
        self.assertIsNone(self.db.customer_totals.find_one(), "nothing applied")
        # The killed replay's claim expires (its claimedUntil passes).
        self.wait_for(lambda: datetime.datetime.utcnow() >
                      self.db["_fw_dlq"].find_one()["claimedUntil"] + datetime.timedelta(
                          milliseconds=100), timeout=10, what="the claim's expiry")
        cp = self.replay(script, "--claim-ttl", "1s")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(self.db.customer_totals.find_one()["orders"], 1, "applied once")
        self.assertEqual(self.db["_fw_dlq"].find_one()["status"], "RESOLVED")

    def commits(self):
        return len(self.commands("commitTransaction", db="admin"))


BLOCKING_REPLAY_SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  retry = { max_attempts = 2, initial_delay = "20ms" }, dlq = true,
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1 } }, { upsert = true })
    local fixed = fw.mongo.collection(ctx:database_name(), "switch"):find_one({ _id = "fixed" })
    if not fixed then error(fw.error("Validation", "not fixed yet")) end
    if fw.env("FW_TEST_BLOCK", "") ~= "" then
      report({ blocking = order._id })
      while true do end -- its transaction stays open, holding the customer's document
    end
    report({ n = order._id })
  end }
"""


def read_text(path):
    with open(path) as f:
        return f.read()


class ReplayKilledWithATransactionOpen(StandInTestCase):
    """A `dlq replay` killed inside its transaction, the server's DEFAULT
    transactionLifetimeLimitSeconds (60 s): the replay recorded its server
    session ("<stream>#replay#sessions" in _fw_checkpoints), so the next
    start, of `run` or of another replay, ends its open transaction with
    killSessions (MongoDB manual, killSessions: "Killing a session kills any
    in-progress operations in the session") instead of meeting WriteConflict
    on the documents it wrote for a minute; with a 2-attempt retry policy
    that would dead-letter the next event (run) or fail the entry (replay)."""
    dead_letter_one = ExactlyOnceReplay.dead_letter_one
    replay = ExactlyOnceReplay.replay

    def kill_replay_inside_its_transaction(self, script):
        self.dead_letter_one(script)
        log = os.path.join(self.tmp.name, "blocked-replay.log")
        with open(log, "w") as err:
            p = subprocess.Popen([BINARY, "dlq", "replay", script, "--uri", self.uri,
                                  "--claim-ttl", "1s"], stdout=subprocess.DEVNULL,
                                 stderr=err, stdin=subprocess.DEVNULL,
                                 env=clean_env({"FW_TEST_BLOCK": "1"}))
        try:
            # Its $inc is in (uncommitted), the handler spins in the transaction.
            self.wait_for(lambda: '"blocking"' in read_text(log), timeout=30,
                          what="the replay's handler blocking after its write")
        finally:
            p.kill()
            p.wait(timeout=10)
        self.assertEqual(self.db["_fw_dlq"].find_one()["status"], "REPROCESSING")
        return time.monotonic()

    def test_the_next_run_ends_a_killed_replay_s_transaction(self):
        script = self.script(BLOCKING_REPLAY_SCRIPT)
        killed = self.kill_replay_inside_its_transaction(script)
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_one({"_id": 2, "customer": "ada"})
        p.wait_until(lambda: any(r["n"] == 2 for r in p.reports()), timeout=60,
                     what="the event on the killed replay's document")
        took = time.monotonic() - killed
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.db.customer_totals.find_one({"_id": "ada"})["orders"], 1,
                         "the killed replay applied nothing, the new event once")
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 1, "nothing more dead-lettered")
        self.assertLess(took, 30, "the run waited out the 60 s transaction lifetime")
        self.assertGreaterEqual(p.count_log("ended 1 server session(s) of a killed dlq replay"), 1)

    def test_the_next_replay_ends_a_killed_replay_s_transaction(self):
        script = self.script(BLOCKING_REPLAY_SCRIPT)
        killed = self.kill_replay_inside_its_transaction(script)
        self.wait_for(lambda: datetime.datetime.utcnow() >
                      self.db["_fw_dlq"].find_one()["claimedUntil"] + datetime.timedelta(
                          milliseconds=100), timeout=10, what="the claim's expiry")
        cp = self.replay(script, "--claim-ttl", "1s")
        took = time.monotonic() - killed
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("ended 1 server session(s) of a killed dlq replay", cp.stdout + cp.stderr)
        self.assertEqual(self.db.customer_totals.find_one()["orders"], 1, "applied once")
        self.assertEqual(self.db["_fw_dlq"].find_one()["status"], "RESOLVED")
        self.assertLess(took, 30, "the replay waited out the 60 s transaction lifetime")
        rec = self.db["_fw_checkpoints"].find_one({"_id": "totals#replay#sessions"})
        self.assertEqual(rec["lsids"], [], "a replay that ends takes its session off the record")


DEFERRED_SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true, dlq = true,
  retry = { mode = "deferred", max_attempts = 4, initial_delay = "200ms", jitter = false },
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1 } }, { upsert = true })
    if order.fail_until and ctx:attempt_number() < order.fail_until then
      error(fw.error("Http.Timeout", "not yet"))
    end
    report({ n = order._id, attempt = ctx:attempt_number() })
  end }
"""


class ExactlyOnceDeferred(StandInTestCase):
    """retry.mode = "deferred" with exactly_once: the SCHEDULED entry commits
    with the checkpoint past its event, and the due retry that succeeds
    commits its writes with the entry's RESOLVED status; the failed attempts
    apply nothing."""

    def test_a_deferred_retry_applies_once_and_resolves_in_its_transaction(self):
        p = self.run_fw(self.script(DEFERRED_SCRIPT))
        p.wait_open()
        with self.db.watch() as watch:
            self.db.orders.insert_one({"_id": 1, "customer": "ada", "fail_until": 3})
            self.db.orders.insert_one({"_id": 2, "customer": "bob"})
            p.wait_until(lambda: any(r["n"] == 1 for r in p.reports()), timeout=30,
                         what="the deferred retry handled")
            entry = self.wait_for(lambda: (lambda e: e if e and e["status"] == "RESOLVED"
                                           else None)(self.db["_fw_dlq"].find_one()),
                                  what="RESOLVED")
            events, deadline = [], time.monotonic() + 10
            while len(events) < 2 and time.monotonic() < deadline:
                ev = watch.try_next()
                if ev is None:
                    continue
                resolved = (ev.get("updateDescription", {}).get("updatedFields", {})
                            .get("status") == "RESOLVED")
                if (ev["ns"]["coll"] == "customer_totals" and ev["documentKey"]["_id"] == "ada") \
                        or (ev["ns"]["coll"] == "_fw_dlq" and resolved):
                    events.append(ev)
        self.assertEqual(p.stop(), 0)
        self.assertEqual([r["attempt"] for r in p.reports() if r["n"] == 1], [3])
        self.assertEqual({d["_id"]: d["orders"] for d in self.db.customer_totals.find()},
                         {"ada": 1, "bob": 1}, "the failed attempts applied nothing")
        self.assertEqual(entry["resolution"], "REPLAYED")
        self.assertEqual(len(events), 2, events)
        self.assertEqual(len({(str(e.get("lsid")), e.get("txnNumber")) for e in events}), 1,
                         "the retry's write and the resolution in one transaction")
        self.assertIsNotNone(events[0].get("txnNumber"))
