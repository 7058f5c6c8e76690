"""fw.mongo and fw.connection through the real binary against the stand-in
(issue 11): a read model kept by upserts, an idempotent inbox across kill -9,
typed errors deciding retry or DLQ, the handler budget cutting a hung
server, named connections (also for a DLQ), and what `check` prints."""
import collections
import random
import signal
import textwrap
import time

from fwtest import needs_standin, PRELUDE, StandIn, StandInTestCase, clean_env, run_cli, write_script
import pymongo

# Handler IO runs on its own pools, named so fail points can aim at it and
# leave the runtime's change stream and checkpoints ("flowwarden") alone.
IO_APP = "flowwarden-io"

READ_MODEL = """
local function views() return fw.mongo.collection(DB, "order_view") end
local function totals() return fw.mongo.collection(DB, "customer_totals") end

fw.stream {
  name = "materialize", collection = "orders", full_document = "updateLookup",
  retry = { initial_delay = "10ms" },
  on_insert = function(ctx)
    local o = ctx:full_document()
    views():insert_one({ _id = o._id, customer = o.customer, total = o.total })
    totals():update_one({ _id = o.customer }, { ["$inc"] = { orders = 1, amount = o.total } },
                        { upsert = true })
  end,
  on_update = function(ctx)
    local o = ctx:full_document()
    if o == nil then return end                 -- deleted since: the delete event settles it
    local old = views():find_one({ _id = o._id })
    totals():update_one({ _id = o.customer }, { ["$inc"] = { amount = o.total - old.total } })
    views():update_one({ _id = o._id }, { ["$set"] = { total = o.total } })
  end,
  on_delete = function(ctx)
    local key = ctx:document_key()._id
    local old = views():find_one({ _id = key })
    totals():update_one({ _id = old.customer }, { ["$inc"] = { orders = -1, amount = -old.total } })
    local r = views():delete_one({ _id = key })
    report({ deleted = r.deleted })
  end,
}
"""


class MongoFromHandlersTest(StandInTestCase):

    def test_read_model_equals_a_recomputation_after_2000_mixed_events(self):
        p = self.run_fw(self.script('local DB = "%s"\n%s' % (self.db_name, READ_MODEL)))
        p.wait_open()
        rng = random.Random(11)
        live = []
        for i in range(1000):
            self.db.orders.insert_one({"_id": i, "customer": "c%d" % rng.randrange(25),
                                       "total": rng.randrange(1, 500)})
            live.append(i)
            if i % 5 == 4:     # 600 updates and 400 deletes in between
                for _ in range(3):
                    self.db.orders.update_one({"_id": rng.choice(live)},
                                              {"$inc": {"total": rng.randrange(-20, 40)}})
                for _ in range(2):
                    victim = live.pop(rng.randrange(len(live)))
                    self.db.orders.delete_one({"_id": victim})
        p.wait_reports(400, timeout=120)

        expected = collections.defaultdict(lambda: [0, 0])
        for o in self.db.orders.find():
            expected[o["customer"]][0] += 1
            expected[o["customer"]][1] += o["total"]
        got = {t["_id"]: [t["orders"], t["amount"]] for t in self.db.customer_totals.find()
               if t["orders"] != 0}
        self.assertEqual(got, dict(expected))
        self.assertEqual(self.db.order_view.count_documents({}), len(live))
        self.assertTrue(all(r["deleted"] == 1 for r in p.reports()))
        self.assertEqual(p.stop(), 0)

    def test_idempotent_inbox_sees_each_event_once_across_kill_9(self):
        # No checkpoint after the start position: a restart sees every event again.
        script = self.script("""
            fw.stream {
              name = "inbox", collection = "orders",
              checkpoint = { save_every = 100000, save_interval = "1h" },
              on_insert = function(ctx)
                local inbox = fw.mongo.collection("%s", "inbox")
                local ok, err = pcall(inbox.insert_one, inbox, { _id = ctx:event_id() })
                if not ok then
                  if type(err) == "table" and err.type == "Mongo.DuplicateKey" then
                    report({ dup = true, code = err.fields.code })
                    return
                  end
                  error(err, 0)
                end
                fw.mongo.collection("%s", "effects"):update_one(
                  { _id = ctx:full_document().seq }, { ["$inc"] = { n = 1 } }, { upsert = true })
                report({ dup = false })
              end,
            }
        """ % (self.db_name, self.db_name))
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_many([{"seq": i} for i in range(200)])
        self.wait_for(lambda: self.db.effects.count_documents({}) == 200, what="200 effects")
        p.kill9()

        p2 = self.run_fw(script)
        p2.wait_open()
        self.db.orders.insert_many([{"seq": i} for i in range(200, 300)])
        got = p2.wait_reports(300, timeout=60)
        self.assertEqual(sum(r["dup"] for r in got), 200)
        self.assertEqual({r.get("code") for r in got if r["dup"]}, {11000})
        self.assertEqual(sorted(e["n"] for e in self.db.effects.find()), [1] * 300)
        self.assertEqual(self.db.inbox.count_documents({}), 300)
        self.assertEqual(p2.stop(), 0)

    def typed_failure_script(self, body):
        return self.script("""
            fw.stream {
              name = "s", collection = "orders", dlq = true,
              retry = { initial_delay = "10ms", jitter = false },
              on_insert = function(ctx)
                local c = fw.mongo.collection("%s", "side")
                %s
                report({ ok = true, attempt = ctx:attempt_number() })
              end,
              on_error = function(err, ctx)
                report({ type = err.type, code = err.fields.code, attempt = ctx:attempt_number() })
              end,
            }
        """ % (self.db_name, body))

    @needs_standin("fault injection (failCommand closeConnection)")
    def test_network_error_is_retried_then_succeeds(self):
        self.fail_point({"times": 1}, {"failCommands": ["update"], "closeConnection": True,
                                       "appName": IO_APP})
        p = self.run_fw(self.typed_failure_script(
            'c:update_many({ _id = 1 }, { ["$set"] = { seen = true } }, { upsert = true })'))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        got = p.wait_reports(2)
        self.assertEqual(got[0], {"type": "Mongo.Network", "attempt": 1})
        self.assertEqual(got[1], {"ok": True, "attempt": 2})
        self.assertEqual(self.db.side.find_one({"_id": 1}), {"_id": 1, "seen": True})
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 0)
        self.assertEqual(p.stop(), 0)

    def test_duplicate_key_goes_straight_to_the_dlq(self):
        self.db.side.insert_one({"_id": 7})
        p = self.run_fw(self.typed_failure_script("c:insert_one({ _id = 7 })"))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        entry = self.wait_for(lambda: self.db["_fw_dlq"].find_one(), what="the DLQ entry")
        self.assertEqual(entry["attempts"], 1)
        self.assertEqual(entry["error"]["type"], "Mongo.DuplicateKey")
        self.assertIn("E11000", entry["error"]["message"])
        # on_error reported before the entry was written: its line may still be on its way.
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.reports(), [{"type": "Mongo.DuplicateKey", "code": 11000, "attempt": 1}])

    @needs_standin("fault injection (failCommand blockConnection)")
    def test_a_hung_server_is_cut_by_the_handler_budget(self):
        self.fail_point("alwaysOn", {"failCommands": ["find"], "blockConnection": True,
                                     "blockTimeMS": 10000, "appName": IO_APP})
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders", dlq = true, timeout = "500ms",
              on_insert = function(ctx)
                fw.mongo.collection("%s", "side"):find_one({ _id = 1 })
              end,
            }
        """ % self.db_name))
        p.wait_open()
        t0 = time.monotonic()
        self.db.orders.insert_one({"_id": 1})
        entry = self.wait_for(lambda: self.db["_fw_dlq"].find_one(), what="the DLQ entry")
        elapsed = time.monotonic() - t0
        self.assertEqual(entry["error"]["type"], "Mongo.Timeout")
        # The server holds the request for 10 s; the budget is 0.5 s (the bound leaves a
        # loaded machine's event round trip room).
        self.assertLess(elapsed, 7.0)
        self.assertEqual(p.stop(), 0)

    def test_a_cursor_left_open_is_closed_after_the_handler(self):
        self.db.side.insert_many([{"_id": i} for i in range(10)])
        p = self.run_fw(self.script("""
            local kept
            fw.stream {
              name = "s", collection = "orders",
              on_insert = function(ctx)
                if kept == nil then
                  kept = fw.mongo.collection("%s", "side"):find({}, { batch_size = 2, sort = { _id = 1 } })
                  report({ first = kept()._id })
                else
                  local ok, err = pcall(kept.to_array, kept)
                  local all = fw.mongo.collection("%s", "side"):find({}):to_array()
                  report({ ok = ok, err = tostring(err), n = #all })
                end
              end,
            }
        """ % (self.db_name, self.db_name)))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        self.db.orders.insert_one({"_id": 2})
        got = p.wait_reports(2)
        self.assertEqual(got[0], {"first": 0})
        self.assertFalse(got[1]["ok"])
        self.assertIn("is closed (a cursor lasts for the handler call that opened it", got[1]["err"])
        self.assertEqual(got[1]["n"], 10)
        self.assertEqual(p.stop(), 0)

    def test_fw_mongo_at_top_level_is_a_load_error(self):
        script = self.script("""
            fw.mongo.collection("shop", "orders"):find_one({})
            fw.stream { name = "s", collection = "c", on_change = function() end }
        """)
        cp = run_cli(["check", script])
        self.assertEqual(cp.returncode, 1)
        self.assertIn("fw.mongo is available inside handlers only", cp.stderr)

    def test_bad_arguments_name_the_call(self):
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders",
              on_insert = function(ctx)
                local out = {}
                for _, f in ipairs({
                  function() fw.mongo.collection(42, "x") end,
                  function() fw.mongo.collection("%s", "x"):update_one({}, { a = 1 }) end,
                  function() fw.mongo.collection("%s", "x", { connection = "nope" }):find_one({}) end,
                }) do
                  local ok, err = pcall(f)
                  out[#out + 1] = tostring(err)
                end
                report(out)
              end,
            }
        """ % (self.db_name, self.db_name)))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        got = p.wait_reports(1)[0]
        self.assertIn("fw.mongo.collection: database must be a string", got[0])
        self.assertIn("update_one: update must be a table of $-operators or use replace_one", got[1])
        self.assertIn('unknown connection "nope"', got[2])
        self.assertEqual(p.stop(), 0)


@needs_standin("second server started beside it (the audit connection)")
class NamedConnectionTest(StandInTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.audit = StandIn()
        cls.audit.start()
        cls.audit_client = pymongo.MongoClient(cls.audit.uri)

    @classmethod
    def tearDownClass(cls):
        cls.audit_client.close()
        cls.audit.stop()
        super().tearDownClass()

    def test_handlers_and_the_dlq_use_a_named_connection(self):
        script = self.script("""
            fw.connection { name = "audit", uri = fw.env("AUDIT_URI") }
            fw.stream {
              name = "s", collection = "orders", dlq = { connection = "audit" },
              on_insert = function(ctx)
                local doc = ctx:full_document()
                fw.mongo.collection("%s", "inbox", { connection = "audit" })
                  :insert_one({ _id = doc._id, at = fw.date() })
                if doc.bad then ctx:send_to_dlq("bad order") end
              end,
            }
        """ % self.db_name)
        env = clean_env({"AUDIT_URI": self.audit.uri})
        p = self.run_fw(script, env=env)
        p.wait_open()
        self.db.orders.insert_many([{"_id": 1}, {"_id": 2, "bad": True}])
        audit_db = self.audit_client[self.db_name]
        self.wait_for(lambda: audit_db["_fw_dlq"].count_documents({}) == 1, what="DLQ on audit")
        self.assertEqual(sorted(d["_id"] for d in audit_db.inbox.find()), [1, 2])
        self.assertEqual(self.db.inbox.count_documents({}), 0)
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 0)
        self.assertEqual(audit_db["_fw_dlq"].find_one()["error"]["message"], "bad order")
        self.assertEqual(p.stop(), 0)

    def test_a_reload_that_changes_a_connection_uri_takes_effect_for_new_operations(self):
        body = """
            fw.connection { name = "audit", uri = "%s" }
            fw.stream {
              name = "s", collection = "orders",
              on_insert = function(ctx)
                fw.mongo.collection("%s", "inbox", { connection = "audit" })
                  :insert_one({ _id = ctx:full_document()._id })
                report({ id = ctx:full_document()._id })
              end,
            }
        """
        script = self.script(body % (self.audit.uri, self.db_name))
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_reports(1)
        with open(script, "w") as f:
            f.write(PRELUDE + textwrap.dedent(body % (self.uri, self.db_name)))
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log("reloaded ")
        self.db.orders.insert_one({"_id": 2})
        p.wait_reports(2)
        self.assertEqual([d["_id"] for d in self.audit_client[self.db_name].inbox.find()], [1])
        self.assertEqual([d["_id"] for d in self.db.inbox.find()], [2])
        self.assertEqual(p.stop(), 0)

    def test_check_prints_connections_without_their_password(self):
        d = self.tmp.name
        script = write_script(d, """
            fw.connection { name = "audit", uri = "mongodb://writer:s3cr3t@127.0.0.1:1/?replicaSet=rs0" }
            fw.stream { name = "s", database = "shop", collection = "c",
                        dlq = { connection = "audit" }, on_change = function() end }
        """)
        cp = run_cli(["check", script])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("connection audit: mongodb://writer:***@127.0.0.1:1/?replicaSet=rs0",
                      cp.stdout)
        self.assertIn("dlq.connection", cp.stdout)
        self.assertNotIn("s3cr3t", cp.stdout + cp.stderr)

    def test_a_bad_connection_uri_is_a_load_error_naming_it(self):
        script = write_script(self.tmp.name, """
            fw.connection { name = "audit", uri = "mongodb://h:notaport/" }
            fw.stream { name = "s", database = "shop", on_change = function() end }
        """)
        cp = run_cli(["check", script])
        self.assertEqual(cp.returncode, 1)
        self.assertIn('connection "audit": uri: invalid MongoDB URI', cp.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
