"""The dead-letter queue (seed 002): every field of the entry, type for type;
the include flags; ttl_days; the indexes; shared collections; and the durable
hand-off when the DLQ insert fails."""
import datetime
import unittest
import uuid

import bson
from bson.binary import Binary
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from bson.regex import Regex
from bson.timestamp import Timestamp

from dlqtest import UUID4, FailureTestCase, lua_stream, summary, wait_for
from fwtest import needs_standin

FAST = 'initial_delay = "50ms", jitter = false'
DAY_MS = 24 * 3600 * 1000
RAW = CodecOptions(document_class=RawBSONDocument)


def ms(dt):
    return int(dt.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)


class DlqEntrySchema(FailureTestCase):

    def test_every_field_matches_the_seed_schema_type_for_type(self):
        p = self.start(lua_stream(
            retry="{ max_attempts = 2, %s }" % FAST,
            dlq='{ collection = "orders_dlq", ttl_days = 90 }', handler="h").replace(
            "fw.stream", """
local function h(ctx)
  report({ attempt = ctx:attempt_number(), eid = ctx:event_id() })
  ctx:add_metadata("rule", "total must be >= 0")
  ctx:add_metadata("count", 3)
  ctx:add_metadata("tags", { "a", "b" })
  error(fw.error("Payment.Unavailable", "payment gateway is down", { status = 503 }))
end
fw.stream""", 1))
        with self.db.orders.watch() as cs:
            before = datetime.datetime.utcnow().replace(microsecond=0)
            self.db.orders.insert_one({"_id": ObjectId("64f1a2b3c4d5e6f7a8b9c0d1"),
                                       "status": "PAID", "total": 99.99})
            event = cs.next()
        e = self.wait_dlq(1, "orders_dlq", p=p)[0]
        reports = p.reports()

        self.assertEqual(list(e.keys())[:16], [
            "_id", "streamName", "operationType", "documentKey", "fullDocument", "resumeToken",
            "error", "attempts", "status", "firstAttemptAt", "lastAttemptAt", "createdAt",
            "expiresAt", "metadata", "eventId", "ns"])
        # Added to the seed's schema, never renaming any of it: then the
        # entry's life (issue 12) and what a replay needs (test_dlq_life.py).
        self.assertEqual(list(e.keys())[16:], ["clusterTime", "scriptVersion", "lastTouched",
                                               "reprocessAttempts", "diagnostics", "history",
                                               "wallTime"])
        self.assertRegex(e["scriptVersion"], r"^[0-9a-f]{12}$")
        self.assertIsInstance(e["_id"], str)
        self.assertRegex(e["_id"], UUID4)
        self.assertEqual(e["streamName"], "s")
        self.assertEqual(e["operationType"], "INSERT")
        self.assertEqual(e["documentKey"], {"_id": ObjectId("64f1a2b3c4d5e6f7a8b9c0d1")})
        self.assertEqual(e["fullDocument"], {"_id": ObjectId("64f1a2b3c4d5e6f7a8b9c0d1"),
                                             "status": "PAID", "total": 99.99})
        self.assertEqual(e["resumeToken"], event["_id"])
        self.assertEqual(e["eventId"], event["_id"]["_data"])
        self.assertEqual(e["eventId"], reports[0]["eid"])
        self.assertEqual(e["ns"], {"db": self.db_name, "coll": "orders"})
        self.assertIsInstance(e["clusterTime"], Timestamp)
        self.assertEqual(e["clusterTime"], event["clusterTime"])

        self.assertEqual(set(e["error"].keys()), {"type", "message", "stackTrace"})
        self.assertEqual(e["error"]["type"], "Payment.Unavailable")
        self.assertEqual(e["error"]["message"], "payment gateway is down")
        self.assertIsInstance(e["error"]["stackTrace"], str)
        self.assertIn("stack traceback:", e["error"]["stackTrace"])
        self.assertIn("script.lua", e["error"]["stackTrace"])

        self.assertIs(type(e["attempts"]), int)  # int32, as the seed's int
        self.assertEqual(e["attempts"], 2)
        self.assertEqual(e["status"], "PENDING")
        for key in ("firstAttemptAt", "lastAttemptAt", "createdAt", "expiresAt"):
            self.assertIsInstance(e[key], datetime.datetime, key)
        self.assertLessEqual(before, e["firstAttemptAt"])
        self.assertLessEqual(e["firstAttemptAt"], e["lastAttemptAt"])
        self.assertLessEqual(e["lastAttemptAt"], e["createdAt"])
        # Two attempts 50 ms apart: the first and last attempts are distinct.
        self.assertGreaterEqual(ms(e["lastAttemptAt"]) - ms(e["firstAttemptAt"]), 50)
        self.assertEqual(ms(e["expiresAt"]) - ms(e["createdAt"]), 90 * DAY_MS)
        self.assertEqual(e["metadata"], {"rule": "total must be >= 0", "count": 3,
                                         "tags": ["a", "b"]})

    def test_full_document_keeps_every_bson_type_byte_for_byte(self):
        self.start(lua_stream(dlq="true", handler="h").replace("fw.stream", """
local function h(ctx) error(fw.error("Boom", "x")) end
fw.stream""", 1))
        doc = {
            "_id": ObjectId(),
            "dec": Decimal128("1234567890.123456789"),
            "i32": 7,
            "i64": Int64(7),
            "big": Int64(2 ** 40),
            "dbl": 1.0,
            "date": datetime.datetime(2026, 1, 15, 10, 30, 0, 123000),
            "oid": ObjectId("64f1a2b3c4d5e6f7a8b9c0d1"),
            "bin0": Binary(b"\x00\x01\xff", 0),
            "uuid4": Binary(uuid.UUID("550e8400-e29b-41d4-a716-446655440000").bytes, 4),
            "user": Binary(b"custom", 0x80),
            "ts": Timestamp(1700000000, 5),
            "re": Regex("^a.*z$", "i"),
            "min": MinKey(),
            "max": MaxKey(),
            "null": None,
            "empty_arr": [],
            "empty_doc": {},
            "nested": {"arr": [1, Int64(2), 3.5, "x", {"deep": Decimal128("0.1")}]},
            "bool": False,
            "str": "h\u00e9llo",
        }
        raw_orders = self.db.get_collection("orders", codec_options=RAW)
        self.db.orders.insert_one(doc)
        source = raw_orders.find_one({"_id": doc["_id"]})
        self.wait_dlq(1)
        entry = self.db.get_collection("_fw_dlq", codec_options=RAW).find_one()
        self.assertEqual(entry["fullDocument"].raw, source.raw)
        # And decoded, type for type (pymongo keeps int32/int64 apart).
        full = self.dlq_entries()[0]["fullDocument"]
        expected = bson.decode(source.raw)
        self.assertEqual(list(full.keys()), list(doc.keys()))
        for key, value in expected.items():
            self.assertEqual(full[key], value, key)
            self.assertIs(type(full[key]), type(value), key)
        self.assertIs(type(full["i64"]), Int64)
        self.assertIs(type(full["i32"]), int)
        self.assertIs(type(full["dec"]), Decimal128)
        self.assertEqual(full["user"], Binary(b"custom", 0x80))
        self.assertIs(type(full["nested"]["arr"][1]), Int64)

    def test_operation_types_are_upper_case(self):
        self.start(lua_stream(dlq="true", handler="h",
                                  extra="on_update = h, on_replace = h, on_delete = h, "
                                        'full_document = "updateLookup"').replace(
            "fw.stream", """
local function h(ctx) error(fw.error("Boom", ctx:operation_type())) end
fw.stream""", 1))
        # One at a time: updateLookup reads the document when the event is
        # read, so a later replace must not overtake the update's lookup.
        self.db.orders.insert_one({"_id": 1, "v": 1})
        self.wait_dlq(1)
        self.db.orders.update_one({"_id": 1}, {"$set": {"v": 2}})
        self.wait_dlq(2)
        self.db.orders.replace_one({"_id": 1}, {"v": 3})
        self.wait_dlq(3)
        self.db.orders.delete_one({"_id": 1})
        entries = self.wait_dlq(4)
        by_op = {e["operationType"]: e for e in entries}
        self.assertEqual([e["operationType"] for e in entries],
                         ["INSERT", "UPDATE", "REPLACE", "DELETE"])
        self.assertEqual([e["error"]["message"] for e in entries],
                         ["insert", "update", "replace", "delete"])
        for e in entries:
            self.assertEqual(e["documentKey"], {"_id": 1})
        self.assertEqual(by_op["UPDATE"]["fullDocument"], {"_id": 1, "v": 2})
        self.assertEqual(by_op["REPLACE"]["fullDocument"], {"_id": 1, "v": 3})
        # A delete event has no document: the field says so with null.
        self.assertIn("fullDocument", by_op["DELETE"])
        self.assertIsNone(by_op["DELETE"]["fullDocument"])

    def test_both_include_flags_off_leave_the_fields_out(self):
        self.start(lua_stream(dlq="{ include_original_document = false, "
                                  "include_stack_trace = false }"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom", "secret": "x"})
        e = self.wait_dlq(1)[0]
        self.assertNotIn("fullDocument", e)
        self.assertNotIn("stackTrace", e["error"])
        self.assertEqual(e["error"], {"type": "Boom", "message": "failed with Boom"})
        self.assertEqual(e["documentKey"], {"_id": 1})
        self.assertEqual(e["metadata"], {})

    def test_stack_trace_flag_alone(self):
        self.start(lua_stream(dlq="{ include_stack_trace = false }"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        e = self.wait_dlq(1)[0]
        self.assertNotIn("stackTrace", e["error"])
        self.assertEqual(e["fullDocument"], {"_id": 1, "fail": "Boom"})

    def test_ttl_days_zero_keeps_entries_forever(self):
        self.start(lua_stream(dlq="{ ttl_days = 0 }"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        e = self.wait_dlq(1)[0]
        self.assertIn("expiresAt", e)
        self.assertIsNone(e["expiresAt"])

    def test_default_ttl_is_30_days(self):
        self.start(lua_stream(dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        e = self.wait_dlq(1)[0]
        self.assertEqual(ms(e["expiresAt"]) - ms(e["createdAt"]), 30 * DAY_MS)


class DlqIndexesAndSharing(FailureTestCase):

    def indexes(self, coll):
        return {tuple(i["key"].items()): i.to_dict() if hasattr(i, "to_dict") else dict(i)
                for i in self.db[coll].list_indexes()}

    def test_indexes_are_created_at_start_and_idempotently(self):
        p = self.start(lua_stream(dlq='{ collection = "orders_dlq" }'))
        idx = wait_for(lambda: (lambda i: i if len(i) >= 6 else None)(
            self.indexes("orders_dlq")), what="DLQ indexes")
        ttl = idx[(("expiresAt", 1),)]
        self.assertEqual(ttl["expireAfterSeconds"], 0)
        self.assertIn((("streamName", 1), ("createdAt", 1)), idx)
        # The readers' sorts (dlq.reprocess and dlq replay; dlq list --stream).
        self.assertIn((("streamName", 1), ("clusterTime", 1), ("createdAt", 1), ("_id", 1)), idx)
        self.assertIn((("streamName", 1), ("createdAt", 1), ("_id", 1)), idx)
        unique = idx[(("streamName", 1), ("eventId", 1))]
        self.assertEqual((unique["name"], unique["unique"], unique["partialFilterExpression"]),
                         ("fw_stream_event_unique", True, {"eventId": {"$exists": True}}))
        self.assertIn((("_id", 1),), idx)
        self.stop_cleanly(p)
        # A second start with the same declaration: nothing changes, no error.
        p2 = self.start(lua_stream(dlq='{ collection = "orders_dlq" }'))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.wait_dlq(1, "orders_dlq")
        self.assertEqual(self.indexes("orders_dlq"), idx)
        self.stop_cleanly(p2)
        self.assertEqual([m for m in p2.messages("error")], [])

    def test_streams_sharing_a_dlq_collection_are_told_apart(self):
        self.start(lua_stream(name="orders-stream", collection="orders", dlq="true"),
                   lua_stream(name="users-stream", collection="users", dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "OrderError"})
        self.db.users.insert_one({"_id": 1, "fail": "UserError"})
        self.wait_dlq(2)
        o = self.dlq_entries(stream="orders-stream")
        u = self.dlq_entries(stream="users-stream")
        self.assertEqual([(e["error"]["type"], e["ns"]["coll"]) for e in o],
                         [("OrderError", "orders")])
        self.assertEqual([(e["error"]["type"], e["ns"]["coll"]) for e in u],
                         [("UserError", "users")])

    def test_each_stream_writes_to_its_own_collection(self):
        self.start(lua_stream(name="a", collection="orders", dlq='{ collection = "a_dlq" }'),
                   lua_stream(name="b", collection="users", dlq='{ collection = "b_dlq" }'))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.db.users.insert_one({"_id": 2, "fail": "Boom"})
        self.assertEqual(self.wait_dlq(1, "a_dlq")[0]["streamName"], "a")
        self.assertEqual(self.wait_dlq(1, "b_dlq")[0]["streamName"], "b")
        self.assertNotIn("_fw_dlq", self.db.list_collection_names())


@needs_standin("fault injection (configureFailPoint failCommand)")
class DurableHandoff(FailureTestCase):
    """The checkpoint never passes an event before its DLQ insert is
    acknowledged."""

    RESTART = 'restart = { initial_delay = "100ms", max_delay = "200ms" }'

    def fail_dlq_inserts(self, mode="alwaysOn", **data):
        # appName: only flowwarden's inserts fail, not the test's own.
        data.setdefault("errorCode", 2)
        data = {k: v for k, v in data.items() if v is not None}
        self.client.admin.command({
            "configureFailPoint": "failCommand", "mode": mode,
            "data": dict(failCommands=["insert"], appName="flowwarden", **data)})

    def tearDown(self):
        self.client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        super().tearDown()

    def start_held(self):
        """Starts a stream whose first event cannot be dead-lettered yet."""
        p = self.start(lua_stream(dlq="true", extra=self.RESTART))
        self.db.orders.insert_one({"_id": 0})          # handled: a checkpoint exists
        r0 = p.wait_reports(1)[0]
        self.wait_checkpoint_at_least("s", r0["eid"])
        self.fail_dlq_inserts()
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.db.orders.insert_one({"_id": 2})
        p.wait_log("DLQ insert for event", count=3)
        return p, r0["eid"]

    def test_failing_dlq_insert_holds_the_checkpoint_then_lands_once(self):
        p, eid0 = self.start_held()
        eid1 = [r for r in p.reports() if r["id"] == 1][0]["eid"]
        loud = [m for m in p.messages("error") if "DLQ insert for event" in m]
        self.assertIn(eid1, loud[0])
        self.assertIn("the stream holds this event", loud[0])
        self.assertIn("Failing command via 'failCommand' failpoint", loud[0])
        # Held: the event after it is not handled and the checkpoint stays put.
        self.assertEqual([r["id"] for r in p.reports()], [0, 1])
        self.assertEqual(self.processed_token("s"), eid0)
        self.assertLess(self.processed_token("s"), eid1)
        self.assertEqual(self.dlq_entries(), [])

        self.client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        p.wait_until(lambda: any(r["id"] == 2 for r in p.reports()), what="event 2")
        eid2 = [r for r in p.reports() if r["id"] == 2][0]["eid"]
        self.wait_checkpoint_at_least("s", eid2)
        entries = self.dlq_entries()
        self.assertEqual(len(entries), 1)
        self.assertEqual((entries[0]["eventId"], entries[0]["attempts"]), (eid1, 1))
        # The handler ran once: the hand-off retries the insert, not the handler.
        self.assertEqual(self.attempts_of(p, 1), [1])
        self.stop_cleanly(p)
        self.assertEqual(summary(p, "s")["dead_lettered"], 1)

    def test_shutdown_while_held_brings_the_event_back_after_restart(self):
        p, eid0 = self.start_held()
        self.assertEqual(self.stop_cleanly(p).proc.returncode, 0)
        self.assertEqual(self.processed_token("s"), eid0)
        self.assertEqual(self.dlq_entries(), [])

        self.client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        p2 = self.start(lua_stream(dlq="true", extra=self.RESTART))
        p2.wait_until(lambda: [r["id"] for r in p2.reports()] == [1, 2], what="events 1, 2")
        self.assertEqual(self.attempts_of(p2, 1), [1])
        entries = self.wait_dlq(1)
        self.assertEqual(len(entries), 1)
        self.assertEqual(entries[0]["documentKey"], {"_id": 1})

    def test_insert_acknowledged_late_is_not_duplicated_nor_stuck(self):
        # The server applies the insert but reports a write concern error:
        # the retry of the same entry must count as done, not fail forever on
        # a duplicate _id, and the entry must be there exactly once.
        p = self.start(lua_stream(dlq="true", extra=self.RESTART))
        self.fail_dlq_inserts(mode={"times": 1}, errorCode=None,
                              writeConcernError={"code": 64, "errmsg": "waiting for "
                                                 "replication timed out"})
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: any(r["id"] == 2 for r in p.reports()), timeout=15,
                     what="event 2 after the DLQ hand-off")
        self.assertEqual(len(self.dlq_entries()), 1)


if __name__ == "__main__":
    unittest.main()
