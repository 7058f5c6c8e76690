"""exactly_once = true (issue 39): a read model kept with $inc (README's
handler) commits its writes and the stream's checkpoint in one transaction,
so kill -9 at random moments leaves every counter exact: 0 lost, 0 doubled
(3,000 events and 4 kills; 20,000 and 20 with FW_CHAOS_LONG=1). A poison
event ends in the DLQ once and applies nothing; a write to another
connection inside the call fails with an error naming stream and
connection."""
import os
import signal
import threading
import time
import unittest

from chaostest import LONG, StandInTestCase, figures
from fwtest import clean_env, run_cli
from read_model import IncReadModel

EVENTS = 20_000 if LONG else 3_000
KILLS = 20 if LONG else 4
CUSTOMERS = 37

SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" }, dlq = true,
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    if order.total < 0 then
      fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
        { _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
        { upsert = true })
      error(fw.error("Validation", "negative total"))
    end
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
      { upsert = true })
    report({ n = order.n })
  end }
"""

# The same read model as one bulk_write per batch (issue 39: one transaction per batch, bisection
# isolating the poison event, each sub-batch its own transaction).
BATCH_SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  retry = { max_attempts = 8, initial_delay = "100ms", max_delay = "1s" }, dlq = true,
  restart = { initial_delay = "100ms" },
  on_batch = function(batch)
    local ops, poison = {}, nil
    for i, ctx in batch:events() do
      local order = ctx:full_document()
      ops[#ops + 1] = { update_one = { filter = { _id = order.customer },
        update = { ["$inc"] = { orders = 1, amount = order.total } }, upsert = true } }
      if order.total < 0 then poison = i end
    end
    fw.mongo.collection(batch:get(1):database_name(), "customer_totals")
      :bulk_write(ops, { ordered = false })
    if poison then batch:fail(poison, fw.error("Validation", "negative total")) end
    for _, ctx in batch:events() do report({ n = ctx:full_document().n }) end
  end }
"""


def order(n):
    return {"_id": n, "n": n, "customer": "c%d" % (n % CUSTOMERS), "total": 1 + n % 11}


class ExactlyOnce(IncReadModel, StandInTestCase):
    # A killed instance's open transaction is killed by the next start
    # (killSessions on the recorded session, KilledWithATransactionOpen);
    # the short lifetime and the longer retry policy here are kept as a
    # second net.
    standin_args = ("--transaction-lifetime-limit-seconds", "2",
                    "--server-version", "7.0")  # partitions: $toHashedIndexKey

    def want(self, docs):
        return super().want([o for o in docs if o["total"] >= 0])  # a poison applies nothing

    def write_all(self, events):
        for lo in range(0, events, 250):
            self.db.orders.insert_many([order(n) for n in range(lo, min(lo + 250, events))])

    def test_kill9_at_random_moments_keeps_every_counter_exact(self):
        self.kill9_at_random_moments(SCRIPT, "exactly_once_kill")

    def test_batches_kill9_at_random_moments_keep_every_counter_exact(self):
        self.kill9_at_random_moments(BATCH_SCRIPT, "exactly_once_batch_kill")

    def kill9_at_random_moments(self, body, scenario):
        self.run_with_kills(body, scenario, EVENTS, KILLS, lambda: self.write_all(EVENTS))
        self.assertEqual(list(self.db["_fw_dlq"].find()), [])

    def test_partitions_each_commit_their_own_checkpoint_across_a_kill(self):
        script = self.script(SCRIPT.replace('exactly_once = true,',
                                            'exactly_once = true, partitions = 2,'))
        n = 600
        p = self.run_fw(script)
        p.wait_open(streams=2)
        writer = threading.Thread(target=self.write_all, args=(n,), daemon=True)
        writer.start()
        p.wait_until(lambda: len(p.reports()) >= n // 3, timeout=60, what="a third")
        p.kill9()
        writer.join()
        p = self.run_fw(script)
        p.wait_open(streams=2)
        deadline = time.monotonic() + 60
        while self.applied() < n and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), self.want(self.db.orders.find()))
        ids = sorted(d["_id"] for d in self.db["_fw_checkpoints"].find(
            {"lastProcessedToken": {"$exists": True}}))
        self.assertEqual(ids, ["totals#0/2", "totals#1/2"])

    def test_reload_switching_exactly_once_on_restarts_the_stream(self):
        plain = SCRIPT.replace("exactly_once = true,", "")
        script = self.script(plain)
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_many([order(n) for n in range(100)])
        p.wait_until(lambda: len(p.reports()) >= 100, timeout=30, what="100 events")
        with open(self.script(SCRIPT, name="eo.lua")) as eo, open(script, "w") as f:
            f.write(eo.read())
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log("source changed by reload", timeout=30)
        self.db.orders.insert_many([order(n) for n in range(100, 200)])
        deadline = time.monotonic() + 30
        while self.applied() < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), self.want(self.db.orders.find()))

    def test_poison_event_is_dead_lettered_once_and_applies_nothing(self):
        self.poison_event_dead_lettered_once(SCRIPT)

    def test_batch_bisection_dead_letters_the_poison_once_and_applies_nothing(self):
        # Each call's transaction aborts while the poison is in it; bisection ends with it
        # alone on the per-event path (its own transaction, aborted), dead-lettered once.
        runs = self.poison_event_dead_lettered_once(BATCH_SCRIPT.replace(
            "max_attempts = 8", "max_attempts = 2"))
        # The first run met the poison; the second only when the kill came before a
        # checkpoint past it.
        self.assertGreaterEqual(sum(r.count_log("with exactly_once the call's transaction is "
                                                "aborted") for r in runs), 1)

    def poison_event_dead_lettered_once(self, body):
        script = self.script(body)
        docs = [order(n) for n in range(300)]
        docs[150]["total"] = -5
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_many(docs[:200])
        p.wait_until(lambda: self.db["_fw_dlq"].count_documents({}) == 1, timeout=60,
                     what="the poison's dead letter")
        first = p
        p.kill9()  # maybe before the next checkpoint: the poison comes again
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_many(docs[200:])
        deadline = time.monotonic() + 60
        while self.applied() < 299 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), self.want(docs))
        entries = list(self.db["_fw_dlq"].find())
        self.assertEqual(len(entries), 1, "one dead letter, even after a kill")
        self.assertIn("negative total", str(entries[0]))
        self.assertEqual(entries[0]["documentKey"], {"_id": 150})
        return first, p

    def one_event_under_fail_point(self, data, times, body=SCRIPT, n=1):
        script = self.script(body)
        p = self.run_fw(script)
        p.wait_open()
        fail = dict(data, failCommands=["commitTransaction"])
        if n > 1:  # a backlog: read as one batch, whose commit may come before wait_open returns
            self.assertEqual(p.stop(), 0)
            self.db.orders.insert_many([order(7 + CUSTOMERS * i) for i in range(n)])
            self.fail_point({"times": times}, fail)
            p = self.run_fw(script)
            p.wait_open()
        else:
            self.fail_point({"times": times}, fail)
            self.db.orders.insert_one(order(7))
        p.wait_reports(n, timeout=30)
        deadline = time.monotonic() + 30
        while self.applied() < n and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), self.want([order(7 + CUSTOMERS * i) for i in range(n)]),
                         "applied once")
        self.assertEqual(self.checkpoint("totals")["lastProcessedToken"]["_data"] is not None, True)
        return p

    def test_transient_transaction_error_at_commit_retries_the_attempt(self):
        # MongoDB's manual, "Drivers API": an error labelled
        # TransientTransactionError means the whole transaction may be retried.
        p = self.one_event_under_fail_point(
            {"errorCode": 112, "errorLabels": ["TransientTransactionError"]}, 1)
        self.assertEqual(p.count_log("attempt 1 failed"), 1)
        self.assertEqual(p.count_log("commitTransaction on exactly_once.transaction"), 1)

    def test_transient_transaction_error_at_a_batch_s_commit_retries_the_batch(self):
        p = self.one_event_under_fail_point(
            {"errorCode": 112, "errorLabels": ["TransientTransactionError"]}, 1,
            body=BATCH_SCRIPT, n=20)
        self.assertEqual(p.count_log("attempt 1 failed"), 1)
        self.assertEqual(p.count_log("retrying the whole batch"), 1)

    def test_unknown_commit_result_of_a_batch_sends_the_commit_again(self):
        p = self.one_event_under_fail_point(
            {"errorCode": 91, "errorLabels": ["UnknownTransactionCommitResult"]}, 3,
            body=BATCH_SCRIPT, n=20)
        self.assertEqual(p.count_log("attempt 1 failed"), 0)
        self.assertGreaterEqual(p.count_log("the commit's outcome is unknown"), 1)

    def test_unknown_commit_result_sends_the_commit_again(self):
        # "Drivers API": UnknownTransactionCommitResult: the commit may be
        # retried (a commit of a committed transaction succeeds again).
        p = self.one_event_under_fail_point(
            {"errorCode": 91, "errorLabels": ["UnknownTransactionCommitResult"]}, 3)
        self.assertEqual(p.count_log("attempt 1 failed"), 0)
        self.assertGreaterEqual(p.count_log("the commit's outcome is unknown"), 1)

    def test_write_to_another_connection_fails_naming_stream_and_connection(self):
        script = self.script("""
fw.connection { name = "audit", uri = fw.env("AUDIT_URI") }
fw.stream { name = "eo", collection = "orders", exactly_once = true, dlq = true,
  retry = { max_attempts = 1 },
  on_insert = function(ctx)
    fw.mongo.collection(ctx:database_name(), "inbox", { connection = "audit" })
      :insert_one({ n = 1 })
  end }
""")
        env = dict(os.environ, AUDIT_URI=self.uri)
        p = self.run_fw(script, env=env)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_until(lambda: self.db["_fw_dlq"].count_documents({}) == 1, timeout=30,
                     what="the dead letter")
        self.assertEqual(p.stop(), 0)
        text = str(self.db["_fw_dlq"].find_one())
        self.assertIn('stream \\"eo\\" has exactly_once = true', text.replace('"', '\\"'))
        self.assertIn('connection \\"audit\\" cannot join', text.replace('"', '\\"'))
        self.assertEqual(self.db.inbox.count_documents({}), 0)

    def test_check_says_which_effects_are_exactly_once(self):
        script = self.script(SCRIPT.replace('collection = "orders"',
                                            'database = "shop", collection = "orders"'))
        cp = run_cli(["check", script])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("exactly_once", cp.stdout)
        self.assertIn("fw.http, fw.state, fw.redis, fw.pg and a DLQ elsewhere stay at least once",
                      cp.stdout)
        self.assertIn("one transaction per event", cp.stdout)
        batched = self.script(BATCH_SCRIPT.replace('collection = "orders"',
                                                   'database = "shop", collection = "orders"'),
                              name="batch.lua")
        cp = run_cli(["check", batched])
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("one transaction per call of on_batch", cp.stdout)

    def test_check_refuses_what_cannot_run_exactly_once(self):
        cases = [
            ("lanes = 2,", "use partitions = N instead"),
        ]
        for extra, needle in cases:
            handler = "on_insert = function(ctx) end,"
            script = self.script('fw.stream { name = "s", collection = "c", '
                                 'exactly_once = true, %s %s }' % (extra, handler),
                                 name="bad.lua")
            cp = run_cli(["check", script])
            self.assertNotEqual(cp.returncode, 0, extra)
            out = cp.stdout + cp.stderr
            self.assertIn("exactly_once", out, extra)
            self.assertIn(needle, out, extra)


class CheckpointRoundTrips(StandInTestCase):
    """The position is committed with each event's transaction: the stream does not write
    the same checkpoint again outside it every save_every events (a second round trip per
    event at the default save_every = 1)."""
    command_log = True

    def test_no_second_checkpoint_write_per_event(self):
        n = 200
        script = self.script(SCRIPT)
        p = self.run_fw(script)
        p.wait_open()
        self.assertEqual(p.stop(), 0)
        self.db.orders.insert_many([order(i) for i in range(n)])
        before = len(self.commands("update"))
        p = self.run_fw(script)
        p.wait_open()
        p.wait_reports(n, timeout=60)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), IncReadModel.want(self, [order(i) for i in range(n)]))
        updates = self.commands("update")[before:]
        in_txn = [u for u in updates if u["summary"].get("target") == "_fw_checkpoints"
                  and "autocommit" in u["summary"]["fields"]]
        plain = [u for u in updates if u["summary"].get("target") == "_fw_checkpoints"
                 and "autocommit" not in u["summary"]["fields"]]
        self.assertEqual(len(in_txn), n, "one checkpoint write in each event's transaction")
        # What is left: the start's and the final save, and one per read batch whose
        # post-batch token is past its last event.
        self.assertLess(len(plain), n // 10, "checkpoint writes outside the transactions")

    def test_one_transaction_per_batch(self):
        n = 200
        script = self.script(BATCH_SCRIPT)
        p = self.run_fw(script)
        p.wait_open()
        self.assertEqual(p.stop(), 0)
        self.db.orders.insert_many([order(i) for i in range(n)])
        before = len(self.commands("commitTransaction", db="admin"))
        p = self.run_fw(script)
        p.wait_open()
        p.wait_reports(n, timeout=60)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.totals(), IncReadModel.want(self, [order(i) for i in range(n)]))
        commits = len(self.commands("commitTransaction", db="admin")[before:])
        self.assertGreaterEqual(commits, 1)
        self.assertLess(commits, n // 10, "one commit per batch, not per event")

    def totals(self):
        return {d["_id"]: (d["orders"], d["amount"]) for d in self.db.customer_totals.find()}


BLOCKING = """
fw.stream { name = "totals", collection = "orders", exactly_once = true, dlq = true,
  on_insert = function(ctx)
    local order = ctx:full_document()
    fw.mongo.collection(ctx:database_name(), "customer_totals"):update_one(
      { _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
      { upsert = true })
    if order.n == tonumber(fw.env("FW_TEST_BLOCK_AT", "-1")) then
      report({ blocking = order.n })
      while true do end -- its transaction stays open, holding the customer's document
    end
    report({ n = order.n })
  end }
"""


class KilledWithATransactionOpen(StandInTestCase):
    """The server's DEFAULT transactionLifetimeLimitSeconds (60 s) and the DEFAULT retry policy
    (3 attempts): the transaction a kill -9 left open would hold its document for a minute and
    send the restarted stream's events to the DLQ; the restart kills the recorded session
    instead (killSessions, docs/reliability.md#exactly-once)."""
    standin_args = ("--server-version", "7.0")

    def test_restart_kills_the_dead_run_s_transaction_and_applies_each_event_once(self):
        n, block_at = 20, 8
        script = self.script(BLOCKING)
        p = self.run_fw(script, env=clean_env({"FW_TEST_BLOCK_AT": str(block_at)}))
        p.wait_open()
        self.db.orders.insert_many([{"_id": i, "n": i, "customer": "c", "total": 1}
                                    for i in range(n)])
        p.wait_until(lambda: any(r.get("blocking") == block_at for r in p.reports()),
                     timeout=60, what="the handler blocking in its transaction")
        p.kill9()
        restarted = time.monotonic()
        p = self.run_fw(script)
        p.wait_open()
        deadline = time.monotonic() + 60
        while self.totals().get("c", (0, 0))[0] < n and time.monotonic() < deadline:
            time.sleep(0.1)
        took = time.monotonic() - restarted
        self.assertEqual(p.stop(), 0)
        figures("exactly_once_restart_after_kill", seconds="%.1f" % took)
        self.assertEqual(list(self.db["_fw_dlq"].find({}, {"_id": 1})), [], "nothing dead-lettered")
        self.assertEqual(self.totals(), {"c": (n, n)}, "each event applied exactly once")
        self.assertLess(took, 30, "the restart did not wait out the 60 s transaction lifetime")
        self.assertGreaterEqual(p.count_log("ended 1 server session(s) of an earlier run"), 1)

    def test_new_ha_leader_kills_the_dead_leader_s_transaction(self):
        # The record is per checkpoint id: the standby that takes the lease finds it.
        n, block_at = 20, 8
        script = self.script(BLOCKING.replace(
            "fw.stream {", 'fw.defaults { ha = { mode = "leader", lease = "1000ms" } }\n'
            "fw.stream {", 1))
        a = self.run_fw(script, env=clean_env({"FW_TEST_BLOCK_AT": str(block_at)}))
        a.wait_open()
        b = self.run_fw(script)
        b.wait_log("role: standby", timeout=30)
        self.db.orders.insert_many([{"_id": i, "n": i, "customer": "c", "total": 1}
                                    for i in range(n)])
        a.wait_until(lambda: any(r.get("blocking") == block_at for r in a.reports()),
                     timeout=60, what="the leader's handler blocking in its transaction")
        a.kill9()
        killed = time.monotonic()
        b.wait_open(timeout=60)
        deadline = time.monotonic() + 60
        while self.totals().get("c", (0, 0))[0] < n and time.monotonic() < deadline:
            time.sleep(0.1)
        took = time.monotonic() - killed
        self.assertEqual(b.stop(), 0)
        figures("exactly_once_ha_takeover_after_kill", seconds="%.1f" % took)
        self.assertEqual(list(self.db["_fw_dlq"].find({}, {"_id": 1})), [], "nothing dead-lettered")
        self.assertEqual(self.totals(), {"c": (n, n)}, "each event applied exactly once")
        self.assertLess(took, 30, "the new leader did not wait out the transaction lifetime")
        self.assertGreaterEqual(b.count_log("ended 1 server session(s) of an earlier run"), 1)

    def totals(self):
        return {d["_id"]: (d["orders"], d["amount"]) for d in self.db.customer_totals.find()}


class PausedRunReplaced(IncReadModel, StandInTestCase):
    """Without ha, a process paused (SIGSTOP: a stalled VM) and replaced by another: the new
    run claims a later writer generation before its first transaction; when the paused one
    resumes, its transaction's checkpoint write is refused (the stored generation is the new
    run's), so none of its handler's writes commit, and its stream stops saying why
    (docs/operations.md#checkpoints)."""
    standin_args = ("--server-version", "7.0")

    def test_a_resumed_run_s_transaction_commits_nothing_over_the_new_run(self):
        script = self.script(SCRIPT)
        old = self.run_fw(script)
        old.wait_open()
        self.db.orders.insert_one(order(0))
        old.wait_reports(1)
        self.wait_applied(1, 30)
        old.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: old.proc.poll() is None and old.proc.send_signal(signal.SIGCONT))
        new = self.run_fw(script)
        new.wait_open()
        gen = self.checkpoint("totals")["writerGen"]
        self.db.orders.insert_one(order(1))
        new.wait_reports(1)
        self.wait_applied(2, 30)
        old.proc.send_signal(signal.SIGCONT)  # its change stream hands it order 1 too
        old.wait_log('STREAM STOPPED: checkpoint of stream "totals" NOT saved: a newer run of '
                     "the stream (writer generation %d" % gen, timeout=30)
        self.assertEqual([r["n"] for r in old.reports()], [0, 1], "old's handler ran order 1")
        self.assertEqual(self.totals(), self.want([order(0), order(1)]), "order 1 applied once")
        self.assertEqual(new.stop(), 0)
        self.assertEqual(self.checkpoint("totals")["writerGen"], gen)
        old.stop()


if __name__ == "__main__":
    unittest.main()
