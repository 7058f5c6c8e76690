"""exactly_once = true (issue 39): the events of one source transaction (same lsid and
txnNumber) are applied in one sink transaction. MongoDB gives a committed transaction's
events together, each with its lsid and txnNumber, and no end-of-transaction event
(document_source_change_stream_unwind_transaction.cpp, 5.0-8.0); the stand-in does the same
(fwstandin/transactions.py). A reader polling the sink never sees part of a 50-insert source
transaction, across a kill -9 in its middle too; a poison event inside a group is
dead-lettered alone and the group's other events are applied together without it."""
import threading
import time
import unittest

from chaostest import StandInTestCase, figures

TXN_SIZE = 50

# Each source insert is copied to the sink; the event at FW_TEST_SLOW_AT takes a while
# (a busy loop) so that a kill lands inside its group. A negative n is a poison.
SCRIPT = """
fw.stream { name = "copy", collection = "src", exactly_once = true, dlq = true,
  retry = { max_attempts = 2, initial_delay = "50ms" },
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local d = ctx:full_document()
    if d.n < 0 then error(fw.error("Validation", "poison " .. d.n)) end
    fw.mongo.collection(ctx:database_name(), "sink"):insert_one({ _id = d._id, txn = d.txn })
    if d.n == tonumber(fw.env("FW_TEST_SLOW_AT", "-1")) then
      report({ slow = d.n, txn = d.txn })
      local t = os.clock()
      while os.clock() - t < 0.5 do end
    end
  end }
"""

# The same copy with on_batch, in batches of at most 20 events: a batch grows to the end of a
# source transaction rather than split it, and bisection never splits one.
BATCH_SCRIPT = """
fw.stream { name = "copy", collection = "src", exactly_once = true, dlq = true,
  retry = { max_attempts = 2, initial_delay = "50ms" },
  restart = { initial_delay = "100ms" },
  batch = { max_events = 20 },
  on_batch = function(batch)
    local docs = {}
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      if d.n < 0 then error(fw.error("Validation", "poison " .. d.n)) end
      docs[#docs + 1] = { _id = d._id, txn = d.txn }
    end
    fw.mongo.collection(batch:get(1):database_name(), "sink"):insert_many(docs)
    report({ size = #batch })
  end }
"""


class SourceTransactions(StandInTestCase):
    standin_args = ("--transaction-lifetime-limit-seconds", "5")

    def write_txn(self, k, ns=None):
        docs = [{"_id": "%d-%d" % (k, i), "txn": k, "n": i if ns is None else ns[i]}
                for i in range(TXN_SIZE)]
        with self.client.start_session() as ses:
            ses.with_transaction(lambda s: self.db.src.insert_many(docs, session=s))

    def poll_sink(self, seen, done, errors):
        """Counts the sink's documents per source transaction, each count one aggregate
        (one consistent read), until done, and once more after it: the last read starts after
        done was set, so it sees every group applied by then, however late this thread ran
        (a read begun before the last commit does not). An error is kept for the test."""
        try:
            while True:
                last = done.is_set()
                for g in self.db.sink.aggregate([{"$group": {"_id": "$txn", "n": {"$sum": 1}}}]):
                    seen.add((g["_id"], g["n"]))
                if last:
                    return
        except Exception as e:  # noqa: BLE001  (reported by the test, not lost with the thread)
            errors.append(e)

    def start_poller(self):
        seen, done, errors = set(), threading.Event(), []
        poller = threading.Thread(target=self.poll_sink, args=(seen, done, errors), daemon=True)
        poller.start()
        return seen, done, errors, poller

    def stop_poller(self, done, errors, poller):
        done.set()
        poller.join(60)
        self.assertFalse(poller.is_alive(), "the poller's last read ended")
        self.assertEqual(errors, [], "the poller's reads failed")

    def run_txns(self, script, txns, kill_in=None):
        env = None
        if kill_in is not None:
            import os
            env = dict(os.environ, FW_TEST_SLOW_AT=str(TXN_SIZE // 2))
        p = self.run_fw(script, env=env)
        p.wait_open()
        seen, done, errors, poller = self.start_poller()
        for k in range(txns):
            self.write_txn(k)
            if k == kill_in:
                p.wait_until(lambda: any(r.get("slow") == TXN_SIZE // 2 and r.get("txn") == k
                                         for r in p.reports()),
                             timeout=30, what="the handler inside transaction %d" % k)
                p.kill9()
                p = self.run_fw(script)
                p.wait_open()
        deadline = time.monotonic() + 60
        while (self.db.sink.count_documents({}) < txns * TXN_SIZE
               and time.monotonic() < deadline):
            time.sleep(0.05)
        self.stop_poller(done, errors, poller)
        self.assertEqual(p.stop(), 0)
        return seen

    def test_a_50_insert_source_transaction_is_never_seen_half_applied(self):
        seen = self.run_txns(self.script(SCRIPT), 4)
        self.assertEqual(self.db.sink.count_documents({}), 4 * TXN_SIZE)
        partial = sorted(x for x in seen if x[1] != TXN_SIZE)
        figures("exactly_once_source_txn", txns=4, size=TXN_SIZE, reads=len(seen),
                partial=len(partial))
        self.assertEqual(partial, [], "a reader of the sink saw part of a source transaction")
        self.assertEqual({x[0] for x in seen}, {0, 1, 2, 3}, "the poller saw every transaction")

    def test_kill9_inside_a_group_applies_it_whole_once(self):
        seen = self.run_txns(self.script(SCRIPT), 3, kill_in=1)
        self.assertEqual(self.db.sink.count_documents({}), 3 * TXN_SIZE)
        partial = sorted(x for x in seen if x[1] != TXN_SIZE)
        self.assertEqual(partial, [], "a reader of the sink saw part of a source transaction")

    def test_batches_never_split_a_source_transaction(self):
        seen = self.run_txns(self.script(BATCH_SCRIPT), 4)
        self.assertEqual(self.db.sink.count_documents({}), 4 * TXN_SIZE)
        self.assertEqual(sorted(x for x in seen if x[1] != TXN_SIZE), [],
                         "a reader of the sink saw part of a source transaction")

    def test_a_poison_event_in_a_group_is_dead_lettered_alone_and_the_rest_applied_together(self):
        self.poison_in_a_group(SCRIPT)

    def test_batches_a_poison_event_in_a_group_is_dead_lettered_alone(self):
        # Bisection ends at the source transaction whole (never split), which then takes the
        # per-event path in one transaction: the poison alone dead-lettered.
        self.poison_in_a_group(BATCH_SCRIPT)

    def poison_in_a_group(self, body):
        script = self.script(body)
        p = self.run_fw(script)
        p.wait_open()
        seen, done, errors, poller = self.start_poller()
        ns = list(range(TXN_SIZE))
        ns[20] = -1
        self.write_txn(0, ns)
        self.write_txn(1)
        deadline = time.monotonic() + 60
        while (self.db.sink.count_documents({}) < 2 * TXN_SIZE - 1
               and time.monotonic() < deadline):
            time.sleep(0.05)
        self.stop_poller(done, errors, poller)
        self.assertEqual(p.stop(), 0)
        entries = list(self.db["_fw_dlq"].find())
        self.assertEqual([e["documentKey"] for e in entries], [{"_id": "0-20"}],
                         "the poison alone is dead-lettered")
        self.assertEqual(self.db.sink.count_documents({"txn": 0}), TXN_SIZE - 1)
        self.assertEqual(self.db.sink.count_documents({"txn": 1}), TXN_SIZE)
        self.assertEqual(sorted(x for x in seen if x[1] not in (TXN_SIZE, TXN_SIZE - 1)), [],
                         "the rest of the poison's transaction appeared at once")
        if body is SCRIPT:
            # The retry policy ran for the group: its 2 attempts, each the whole group.
            self.assertEqual(p.count_log("attempt 1 failed"), 1)


if __name__ == "__main__":
    unittest.main()
