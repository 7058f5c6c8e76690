"""Events reach the right handler, with the right ctx values, in order, filtered
as declared (issue 3: handler context, values, filtering, ordering)."""
import calendar
import datetime
import time
import unittest

import bson
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument

from fwtest import needs_mongodb, StandInTestCase

# Reports everything the ctx offers for one event. Documents are plain (ints,
# strings), so cjson can encode them as they are.
DESCRIBE = """
local function describe(handler)
  return function(ctx)
    local ct, wt = ctx:cluster_time(), ctx:wall_time()
    local ud = ctx:update_description()
    local before_meta = ctx:metadata("seen_by")
    ctx:add_metadata("seen_by", handler)
    report({
      handler = handler,
      op = ctx:operation_type(),
      full = plain(ctx:full_document()),
      before = plain(ctx:full_document_before_change()),
      key = plain(ctx:document_key()),
      updated = ud and plain(ud.updatedFields),
      removed = ud and plain(ud.removedFields),
      removed_n = ud and #ud.removedFields,
      attempt = ctx:attempt_number(),
      eid = ctx:event_id(),
      token = ctx:resume_token()._data,
      stream = ctx:stream_name(),
      db = ctx:database_name(),
      coll = ctx:collection_name(),
      ct = ct and tostring(ct), ct_t = ct and ct.t, ct_i = ct and ct.i, ct_type = ct and ct.type,
      wt = wt and tostring(wt), wt_ms = wt and wt.ms,
      tx_is_nil = ctx:transaction() == nil,
      summary = ctx:summary(),
      meta_before = before_meta or "none",
      meta = ctx:metadata("seen_by"),
      same_full = ctx:full_document() == ctx:full_document(),
    })
  end
end
"""


def ms_of(dt):
    return calendar.timegm(dt.utctimetuple()) * 1000 + dt.microsecond // 1000


class HandlerContext(StandInTestCase):

    @needs_mongodb("6.0", "pre- and post-images")
    def test_each_operation_type_reaches_its_handler_with_its_ctx(self):
        self.db.create_collection("orders")
        self.db.command({"collMod": "orders", "changeStreamPreAndPostImages": {"enabled": True}})
        p = self.run_fw(self.script(DESCRIBE + """
            fw.stream {
              name = "ctx-watcher", collection = "orders",
              full_document = "updateLookup", full_document_before_change = "whenAvailable",
              restart = { initial_delay = "100ms" },
              on_insert = describe("on_insert"), on_update = describe("on_update"),
              on_replace = describe("on_replace"), on_delete = describe("on_delete"),
              on_change = describe("on_change"),
            }
            """))
        p.wait_open()
        # The test's own change stream sees the same events: tokens and times
        # must match what the handlers were given.
        mine = self.db.orders.watch(full_document="updateLookup")
        # One write at a time: updateLookup reads the document as it is when
        # the event is read, so the next write waits for the previous report.
        self.db.orders.insert_one({"_id": 1, "item": "book", "qty": 2})
        p.wait_reports(1)
        self.db.orders.update_one({"_id": 1}, {"$set": {"qty": 3}, "$unset": {"item": ""}})
        p.wait_reports(2)
        self.db.orders.replace_one({"_id": 1}, {"item": "pen", "qty": 5})
        p.wait_reports(3)
        self.db.orders.delete_one({"_id": 1})
        self.db.orders.drop()
        reps = p.wait_reports(6)
        expected_events = []
        while len(expected_events) < 6:
            ev = mine.try_next()
            if ev is not None:
                expected_events.append(ev)
        self.assertEqual(p.stop(), 0)

        self.assertEqual([(r["handler"], r["op"]) for r in reps], [
            ("on_insert", "insert"), ("on_update", "update"), ("on_replace", "replace"),
            ("on_delete", "delete"), ("on_change", "drop"), ("on_change", "invalidate")])
        ins, upd, rep, dele, drop, inv = reps

        self.assertEqual(ins["full"], {"_id": 1, "item": "book", "qty": 2})
        self.assertNotIn("before", ins)
        self.assertEqual(ins["key"], {"_id": 1})
        self.assertNotIn("updated", ins)

        self.assertEqual(upd["full"], {"_id": 1, "qty": 3})  # updateLookup
        self.assertEqual(upd["before"], {"_id": 1, "item": "book", "qty": 2})
        self.assertEqual(upd["key"], {"_id": 1})
        self.assertEqual(upd["updated"], {"qty": 3})
        self.assertEqual((upd["removed"], upd["removed_n"]), (["item"], 1))

        self.assertEqual(rep["full"], {"_id": 1, "item": "pen", "qty": 5})
        self.assertEqual(rep["before"], {"_id": 1, "qty": 3})
        self.assertNotIn("updated", rep)

        self.assertNotIn("full", dele)
        self.assertEqual(dele["before"], {"_id": 1, "item": "pen", "qty": 5})
        self.assertEqual(dele["key"], {"_id": 1})

        self.assertEqual((drop["db"], drop["coll"]), (self.db_name, "orders"))
        self.assertNotIn("key", drop)
        self.assertNotIn("coll", inv)

        for r, ev in zip(reps, expected_events):
            with self.subTest(op=r["op"]):
                self.assertEqual(r["attempt"], 1)
                self.assertEqual(r["eid"], ev["_id"]["_data"])
                self.assertEqual(r["token"], ev["_id"]["_data"])
                self.assertEqual(r["stream"], "ctx-watcher")
                if r["op"] != "invalidate":
                    self.assertEqual(r["db"], self.db_name)
                ct = ev["clusterTime"]
                self.assertEqual((r["ct_t"], r["ct_i"], r["ct_type"]), (ct.time, ct.inc, "timestamp"))
                self.assertEqual(r["ct"], "Timestamp(%d, %d)" % (ct.time, ct.inc))
                self.assertEqual(r["wt_ms"], ms_of(ev["wallTime"]))
                self.assertEqual(r["wt"], ev["wallTime"].strftime("%Y-%m-%dT%H:%M:%S.")
                                 + "%03dZ" % (ev["wallTime"].microsecond // 1000))
                self.assertTrue(r["tx_is_nil"])
                # ctx values are cached per event; metadata does not leak
                # from one event into the next.
                self.assertTrue(r["same_full"])
                self.assertEqual((r["meta_before"], r["meta"]), ("none", r["handler"]))
                # summary: one line naming the event, never its contents.
                s = r["summary"]
                self.assertIn(r["op"], s)
                self.assertIn(r["eid"], s)
                self.assertNotIn("\n", s)
                self.assertNotIn("  ", s)
                for secret in ("book", "pen", "qty"):
                    self.assertNotIn(secret, s)
        self.assertIn("%s.orders" % self.db_name, ins["summary"])
        self.assertIn("invalidate event=" + inv["eid"], inv["summary"])
        ids = [r["eid"] for r in reps]
        self.assertEqual(ids, sorted(set(ids)))

    def test_full_document_default_has_no_post_image_for_updates(self):
        p = self.run_fw(self.script(DESCRIBE + """
            fw.stream { name = "s", collection = "c", on_change = describe("on_change") }
            """))
        p.wait_open()
        self.db.c.insert_one({"_id": "a", "v": 1})
        self.db.c.update_one({"_id": "a"}, {"$inc": {"v": 1}})
        ins, upd = p.wait_reports(2)
        self.assertEqual(ins["full"], {"_id": "a", "v": 1})
        self.assertNotIn("full", upd)
        self.assertNotIn("before", upd)
        self.assertEqual(upd["updated"], {"v": 2})

    def test_typed_values_are_readable_from_lua(self):
        oid = ObjectId()
        when = datetime.datetime(2024, 2, 29, 12, 30, 15, 123000)
        doc = {"_id": oid, "when": when, "price": Decimal128("12.50"),
               "big": Int64(2 ** 62 + 1), "small": 7, "ratio": 1.5,
               "nested": [[1, 2], [3, [4, "x"]]], "empty": [], "nothing": None,
               "inner": {"deep": {"k": "v"}}, "flag": True}
        p = self.run_fw(self.script("""
            fw.stream { name = "typed", collection = "c", on_insert = function(ctx)
              local d = ctx:full_document()
              report({
                oid_hex = d._id.hex, oid_type = d._id.type, oid_str = tostring(d._id),
                oid_eq = d._id == fw.object_id(d._id.hex),
                key_eq = ctx:document_key()._id == d._id,
                when_ms = d.when.ms, when_str = tostring(d.when), when_type = d.when.type,
                date_eq = d.when == fw.date(d.when.ms),
                price = d.price.string, price_str = tostring(d.price), price_type = d.price.type,
                big_str = tostring(d.big), big_mt = math.type(d.big),
                small = d.small, small_mt = math.type(d.small),
                ratio = d.ratio, ratio_mt = math.type(d.ratio),
                nested_n = #d.nested, nested_4 = d.nested[2][2][1], nested_x = d.nested[2][2][2],
                nested_mt = getmetatable(fw.table(d.nested[2])),
                empty_n = #d.empty, empty_mt = getmetatable(fw.table(d.empty)),
                doc_mt = getmetatable(fw.table(d.inner)),
                big_in_table = math.type(fw.table(d).big), big_in_table_str = tostring(fw.table(d).big),
                nothing_is_null = d.nothing == fw.null, nothing_str = tostring(d.nothing),
                deep = d.inner.deep.k, flag = d.flag,
              })
            end }
            """))
        p.wait_open()
        self.db.c.insert_one(doc)
        (r,) = p.wait_reports(1)
        self.assertEqual((r["oid_hex"], r["oid_type"]), (str(oid), "object_id"))
        self.assertIn(str(oid), r["oid_str"])
        self.assertTrue(r["oid_eq"])
        self.assertTrue(r["key_eq"])
        self.assertEqual(r["when_ms"], ms_of(when))
        self.assertEqual(r["when_str"], "2024-02-29T12:30:15.123Z")
        self.assertEqual(r["when_type"], "date")
        self.assertTrue(r["date_eq"])
        self.assertEqual((r["price"], r["price_type"]), ("12.50", "decimal128"))
        self.assertIn("12.50", r["price_str"])
        # 2^62 + 1 has no exact double: an exact integer proves no float on the way.
        self.assertEqual((r["big_str"], r["big_mt"]), (str(2 ** 62 + 1), "integer"))
        self.assertEqual((r["small"], r["small_mt"]), (7, "integer"))
        self.assertEqual((r["ratio"], r["ratio_mt"]), (1.5, "float"))
        self.assertEqual((r["nested_n"], r["nested_4"], r["nested_x"]), (2, 4, "x"))
        self.assertEqual(r["nested_mt"], "flowwarden.array")
        self.assertEqual((r["empty_n"], r["empty_mt"]), (0, "flowwarden.array"))
        self.assertEqual(r["doc_mt"], "flowwarden.document")
        self.assertEqual((r["big_in_table"], r["big_in_table_str"]), ("integer", str(2 ** 62 + 1)))
        self.assertTrue(r["nothing_is_null"])
        self.assertEqual(r["nothing_str"], "null")
        self.assertEqual((r["deep"], r["flag"]), ("v", True))

    def test_a_document_survives_bson_to_lua_to_bson_byte_identical(self):
        # The handler hands the whole fullDocument back to the runtime as DLQ
        # metadata; the DLQ entry must hold the very same bytes (int32 vs
        # int64 widths, empty arrays, key order, every typed value).
        raw_opts = CodecOptions(document_class=RawBSONDocument)
        doc = {"_id": ObjectId(), "i32": 5, "i64": Int64(5), "big": Int64(-2 ** 63),
               "d": 2.0, "dec": Decimal128("-0.00"), "when": datetime.datetime(1960, 1, 1),
               "arr": [[], {}, [Int64(1), 2]], "empty": [], "obj": {}, "n": None,
               "bin": bson.Binary(b"\x00\x01", 0x80), "re": bson.Regex("^a", "i"),
               "ts": bson.Timestamp(5, 6), "mn": bson.MinKey(), "mx": bson.MaxKey(),
               "code": bson.Code("x()"), "s": "h\u00e9"}
        p = self.run_fw(self.script("""
            fw.stream { name = "rt", collection = "c", dlq = true, on_insert = function(ctx)
              ctx:add_metadata("doc", ctx:full_document())
              ctx:send_to_dlq("round trip")
            end }
            """))
        p.wait_open()
        self.db.c.insert_one(doc)
        dlq = self.db.get_collection("_fw_dlq", codec_options=raw_opts)
        entry = self.wait_for(lambda: dlq.find_one({}), what="the DLQ entry")
        stored = self.db.get_collection("c", codec_options=raw_opts).find_one({})
        self.assertEqual(entry["metadata"]["doc"].raw, stored.raw)


    def test_transaction_reports_lsid_and_txn_number_when_the_event_has_them(self):
        # The stand-in has no transactions; a pipeline stage gives the events
        # the two fields a transaction's events carry (txnNumber a long, as
        # MongoDB's: an int is refused as a wrong-typed field).
        p = self.run_fw(self.script("""
            fw.stream { name = "tx", collection = "c",
              pipeline = { { ["$addFields"] = { lsid = { id = "session-1" },
                                                txnNumber = fw.int64(42) } } },
              on_insert = function(ctx)
                local doc = ctx:full_document()   -- fills the event's cache first
                local t = ctx:transaction()
                local keys = {}
                for k in pairs(t) do keys[#keys + 1] = tostring(k) end
                table.sort(keys)
                report({ kind = type(t), lsid = t and t.lsid and t.lsid.id,
                         txn = t and t.txn_number, keys = keys, op = ctx:operation_type() })
              end }
            """))
        p.wait_open()
        self.db.c.insert_one({"_id": 1})
        self.assertEqual(p.wait_reports(1), [{"kind": "table", "lsid": "session-1", "txn": 42,
                                              "keys": ["lsid", "txn_number"], "op": "insert"}])

    def test_a_ctx_kept_past_its_event_refuses_to_be_used(self):
        p = self.run_fw(self.script("""
            local kept
            fw.stream { name = "s", collection = "c", on_insert = function(ctx)
              if kept then
                local ok, err = pcall(function() return kept:operation_type() end)
                report({ ok = ok, err = tostring(err) })
              end
              kept = ctx
            end }
            """))
        p.wait_open()
        self.db.c.insert_many([{"_id": 1}, {"_id": 2}])
        (r,) = p.wait_reports(1)
        self.assertFalse(r["ok"])
        self.assertIn("ctx used after its event was handled", r["err"])


class Filtering(StandInTestCase):

    def test_database_wide_stream_sees_every_collection_but_not_its_checkpoints(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "everything", checkpoint = { save_every = 1 },
              on_change = function(ctx)
                report({ op = ctx:operation_type(), coll = ctx:collection_name(),
                         db = ctx:database_name(), eid = ctx:event_id() })
              end }
            """))
        p.wait_open()
        self.db.alpha.insert_one({"_id": 1})
        self.db.beta.insert_one({"_id": 2})
        self.db.gamma.update_one({"_id": 3}, {"$set": {"v": 1}}, upsert=True)
        self.db.alpha.delete_one({"_id": 1})
        reps = p.wait_reports(4)
        # Every event above wrote a checkpoint to _fw_checkpoints in this same
        # database. Once the last one is written, a sentinel insert: had the
        # stream seen its own writes, they would arrive before the sentinel.
        self.wait_checkpoint("everything",
                             lambda cp: cp.get("lastProcessedToken", {}).get("_data") == reps[3]["eid"])
        self.db.delta.insert_one({"_id": "sentinel"})
        reps = p.wait_reports(5)
        self.assertEqual([(r["op"], r["coll"]) for r in reps], [
            ("insert", "alpha"), ("insert", "beta"), ("insert", "gamma"),
            ("delete", "alpha"), ("insert", "delta")])
        self.assertEqual({r["db"] for r in reps}, {self.db_name})
        self.assertEqual(p.stop(), 0)
        self.assertEqual(len(p.reports()), 5)

    def test_database_wide_stream_does_not_see_its_own_dead_letters(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "dl", dlq = true, on_insert = function(ctx)
              local d = ctx:full_document()
              report({ coll = ctx:collection_name(), id = d._id })
              if d.reject then ctx:send_to_dlq("rejected") end
            end }
            """))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "reject": True})
        self.wait_for(lambda: self.db["_fw_dlq"].find_one({}), what="the DLQ entry")
        self.db.orders.insert_one({"_id": 2})
        reps = p.wait_reports(2)
        self.assertEqual(reps, [{"coll": "orders", "id": 1}, {"coll": "orders", "id": 2}])

    def test_database_wide_stream_ignores_other_databases(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "mine", on_insert = function(ctx)
              report({ db = ctx:database_name(), id = ctx:document_key()._id }) end }
            """))
        p.wait_open()
        self.client[self.db_name + "_other"].c.insert_one({"_id": "elsewhere"})
        self.db.c.insert_one({"_id": "here"})
        self.assertEqual(p.wait_reports(1), [{"db": self.db_name, "id": "here"}])
        self.db.c.insert_one({"_id": "here2"})
        self.assertEqual([r["id"] for r in p.wait_reports(2)], ["here", "here2"])

    @needs_mongodb("6.0", "showExpandedEvents")
    def test_ddl_changes_reach_no_handler(self):
        # flowwarden never asks for showExpandedEvents, so the DDL events MongoDB 6.0+ logs
        # (create, createIndexes, dropIndexes, modify, a view's create and drop;
        # change_stream_filter_helpers.cpp keeps them out of a stream without it) reach no
        # handler, neither of a database's stream nor of a collection's.
        self.db.create_collection("c")
        p = self.run_fw(self.script("""
            local function rep(s)
              return function(ctx)
                report({ s = s, op = ctx:operation_type(), coll = ctx:collection_name() })
              end
            end
            fw.stream { name = "all", on_change = rep("all") }
            fw.stream { name = "one", collection = "c", on_change = rep("one") }
            """))
        p.wait_open(2)
        # The test's own stream asks for them: the DDL below is there to be seen.
        expanded = self.db.command("aggregate", 1, cursor={},
                                   pipeline=[{"$changeStream": {"showExpandedEvents": True}}])
        self.db.command("create", "fresh")
        self.db.c.create_index("x", name="x_1")
        self.db.command("collMod", "c")
        self.db.c.drop_index("x_1")
        self.db.command("create", "v", viewOn="c", pipeline=[])
        self.db.command("drop", "v")
        self.db.c.insert_one({"_id": "sentinel"})
        self.db.implicit.insert_one({"_id": "implicit"})   # an implicit create, then the insert
        seen = []
        deadline = time.monotonic() + 10
        while len(seen) < 9 and time.monotonic() < deadline:
            batch = self.db.command("getMore", expanded["cursor"]["id"],
                                    collection="$cmd.aggregate",
                                    maxTimeMS=100)["cursor"]["nextBatch"]
            # flowwarden's own collections (checkpoints) are none of this test's business.
            seen += [e for e in batch if not e["ns"].get("coll", "").startswith("_fw")]
        self.assertEqual([e["operationType"] for e in seen], [
            "create", "createIndexes", "modify", "dropIndexes", "create", "drop", "insert",
            "create", "insert"])
        reps = p.wait_reports(3)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(sorted((r["s"], r["op"], r["coll"]) for r in p.reports()), [
            ("all", "insert", "c"), ("all", "insert", "implicit"), ("one", "insert", "c")],
            reps)

    def test_operation_types_filter_events(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "c", operation_types = { "insert", "delete" },
              on_change = function(ctx)
                report({ op = ctx:operation_type(), id = ctx:document_key()._id })
              end }
            """))
        p.wait_open()
        c = self.db.c
        c.insert_one({"_id": 1})
        c.update_one({"_id": 1}, {"$set": {"a": 1}})
        c.replace_one({"_id": 1}, {"b": 2})
        c.delete_one({"_id": 1})
        c.insert_one({"_id": 2})
        reps = p.wait_reports(3)
        self.assertEqual(reps, [{"op": "insert", "id": 1}, {"op": "delete", "id": 1},
                                {"op": "insert", "id": 2}])
        self.assertEqual(p.stop(), 0)
        self.assertEqual(len(p.reports()), 3)
        # The filter runs on the server: the stream saw no update/replace at
        # all, so no handler ran and none failed.
        self.assertEqual(p.count_log("summary: handled=3 handler_errors=0"), 1)

    def test_user_pipeline_match_filters_events(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "big-orders", collection = "orders",
              operation_types = { "insert", "update" }, full_document = "updateLookup",
              pipeline = { { ["$match"] = { ["fullDocument.total"] = { ["$gt"] = 100 } } } },
              on_change = function(ctx)
                local d = ctx:full_document()
                report({ op = ctx:operation_type(), id = d._id, total = d.total })
              end }
            """))
        p.wait_open()
        o = self.db.orders
        o.insert_many([{"_id": 1, "total": 50}, {"_id": 2, "total": 150},
                       {"_id": 3, "total": 100}, {"_id": 4, "total": 200}])
        o.update_one({"_id": 1}, {"$set": {"total": 101}})
        o.update_one({"_id": 2}, {"$set": {"total": 10}})
        o.delete_one({"_id": 4})
        o.insert_one({"_id": 5, "total": 1000})
        reps = p.wait_reports(4)
        self.assertEqual(reps, [{"op": "insert", "id": 2, "total": 150},
                                {"op": "insert", "id": 4, "total": 200},
                                {"op": "update", "id": 1, "total": 101},
                                {"op": "insert", "id": 5, "total": 1000}])

    def test_specific_handler_wins_and_unhandled_types_are_skipped(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "c",
              on_insert = function(ctx) report({ h = "insert", op = ctx:operation_type() }) end,
              on_delete = function(ctx) report({ h = "delete", op = ctx:operation_type() }) end }
            """))
        p.wait_open()
        self.db.c.insert_one({"_id": 1})
        self.db.c.update_one({"_id": 1}, {"$set": {"a": 1}})
        self.db.c.replace_one({"_id": 1}, {"a": 2})
        self.db.c.delete_one({"_id": 1})
        self.db.c.insert_one({"_id": 2})
        reps = p.wait_reports(3)
        self.assertEqual(reps, [{"h": "insert", "op": "insert"}, {"h": "delete", "op": "delete"},
                                {"h": "insert", "op": "insert"}])
        self.assertEqual(p.stop(), 0)
        # Events without a handler are passed over, not counted as errors, and
        # the checkpoint still moves past them.
        self.assertEqual(p.count_log("handler_errors=0"), 1)


class OrderAndErrors(StandInTestCase):

    def test_two_thousand_inserts_arrive_all_and_in_order(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "seq", collection = "c", checkpoint = { save_every = 100 },
              on_insert = function(ctx)
                report({ n = ctx:full_document().n, eid = ctx:event_id() })
              end }
            """))
        p.wait_open()
        for start in range(0, 2000, 500):
            self.db.c.insert_many([{"n": i} for i in range(start, start + 500)])
        reps = p.wait_reports(2000, timeout=60)
        self.assertEqual([r["n"] for r in reps], list(range(2000)))
        ids = [r["eid"] for r in reps]
        self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])), "event ids not increasing")
        self.assertEqual(p.stop(), 0)
        self.assertEqual(len(p.reports()), 2000)
        self.assertEqual(self.checkpoint("seq")["lastProcessedToken"]["_data"], ids[-1])

    def test_a_failing_handler_is_logged_without_the_document_and_the_stream_goes_on(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "fragile", collection = "c", on_insert = function(ctx)
              local d = ctx:full_document()
              report({ id = d._id, eid = ctx:event_id() })
              if d.bad then error("refusing order " .. tostring(d._id)) end
            end }
            """))
        p.wait_open()
        self.db.c.insert_one({"_id": 1, "card": "4111-SECRET"})
        self.db.c.insert_one({"_id": 2, "card": "4111-SECRET", "bad": True})
        self.db.c.insert_one({"_id": 3, "card": "4111-SECRET"})
        reps = p.wait_reports(3)
        self.assertEqual([r["id"] for r in reps], [1, 2, 3])
        errors = [r for r in p.records if r.get("level") == "error"]
        self.assertEqual(len(errors), 1, errors)
        self.assertEqual(errors[0]["stream"], "fragile")
        self.assertIn(reps[1]["eid"], errors[0]["msg"])
        self.assertIn("RuntimeError", errors[0]["msg"])
        self.assertIn("refusing order 2", errors[0]["msg"])
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("summary: handled=2 handler_errors=1"), 1)
        for line in p.raw_lines():
            self.assertNotIn("SECRET", line)


if __name__ == "__main__":
    unittest.main()
