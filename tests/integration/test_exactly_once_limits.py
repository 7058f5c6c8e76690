"""The limits an exactly_once handler call meets (issue 39), each a typed
error that the default policy does not retry (docs/lua-api.md): a
transaction over the server's transactionLifetimeLimitSeconds
(Mongo.TransactionTooLong: the stand-in's reaper aborts it, as mongod's
does, and the next statement gets 251; or 290 for an operation the abort
interrupted), one too large (Mongo.TransactionTooLarge: 257, 388), a server
without transactions (Mongo.TransactionsUnsupported: 20 inside the
transaction). Each ends in the DLQ after one attempt, with nothing of the
call applied."""
import unittest

from fwtest import StandInTestCase, needs_standin

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

    def test_illegal_operation_20_in_a_transaction_is_transactions_unsupported(self):
        entry = self.dead_letter({"_id": 1, "n": 1}, fail=20)
        self.assertEqual((entry["error"]["type"], entry["attempts"]),
                         ("Mongo.TransactionsUnsupported", 1))
        self.assert_nothing_applied()

    def test_illegal_operation_20_outside_a_transaction_stays_invalid(self):
        entry = self.dead_letter({"_id": 1, "n": 1}, exactly_once=False, fail=20)
        self.assertEqual((entry["error"]["type"], entry["attempts"]), ("Mongo.Invalid", 1))


if __name__ == "__main__":
    unittest.main()
