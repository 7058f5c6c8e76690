"""Change events over MongoDB's 16 MiB limit (issue 18): with
split_large_events (the default) the server cuts them into fragments that the
runtime puts back together for the handler, never checkpointing a fragment;
without it, oversize = "fail" stops the stream with a message naming the
position (no re-open loop) and oversize = "skip" dead-letters the event's key
and size without its document. A 10 MiB document updated with updateLookup
and its pre-image makes a ~20 MiB event."""
from fwtest import needs_mongodb, needs_standin, StandInTestCase, clean_env

MIB = 1024 * 1024

HANDLER = """
  on_change = function(ctx)
    local doc, before = ctx:full_document(), ctx:full_document_before_change()
    report({ op = ctx:operation_type(), id = ctx:document_key()._id,
             big = doc and doc.big and #doc.big or 0,
             before = before and before.big and #before.big or 0,
             n = doc and doc.n or 0 })
  end,
"""


@needs_mongodb("6.0.9", "$changeStreamSplitLargeEvent")
class OversizeTest(StandInTestCase):

    def stream(self, extra=""):
        return self.script("""
            fw.stream {
              name = "s", collection = "orders", full_document = "updateLookup",
              full_document_before_change = "whenAvailable", %s
              %s
            }
        """ % (extra, HANDLER))

    def big_update(self):
        self.db.command({"collMod": "orders", "changeStreamPreAndPostImages": {"enabled": True}})
        self.db.orders.insert_one({"_id": 1, "big": "a" * (10 * MIB)})
        self.db.orders.update_one({"_id": 1}, {"$set": {"big": "b" * (10 * MIB), "n": 7}})
        self.db.orders.insert_one({"_id": 2})

    def setUp(self):
        super().setUp()
        self.db.create_collection("orders")

    def test_a_split_event_reaches_the_handler_once_reassembled(self):
        p = self.run_fw(self.stream())
        p.wait_open()
        start = self.wait_checkpoint("s")
        self.big_update()
        reports = p.wait_reports(3, timeout=60)
        self.assertEqual(reports, [
            {"op": "insert", "id": 1, "big": 10 * MIB, "before": 0, "n": 0},
            {"op": "update", "id": 1, "big": 10 * MIB, "before": 10 * MIB, "n": 7},
            {"op": "insert", "id": 2, "big": 0, "before": 0, "n": 0}])
        cp = self.wait_checkpoint("s", lambda cp: cp.get("lastProcessedToken") !=
                                  start.get("lastProcessedToken"))
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.report_count(), 3)
        self.assertIsNotNone(cp)

    @needs_standin("fault injection (failCommand on getMore)")
    def test_a_resumable_error_between_fragments_still_delivers_the_event_once(self):
        # A getMore fails between fragments: libmongoc resumes from the fragment's token
        # and the server goes on with the next fragment; the handler sees the event once.
        p = self.run_fw(self.stream())
        p.wait_open()
        self.wait_checkpoint("s")
        self.fail_point({"skip": 1, "times": 1}, {"failCommands": ["getMore"], "errorCode": 6,
                                                  "errorLabels": ["ResumableChangeStreamError"]})
        self.db.command({"collMod": "orders", "changeStreamPreAndPostImages": {"enabled": True}})
        self.db.orders.insert_one({"_id": 1, "big": "a" * (10 * MIB)})
        self.db.orders.update_one({"_id": 1}, {"$set": {"big": "b" * (10 * MIB), "n": 7}})
        reports = p.wait_reports(2, timeout=60)
        self.assertEqual([(r["op"], r["before"]) for r in reports],
                         [("insert", 0), ("update", 10 * MIB)])
        self.assertEqual(p.stop(), 0)

    def test_kill_9_while_a_split_event_is_handled_resumes_before_its_first_fragment(self):
        # Every fragment of the update has been read when its handler runs; the
        # handler then blocks until the process is killed. Had a fragment's
        # token been checkpointed (by save_every = 1, the idle post-batch
        # token or the interval save), the restart would resume inside the
        # split event and could not put it back together.
        import os
        flag = os.path.join(self.tmp.name, "release")
        handler = HANDLER.replace(
            "on_change = function(ctx)",
            "on_change = function(ctx)\n"
            "    if ctx:operation_type() == 'update' and os.getenv('FW_BLOCK') then\n"
            "      report({ blocked = true })\n"
            "      while not io.open(%r) do end\n"
            "    end" % flag)
        block = self.script("""
            fw.stream {
              name = "s", collection = "orders", full_document = "updateLookup",
              full_document_before_change = "whenAvailable",
              checkpoint = { save_every = 1, save_interval = "10ms" },
              %s
            }
        """ % handler)
        p = self.run_fw(block, env=clean_env({"FW_BLOCK": "1"}))
        p.wait_open()
        self.wait_checkpoint("s")
        self.big_update()
        p.wait_until(lambda: any(r.get("blocked") for r in p.reports()), 60, "update handler")
        before = self.checkpoint("s")
        p.kill9()
        p.wait_exit()
        self.assertEqual(self.checkpoint("s"), before)
        p2 = self.run_fw(block)
        p2.wait_open()
        reports = p2.wait_reports(2, timeout=60)
        self.assertEqual([(r["op"], r["id"], r["big"], r["before"], r["n"]) for r in reports],
                         [("update", 1, 10 * MIB, 10 * MIB, 7), ("insert", 2, 0, 0, 0)])
        self.assertEqual(p2.count_log("re-opening before the split event"), 0)
        self.assertEqual(p2.stop(), 0)

    def test_without_split_oversize_fail_stops_the_stream_naming_the_position(self):
        p = self.run_fw(self.stream("split_large_events = false,"))
        p.wait_open()
        start = self.wait_checkpoint("s")
        self.big_update()
        self.assertEqual(p.wait_exit(60), 1)
        stopped = [m for m in p.messages("error") if "STREAM STOPPED" in m]
        self.assertEqual(len(stopped), 1, p.raw_lines())
        self.assertIn("the change event after position {", stopped[0])
        self.assertIn("is larger than 16 MiB (BSONObjectTooLarge 10334", stopped[0])
        self.assertIn('oversize = "fail"', stopped[0])
        self.assertEqual(p.count_log("re-opening the change stream"), 0)
        self.assertEqual(p.report_count(), 1)   # the insert before it
        cp = self.checkpoint("s")
        self.assertNotEqual(cp.get("lastProcessedToken"), None)
        self.assertIn(cp["lastProcessedToken"]["_data"], stopped[0])
        del start

    def test_without_split_oversize_skip_dead_letters_key_and_size(self):
        p = self.run_fw(self.stream('split_large_events = false, oversize = "skip", dlq = true,'))
        p.wait_open()
        self.wait_checkpoint("s")
        self.big_update()
        reports = p.wait_reports(2, timeout=60)
        self.assertEqual([(r["op"], r["id"]) for r in reports], [("insert", 1), ("insert", 2)])
        entries = list(self.db["_fw_dlq"].find())
        self.assertEqual(len(entries), 1)
        e = entries[0]
        self.assertEqual(e["error"]["type"], "OversizeEvent")
        self.assertEqual(e["documentKey"], {"_id": 1})
        self.assertEqual(e["operationType"], "UPDATE")
        self.assertIsNone(e.get("fullDocument"))
        self.assertNotIn("rawEvent", e)
        self.assertRegex(e["error"]["message"], r"^change event of \d{8} bytes is larger than "
                         r"oversize_threshold \(16711680 bytes\)")
        self.assertEqual(p.count_log("oversize change event", level="warn"), 1)
        self.assertEqual(p.stop(), 0)

    @needs_standin("fault injection (failCommand 40324 on aggregate)")
    def test_a_server_without_the_split_stage_falls_back_to_the_oversize_policy(self):
        # An older server refuses the stage (40324 Unrecognized pipeline stage name).
        self.fail_point({"times": 1}, {"failCommands": ["aggregate"], "errorCode": 40324})
        p = self.run_fw(self.stream())
        p.wait_open()
        self.db.orders.insert_one({"_id": 3})
        self.assertEqual(p.wait_reports(1)[0]["id"], 3)
        self.assertEqual(p.count_log("does not support $changeStreamSplitLargeEvent",
                                     level="warn"), 1)
        self.assertEqual(p.stop(), 0)


FIELDS_HANDLER = """
  on_change = function(ctx)
    report({ op = ctx:operation_type(), id = ctx:document_key()._id,
             fields = ctx:field_names() })
  end,
"""

# A user stage that makes one field of an update twice its 9 MiB update
# description: no fragment can hold it (the split stage fails with 7182500).
BOTH = '{ { ["$addFields"] = { both = { "$updateDescription", "$updateDescription" } } } }'


@needs_mongodb("6.0.9", "$changeStreamSplitLargeEvent")
class SplitOrderAndUnsplittableTest(StandInTestCase):
    """MongoDB's split stage fills fragments with the fields ordered by size
    (change_stream_split_event_helpers.cpp) and fails with 7182500 when one
    field cannot fit a fragment."""

    def setUp(self):
        super().setUp()
        self.db.create_collection("orders")

    def stream(self, extra="", handler=HANDLER):
        return self.script("""
            fw.stream {
              name = "s", collection = "orders", full_document = "updateLookup",
              %s
              %s
            }
        """ % (extra, handler))

    def test_a_split_event_reaches_the_handler_with_the_fields_of_an_unsplit_one(self):
        p = self.run_fw(self.stream('full_document_before_change = "whenAvailable",',
                                    FIELDS_HANDLER))
        p.wait_open()
        self.wait_checkpoint("s")
        self.db.command({"collMod": "orders", "changeStreamPreAndPostImages": {"enabled": True}})
        self.db.orders.insert_one({"_id": 1, "big": "a" * (10 * MIB)})
        self.db.orders.update_one({"_id": 1}, {"$set": {"big": "b" * (10 * MIB)}})
        self.db.orders.insert_one({"_id": 2})
        self.db.orders.update_one({"_id": 2}, {"$set": {"small": True}})
        reports = p.wait_reports(4, timeout=60)
        self.assertEqual([(r["op"], r["id"]) for r in reports],
                         [("insert", 1), ("update", 1), ("insert", 2), ("update", 2)])
        order = ["_id", "operationType", "clusterTime", "wallTime", "fullDocument", "ns",
                 "documentKey", "updateDescription", "fullDocumentBeforeChange"]
        self.assertEqual(reports[1]["fields"], order)     # split, put back together
        self.assertEqual(reports[3]["fields"], order)     # small: as the server sent it
        self.assertEqual(p.stop(), 0)

    def test_a_field_too_large_to_split_stops_the_stream_with_oversize_fail(self):
        p = self.run_fw(self.stream("pipeline = %s," % BOTH))
        p.wait_open()
        self.wait_checkpoint("s")
        self.db.orders.insert_one({"_id": 1})
        self.db.orders.update_one({"_id": 1}, {"$set": {"big": "b" * (9 * MIB)}})
        self.assertEqual(p.wait_exit(60), 1)
        stopped = [m for m in p.messages("error") if "STREAM STOPPED" in m]
        self.assertEqual(len(stopped), 1, p.raw_lines())
        self.assertIn("is larger than 16 MiB (split failed 7182500: Splitting change event "
                      "failed: fragment size", stopped[0])
        self.assertIn("cannot be split (one field alone is over the limit)", stopped[0])
        self.assertEqual(p.count_log("re-opening the change stream"), 0)
        self.assertEqual(p.report_count(), 1)   # the insert before it
        # Started again, the stream opens before the event: the aggregate itself fails.
        p2 = self.run_fw(self.stream("pipeline = %s," % BOTH))
        self.assertEqual(p2.wait_exit(60), 1)
        self.assertEqual(len([m for m in p2.messages("error") if "split failed 7182500" in m]),
                         1, p2.raw_lines())
        self.assertEqual(p2.count_log("re-opening the change stream"), 0)
        self.assertEqual(p2.report_count(), 0)

    def test_a_field_too_large_to_split_is_dead_lettered_with_oversize_skip(self):
        p = self.run_fw(self.stream('pipeline = %s, oversize = "skip", dlq = true, '
                                    'full_document_before_change = "whenAvailable",' % BOTH))
        p.wait_open()
        self.wait_checkpoint("s")
        self.db.command({"collMod": "orders", "changeStreamPreAndPostImages": {"enabled": True}})
        self.db.orders.insert_one({"_id": 1})
        self.db.orders.update_one({"_id": 1}, {"$set": {"big": "b" * (9 * MIB)}})
        self.db.orders.insert_one({"_id": 2})
        reports = p.wait_reports(2, timeout=60)
        self.assertEqual([(r["op"], r["id"]) for r in reports], [("insert", 1), ("insert", 2)])
        (e,) = list(self.db["_fw_dlq"].find())
        self.assertEqual((e["error"]["type"], e["documentKey"], e["operationType"]),
                         ("OversizeEvent", {"_id": 1}, "UPDATE"))
        self.assertEqual(p.count_log("cannot be split (7182500", level="warn"), 1)
        self.assertEqual(p.count_log("re-opening with $changeStreamSplitLargeEvent"), 1)
        self.assertEqual(p.count_log("STREAM STOPPED"), 0)
        # Split again after it: a later event over 16 MiB (9 MiB post- and pre-image) with a
        # small update description is split and put back together.
        self.db.orders.insert_one({"_id": 3, "big": "c" * (9 * MIB)})
        self.db.orders.update_one({"_id": 3}, {"$set": {"n": 3}})
        self.assertEqual([(r["op"], r["id"], r["big"], r["before"], r["n"])
                          for r in p.wait_reports(4, timeout=60)[2:]],
                         [("insert", 3, 9 * MIB, 0, 0), ("update", 3, 9 * MIB, 9 * MIB, 3)])
        self.assertEqual(len(list(self.db["_fw_dlq"].find())), 1)
        self.assertEqual(p.stop(), 0)
