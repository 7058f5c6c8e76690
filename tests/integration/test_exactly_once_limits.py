"""The limits an exactly_once handler call meets (issue 39), each a typed
error that the default policy does not retry (docs/lua-api.md): a
transaction over the server's transactionLifetimeLimitSeconds
(Mongo.TransactionTooLong: the stand-in's reaper aborts it, as mongod's
does, and the next statement gets 251; or 290 for an operation the abort
interrupted), one too large (Mongo.TransactionTooLarge: 257, 388), a server
without transactions (Mongo.TransactionsUnsupported: 20 inside the
transaction). The first two end in the DLQ after one attempt, with nothing
of the call applied; a server without transactions stops the stream instead
(every event would fail alike), before it reads when the start can tell
(a standalone sink: its hello has no setName), else at the first call that
meets it, nothing dead-lettered and nothing lost."""
import unittest

import pymongo

from fwtest import StandIn, StandInTestCase, clean_env, needs_standin

SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = %s,
  retry = { max_attempts = 3, initial_delay = "20ms", max_delay = "50ms" }, dlq = true,
  restart = { initial_delay = "20ms", max_delay = "50ms" },
  on_insert = function(ctx)
    local c = fw.mongo.collection(ctx:database_name(), "customer_totals")
    c:update_one({ _id = "first" }, { ["$inc"] = { n = 1 } }, { upsert = true })
    if ctx:full_document().slow then
      local t = os.clock() + 1.6 while os.clock() < t do end  -- past the 1 s lifetime
    end
    c:update_one({ _id = "second" }, { ["$inc"] = { n = 1 } }, { upsert = true })
    report({ n = ctx:full_document().n })
  end }
"""


@needs_standin("transaction lifetime and fault injection")
class ExactlyOnceLimits(StandInTestCase):
    standin_args = ("--transaction-lifetime-limit-seconds", "1")

    def dead_letter(self, doc, exactly_once=True, fail=None):
        p = self.run_fw(self.script(SCRIPT % ("true" if exactly_once else "false")))
        p.wait_open()
        if fail is not None:
            # On fw.mongo's pool ("flowwarden-io"), after the session's record (an
            # update before the first transaction): every update from the handler's first.
            self.fail_point({"skip": 1}, {"failCommands": ["update"], "errorCode": fail,
                                          "appName": "flowwarden-io"})
        self.db.orders.insert_one(doc)
        entry = self.wait_for(lambda: self.db["_fw_dlq"].find_one(), timeout=30,
                              what="the dead letter")
        self.assertEqual(p.stop(), 0)
        return entry

    def assert_nothing_applied(self):
        self.assertEqual(list(self.db.customer_totals.find()), [])

    def test_a_call_outliving_the_transaction_lifetime_is_too_long(self):
        entry = self.dead_letter({"_id": 1, "n": 1, "slow": True})
        self.assertEqual(entry["error"]["type"], "Mongo.TransactionTooLong", entry["error"])
        self.assertEqual(entry["attempts"], 1, "not retried by default")
        self.assert_nothing_applied()

    def test_lifetime_interruption_290_is_too_long(self):
        entry = self.dead_letter({"_id": 1, "n": 1}, fail=290)
        self.assertEqual((entry["error"]["type"], entry["attempts"]),
                         ("Mongo.TransactionTooLong", 1))
        self.assert_nothing_applied()

    def test_too_large_for_the_cache_388_is_too_large(self):
        entry = self.dead_letter({"_id": 1, "n": 1}, fail=388)
        self.assertEqual((entry["error"]["type"], entry["attempts"]),
                         ("Mongo.TransactionTooLarge", 1))
        self.assert_nothing_applied()

    def test_illegal_operation_20_in_a_transaction_stops_the_stream(self):
        # Mongo.TransactionsUnsupported is the deployment's, not the event's: the
        # stream stops before the event rather than dead-letter every event.
        script = self.script(SCRIPT % "true")
        p = self.run_fw(script)
        p.wait_open()
        self.fail_point({"skip": 1}, {"failCommands": ["update"], "errorCode": 20,
                                      "appName": "flowwarden-io"})
        self.db.orders.insert_one({"_id": 1, "n": 1})
        p.wait_log("STREAM STOPPED", stream="totals")
        line = next(m for m in p.messages() if "STREAM STOPPED" in m)
        self.assertEqual(p.stop(), 0)
        for text in ('connection "default" has no transactions',
                     "Mongo.TransactionsUnsupported", "replica set", "exactly_once off"):
            self.assertIn(text, str(line))
        self.assertIsNone(self.db["_fw_dlq"].find_one(), "nothing dead-lettered")
        self.assert_nothing_applied()
        # Nothing lost: once the deployment has transactions, the event is handled.
        self.fail_point("off")
        p = self.run_fw(script)
        p.wait_reports(1, timeout=30)
        self.assertEqual(p.stop(), 0)
        self.assertEqual({d["_id"]: d["n"] for d in self.db.customer_totals.find()},
                         {"first": 1, "second": 1})

    def test_illegal_operation_20_outside_a_transaction_stays_invalid(self):
        entry = self.dead_letter({"_id": 1, "n": 1}, exactly_once=False, fail=20)
        self.assertEqual((entry["error"]["type"], entry["attempts"]), ("Mongo.Invalid", 1))

    def test_illegal_operation_20_in_a_batch_s_transaction_stops_the_stream(self):
        # With on_batch: the batch's attempts and its bisection end at a single event, which
        # stops the stream as above; nothing of the batch dead-lettered or applied.
        p = self.run_fw(self.script(BATCH_SCRIPT))
        p.wait_open()
        self.fail_point({"skip": 1}, {"failCommands": ["update"], "errorCode": 20,
                                      "appName": "flowwarden-io"})
        self.db.orders.insert_many([{"_id": n, "n": n} for n in range(1, 5)])
        p.wait_log("STREAM STOPPED", stream="totals")
        self.assertEqual(p.stop(), 0)
        self.assertIsNone(self.db["_fw_dlq"].find_one(), "nothing dead-lettered")
        self.assert_nothing_applied()


BATCH_SCRIPT = """
fw.stream { name = "totals", collection = "orders", exactly_once = true,
  retry = { max_attempts = 2, initial_delay = "20ms", max_delay = "50ms" }, dlq = true,
  batch = { max_events = 10, max_wait = "200ms" },
  on_batch = function(batch)
    local c = fw.mongo.collection(batch:get(1):database_name(), "customer_totals")
    for _, ctx in batch:events() do
      c:update_one({ _id = "first" }, { ["$inc"] = { n = 1 } }, { upsert = true })
    end
  end }
"""

SINK_SCRIPT = """
fw.connection { name = "sink", uri = fw.env("SINK_URI") }
fw.stream { name = "totals", collection = "orders", exactly_once = { connection = "sink" },
  dlq = true, restart = { initial_delay = "20ms", max_delay = "50ms" },
  on_insert = function(ctx)
    fw.mongo.collection(ctx:database_name(), "customer_totals", { connection = "sink" })
      :update_one({ _id = "first" }, { ["$inc"] = { n = 1 } }, { upsert = true })
    report({ n = ctx:full_document().n })
  end }
"""


def without_replica_set(uri):
    """uri without its replicaSet option (a standalone has no set), credentials kept."""
    base, _, query = uri.partition("?")
    opts = [o for o in query.split("&") if o and not o.startswith("replicaSet=")]
    return base + ("?" + "&".join(opts) if opts else "")


@needs_standin("a standalone server started beside it (the sink)")
class SinkWithoutTransactions(StandInTestCase):
    """exactly_once = { connection = "sink" } naming a standalone mongod: its
    hello has no setName and it is no mongos (jstests/noPassthrough/
    retryable_writes_standalone_api.js: a standalone refuses txnNumber with 20
    IllegalOperation), so the stream stops at its start, before it reads, with
    an error naming the stream, the connection and the remedy."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sink = StandIn(args=["--standalone"])
        cls.sink.start()

    @classmethod
    def tearDownClass(cls):
        cls.sink.stop()
        super().tearDownClass()

    def test_a_standalone_sink_stops_the_stream_before_it_reads(self):
        sink_uri = without_replica_set(self.sink.uri)
        p = self.run_fw(self.script(SINK_SCRIPT), env=clean_env({"SINK_URI": sink_uri}))
        p.wait_log("STREAM STOPPED", stream="totals")
        line = next(m for m in p.messages() if "STREAM STOPPED" in m)
        self.assertEqual(p.count_log("change stream open"), 0, "it never read")
        for text in ('stream "totals"', 'connection "sink"', "standalone mongod",
                     "replica set", "turn exactly_once off"):
            self.assertIn(text, line)
        self.assertEqual(p.reports(), [], "nothing handled")
        self.assertIsNone(self.db["_fw_dlq"].find_one(), "nothing dead-lettered")
        sink = pymongo.MongoClient(sink_uri, directConnection=True)
        try:
            self.assertIsNone(sink[self.db_name]["_fw_dlq"].find_one())
            self.assertIsNone(sink[self.db_name].customer_totals.find_one())
        finally:
            sink.close()
        self.assertEqual(p.stop(), 0)


if __name__ == "__main__":
    unittest.main()
