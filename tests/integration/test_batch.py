"""on_batch (issue 30), seen from outside: batches under a backlog, poison
events isolated by bisection (one raised, one marked with batch:fail) and
dead-lettered alone with their own error while every other event is
applied once, the checkpoint after a restart, a quiet stream's batch of
one, and bad batch settings refused."""
import os
import re
import signal
import unittest
import urllib.request

from dlqtest import MISBEHAVE, FailureTestCase, wait_for
from fwtest import PRELUDE, run_cli, write_script

# Applies a batch to `applied` ({_id, n}: how often each event was applied)
# unless an event of it raises; events whose document says poison = "mark"
# are marked failed. Every call reports its size, attempt and ids.
ON_BATCH = """
local applied
fw.stream { name = "b", collection = "orders",
  retry = { max_attempts = 2, initial_delay = "20ms", jitter = false }, dlq = true,
  batch = { max_events = 50, max_wait = "50ms" },
  on_batch = function(batch)
    local ids, ops, last = {}, {}, nil
    applied = applied or fw.mongo.collection(batch:get(1):database_name(), "applied")
    for i, ctx in batch:events() do
      local d = ctx:full_document()
      ids[#ids + 1] = d._id
      last = ctx:event_id()
      if d.poison == "raise" then
        report({ n = #batch, attempt = ctx:attempt_number(), ids = ids, raised = d._id })
        error(fw.error("Boom", "raised by " .. d._id))
      elseif d.poison == "mark" then
        batch:fail(i, fw.error("Poison", "bad " .. d._id))
      else
        ops[#ops + 1] = d._id
      end
    end
    for _, id in ipairs(ops) do
      applied:update_one({ _id = id }, { ["$inc"] = { n = 1 } }, { upsert = true })
    end
    report({ n = #batch, attempt = batch:get(1):attempt_number(), ids = ids, eid = last })
  end,
  on_error = function(err, ctx)
    report({ on_error = ctx:full_document()._id, type = err.type })
  end }
"""

N = 200


class BatchHandlers(FailureTestCase):

    def test_backlog_batches_poison_isolated_checkpoint_after_restart(self):
        path = self.fw_script(ON_BATCH)
        p = self.run_fw(path)
        p.wait_open(1)
        docs = [{"_id": i} for i in range(1, N + 1)]
        docs[16]["poison"] = "mark"    # _id 17
        docs[122]["poison"] = "raise"  # _id 123
        self.db.orders.insert_many(docs)

        entries = self.wait_dlq(2)
        wait_for(lambda: self.db.applied.count_documents({}) >= N - 2, what="events applied")
        self.assertEqual(sorted((e["documentKey"]["_id"], e["error"]["type"]) for e in entries),
                         [(17, "Poison"), (123, "Boom")])
        by_id = {e["documentKey"]["_id"]: e for e in entries}
        self.assertEqual(by_id[17]["error"]["message"], "bad 17")
        self.assertEqual(by_id[123]["error"]["message"], "raised by 123")
        applied = {d["_id"]: d["n"] for d in self.db.applied.find()}
        self.assertEqual(sorted(applied), [i for i in range(1, N + 1) if i not in (17, 123)])
        self.assertEqual(set(applied.values()), {1}, "every other event applied exactly once")

        # A batch reports after its writes, on_error before the entry is written: the lines of
        # what the database shows may still be on their way.
        def reported():
            rs = p.reports()
            done = {i for r in rs if "eid" in r for i in r["ids"]}
            errs = {r["on_error"] for r in rs if "on_error" in r}
            return done >= set(applied) and errs == {17, 123}
        p.wait_until(reported, what="the reports of every applied batch and of both poisons")
        sizes = [r["n"] for r in p.reports() if "eid" in r]
        self.assertGreater(max(sizes), 1, "a backlog gives batches of more than one event")
        self.assertLessEqual(max(sizes), 50, "at most batch.max_events")
        # on_error saw each poison event alone, with its own ctx.
        self.assertEqual(sorted({r["on_error"] for r in p.reports() if "on_error" in r}),
                         [17, 123])
        last = max(r["eid"] for r in p.reports() if "eid" in r)
        self.wait_checkpoint_at_least("b", last)
        self.stop_cleanly(p)

        # After a restart nothing before the checkpoint comes back; a lone
        # event makes a batch of one.
        p = self.run_fw(path)
        p.wait_open(1)
        self.db.orders.insert_one({"_id": 1000})
        p.wait_until(lambda: [r for r in p.reports() if 1000 in r.get("ids", [])],
                     what="event 1000 handled")
        r = [r for r in p.reports() if 1000 in r.get("ids", [])]
        self.assertEqual(r[0]["n"], 1)
        self.stop_cleanly(p)
        applied = {d["_id"]: d["n"] for d in self.db.applied.find()}
        self.assertEqual(set(applied.values()), {1}, "nothing applied twice after the restart")
        self.assertEqual(len(self.dlq_entries()), 2)


class BatchErrorClassified(FailureTestCase):
    """A whole-batch failure is classified as an event's error is (retry_on, no_retry_on):
    an error the stream does not retry is not retried as a whole batch either; bisection
    starts at once and the raising event goes its own way (on_error, its DLQ entry)."""

    def run_batch(self, retry):
        script = ON_BATCH.replace(
            'retry = { max_attempts = 2, initial_delay = "20ms", jitter = false }',
            'retry = { max_attempts = 3, initial_delay = "20ms", jitter = false, %s }' % retry)
        p = self.run_fw(self.fw_script(script))
        p.wait_open(1)
        docs = [{"_id": i} for i in range(1, 21)]
        docs[9]["poison"] = "raise"  # _id 10
        self.db.orders.insert_many(docs)
        entries = self.wait_dlq(1)
        wait_for(lambda: self.db.applied.count_documents({}) >= 19, what="events applied")
        self.assertEqual([(e["documentKey"]["_id"], e["error"]["type"]) for e in entries],
                         [(10, "Boom")])
        self.stop_cleanly(p)
        return p

    def test_no_retry_on_is_not_retried_as_a_whole_batch(self):
        p = self.run_batch('no_retry_on = { "Boom" }')
        self.assertEqual(p.count_log("retrying the whole batch"), 0, p.messages())
        self.assertEqual(p.count_log("retrying the events it failed"), 0)
        # on_error saw it alone, and as no_retry_on says, it went to the DLQ at once
        self.assertEqual([r["on_error"] for r in p.reports() if "on_error" in r], [10])

    def test_a_type_outside_retry_on_is_not_retried_as_a_whole_batch(self):
        p = self.run_batch('retry_on = { "Http" }')
        self.assertEqual(p.count_log("retrying the whole batch"), 0, p.messages())

    def test_a_retried_type_is_still_retried_as_a_whole_batch(self):
        p = self.run_batch('retry_on = { "Boom" }')
        first = next(r for r in p.reports() if "raised" in r)
        if first["n"] > 1:  # the writes came as one batch of more than the poison event
            self.assertGreaterEqual(p.count_log("retrying the whole batch"), 1, p.messages())


# The read model: one bulk_write of upserts per batch, unordered;
# an operation the server refuses marks its event failed (write_errors
# number operations from 1, as the events of the batch).
BULK = """
fw.stream { name = "m", collection = "people",
  retry = { max_attempts = 2, initial_delay = "20ms", jitter = false }, dlq = true,
  batch = { max_events = 100, max_wait = "50ms" },
  on_batch = function(batch)
    local model = fw.mongo.collection(batch:get(1):database_name(), "model")
    local ops = {}
    for _, ctx in batch:events() do
      local d = ctx:full_document()
      ops[#ops + 1] = { replace_one = { filter = { _id = d._id },
        replacement = { email = d.email }, upsert = true } }
    end
    report({ n = #batch })
    local ok, err = pcall(model.bulk_write, model, ops, { ordered = false })
    if not ok then
      local we = type(err) == "table" and err.fields and err.fields.write_errors or {}
      if #we == 0 then error(err, 0) end
      for _, e in ipairs(we) do batch:fail(e.index, err) end
    end
  end }
"""


class BulkWriteReadModel(FailureTestCase):

    def test_unique_index_violation_dead_letters_only_its_event(self):
        self.db.model.create_index("email", unique=True)
        self.db.model.insert_one({"_id": 0, "email": "taken@example.com"})
        p = self.run_fw(self.fw_script(BULK), extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open(1)
        docs = [{"_id": i, "email": "u%d@example.com" % i} for i in range(1, 121)]
        docs[49]["email"] = "taken@example.com"  # _id 50
        self.db.people.insert_many(docs)
        entries = self.wait_dlq(1)
        wait_for(lambda: self.db.model.count_documents({}) >= 120, what="model upserts")
        self.assertEqual([e["documentKey"]["_id"] for e in entries], [50])
        self.assertIn("Mongo", entries[0]["error"]["type"])
        self.assertIn("duplicate key", entries[0]["error"]["message"].lower())
        model = {d["_id"]: d["email"] for d in self.db.model.find()}
        self.assertEqual(len(model), 120)  # 0 and the 119 others
        self.assertNotIn(50, model)
        # Each event is counted in one batch, however often it was retried. A batch is counted
        # once it ran, after its writes: wait for the last one (the model shows it written).
        def batch_counts():
            metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                             timeout=5).read()
            return dict(re.findall(r'^(flowwarden_batch\w+)\{stream="m"\} (\d+)',
                                   metrics.decode(), re.M))
        wait_for(lambda: int(batch_counts().get("flowwarden_batch_events_total", 0)) >= 120,
                 what="every event counted in a batch")
        counts = batch_counts()
        # Reported before each bulk write: the last batch's line may still be on its way.
        p.wait_until(lambda: sum(r["n"] for r in p.reports()) >= 120, what="every batch's report")
        self.assertGreater(max(r["n"] for r in p.reports()), 1)
        self.assertEqual(counts.get("flowwarden_batch_events_total"), "120", counts)
        self.assertLess(int(counts.get("flowwarden_batches_total", 0)), 120, counts)
        self.stop_cleanly(p)
        self.assertEqual(len(self.dlq_entries()), 1)


def docs_batch_example():
    """The on_batch example of docs/lua-api.md, as written there."""
    from fwtest import SOURCE_DIR
    with open(os.path.join(SOURCE_DIR, "docs", "lua-api.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Batch handlers: on_batch"):]
    return section[section.index("```lua\n") + 7:section.index("\n```\n")]


class BatchDocsExample(FailureTestCase):

    def test_docs_example_counts_once_after_a_write_concern_error(self):
        """Issue 37: an unordered bulk_write answered with a writeConcernError has no
        write_errors, but every write was applied on the primary. The docs' example must
        not send its $inc again: each customer's total counts each order once."""
        code = docs_batch_example().replace('"shop"', '"%s"' % self.db.name)
        self.assertIn("bulk_write", code)
        p = self.run_fw(self.script(code))
        p.wait_open(1)
        # fw.mongo's pool (appName flowwarden-io) gets the writeConcernError on its first
        # update, after applying it (failCommand's writeConcernError, as mongod's).
        self.fail_point({"times": 1}, {"failCommands": ["update"], "appName": "flowwarden-io",
                                       "writeConcernError": {"code": 64,
                                                             "codeName": "WriteConcernFailed",
                                                             "errmsg": "waiting for replication "
                                                                       "timed out"}})
        orders = [{"_id": i, "customer": "c%d" % (i % 3), "total": i} for i in range(1, 31)]
        self.db.orders.insert_many(orders)
        want = {}
        for o in orders:
            want[o["customer"]] = want.get(o["customer"], 0) + o["total"]
        wait_for(lambda: self.db.customer_totals.count_documents({}) == 3, what="the totals")
        # A later batch: once it is written, the first one is finished with (retried or not).
        self.db.orders.insert_one({"_id": 100, "customer": "end", "total": 1})
        wait_for(lambda: self.db.customer_totals.find_one({"_id": "end"}), timeout=30,
                 what="the later batch")
        got = {d["_id"]: d["total"] for d in self.db.customer_totals.find({"_id": {"$ne": "end"}})}
        self.assertEqual(got, want)
        self.assertEqual(self.fail_point("off")["count"], 1)  # it did fire
        p.wait_log("write concern not met", timeout=10)
        self.assertEqual(p.count_log("write concern not met"), 1)
        self.assertEqual(self.dlq_entries(), [])
        self.stop_cleanly(p)


# lanes = 4: each lane takes its own batches; per-key order holds.
LANES = """
local STATE = string.format("%p", {})
fw.stream { name = "l", collection = "c", lanes = 4,
  checkpoint = { save_every = 50, save_interval = "200ms" },
  batch = { max_events = 64, max_wait = "20ms" },
  on_batch = function(batch)
    local seen = {}
    for _, ctx in batch:events() do
      local u = ctx:operation_type() == "update" and ctx:update_description().updatedFields
      seen[#seen + 1] = { k = ctx:document_key()._id, n = u and u.n or 0 }
    end
    report({ size = #batch, st = STATE, seen = seen, eid = batch:get(#batch):event_id() })
  end }
"""


class BatchLanes(FailureTestCase):

    def test_lanes_take_batches_in_key_order(self):
        import pymongo
        keys, updates = 20, 300
        p = self.run_fw(self.fw_script(LANES))
        p.wait_open(1)
        self.db.c.insert_many([{"_id": "k%d" % j, "n": 0} for j in range(keys)])
        self.db.c.bulk_write([pymongo.UpdateOne({"_id": "k%d" % (i % keys)},
                                                {"$set": {"n": i + 1}}) for i in range(updates)])
        p.wait_until(lambda: sum(r["size"] for r in p.reports()) >= keys + updates,
                     what="every event in a batch")
        got = {}
        for r in p.reports():
            for e in r["seen"]:
                got.setdefault(e["k"], []).append(e["n"])
        want = {"k%d" % j: [0] + [i + 1 for i in range(updates) if i % keys == j]
                for j in range(keys)}
        self.assertEqual(got, want)  # each event once, in key order
        sizes = [r["size"] for r in p.reports()]
        self.assertGreater(max(sizes), 1)
        self.assertLessEqual(max(sizes), 64)
        self.assertGreater(len({r["st"] for r in p.reports()}), 1, "all batches in one lane")
        self.wait_checkpoint_at_least("l", max(r["eid"] for r in p.reports()))
        self.stop_cleanly(p)


# Applies each event, then holds the batch until the test opens the gate.
HELD = """
fw.stream { name = "k", collection = "orders", batch = { max_events = 30, max_wait = "50ms" },
  on_batch = function(batch)
    local db = batch:get(1):database_name()
    local applied, ids = fw.mongo.collection(db, "applied"), {}
    for _, ctx in batch:events() do
      local id = ctx:full_document()._id
      ids[#ids + 1] = id
      applied:update_one({ _id = id }, { ["$inc"] = { n = 1 } }, { upsert = true })
    end
    report({ ids = ids, eid = batch:get(#batch):event_id() })
    local gate = fw.mongo.collection(db, "gate")
    while not gate:find_one({ _id = "go" }) do end
  end }
"""


class BatchKilled(FailureTestCase):

    def test_kill9_mid_batch_delivers_the_batch_again_nothing_lost(self):
        path = self.fw_script(HELD)
        p = self.run_fw(path)
        p.wait_open(1)
        self.db.orders.insert_many([{"_id": i} for i in range(1, 101)])
        p.wait_until(lambda: p.reports(), what="the first batch applied and held")
        first = p.reports()[0]["ids"]
        self.assertGreater(len(first), 1)
        p.kill9()

        self.db.gate.insert_one({"_id": "go"})
        p = self.run_fw(path)
        wait_for(lambda: self.db.applied.count_documents({}) == 100, what="all 100 applied")
        p.wait_until(lambda: sum(len(r["ids"]) for r in p.reports()) >= 100,
                     what="every event handled after the restart")
        self.wait_checkpoint_at_least("k", max(r["eid"] for r in p.reports()))
        self.stop_cleanly(p)
        n = {d["_id"]: d["n"] for d in self.db.applied.find()}
        # The held batch was not checkpointed: its events came again, once.
        self.assertEqual({i for i in n if n[i] == 2}, set(first))
        self.assertEqual({i for i in n if n[i] == 1}, set(range(1, 101)) - set(first))


def versioned(v):
    """The script at version v: on_batch for 1 and 2, on_insert from 3 on."""
    handler = ("on_insert = function(ctx) report({ v = V, ids = { ctx:full_document()._id } }) end"
               if v >= 3 else
               "on_batch = function(batch) local ids = {} "
               "for _, ctx in batch:events() do ids[#ids + 1] = ctx:full_document()._id end "
               "report({ v = V, ids = ids }) end")
    return ('local V = %d\nfw.stream { name = "r", collection = "orders", %s%s }\n'
            % (v, "batch = { max_wait = '50ms' }, " if v < 3 else "", handler))


class BatchReload(FailureTestCase):

    def reload(self, p, v):
        before = sum("reloaded " in m for m in p.messages())
        with open(p.script, "w") as f:
            f.write(PRELUDE + MISBEHAVE + versioned(v))
        p.proc.send_signal(signal.SIGHUP)
        p.wait_until(lambda: sum("reloaded " in m for m in p.messages()) > before, 30, "reload")

    def test_reload_between_batches_and_from_on_batch_to_on_insert(self):
        p = self.run_fw(self.fw_script(versioned(1)))
        p.wait_open(1)
        for v, ids in ((2, range(1, 101)), (3, range(101, 201)), (None, range(201, 251))):
            self.db.orders.insert_many([{"_id": i} for i in ids])
            p.wait_until(lambda: sum(len(r["ids"]) for r in p.reports()) >= ids[-1],
                         what="events up to %d" % ids[-1])
            if v:
                self.reload(p, v)
        got = [(i, r["v"]) for r in p.reports() for i in r["ids"]]
        self.assertEqual([i for i, _ in got], list(range(1, 251)))  # once each, in order
        versions = [v for _, v in got]
        self.assertEqual(versions, sorted(versions))  # never an older script after a newer one
        self.assertEqual([versions[0], versions[100], versions[-1]], [1, 2, 3])
        self.assertGreater(max(len(r["ids"]) for r in p.reports()), 1)
        self.stop_cleanly(p)


class BadBatchSettings(unittest.TestCase):

    def test_check_refuses_bad_batch_declarations(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = write_script(tmp, """
                fw.stream { name = "a", database = "shop", batch = { max_events = 0, max_wait = "x" },
                  on_batch = function(b) end, on_insert = function(ctx) end }
                fw.stream { name = "b", database = "shop", batch = { max_events = 5 },
                  on_change = function(ctx) end }
                fw.stream { name = "c", database = "shop", batch = 3, on_batch = 1 }
                """)
            cp = run_cli(["check", path])
        self.assertNotEqual(cp.returncode, 0)
        err = cp.stderr
        for needle in ('stream "a": on_batch: declared together with on_insert',
                       'stream "a": batch.max_events: expected an integer from 1 to 10000',
                       'stream "a": batch.max_wait: invalid duration "x"',
                       'stream "b": batch: set without on_batch',
                       'stream "c": on_batch: expected a function(batch), got 1',
                       'stream "c": batch: expected a table'):
            self.assertIn(needle, err)
        self.assertTrue(os.path.basename(path))


if __name__ == "__main__":
    unittest.main()
