"""Events the runtime cannot read are never skipped in silence: with a DLQ
they are dead-lettered whole (rawEvent, MalformedEvent) and the stream goes
on; without one the stream stops before them and the checkpoint does not pass
them. A user pipeline that drops operationType, or gives a field another type
than MongoDB's change-event schema, makes such events."""
from fwtest import StandInTestCase, reports_of, run_cli

DROP_OP = '{ { ["$project"] = { operationType = 0 } } }'

# The event: for a document with bad = true, an insert whose documentKey
# is a string and whose fullDocument is a number; other events are untouched.
WRONG_TYPES = """{ { ["$addFields"] = {
    documentKey = { ["$cond"] = { { ["$eq"] = { "$fullDocument.bad", true } }, "k1",
                                  "$documentKey" } },
    fullDocument = { ["$cond"] = { { ["$eq"] = { "$fullDocument.bad", true } }, 5,
                                   "$fullDocument" } } } } }"""


class UnreadableEventsTest(StandInTestCase):

    def test_an_unreadable_event_is_dead_lettered_whole_and_the_stream_goes_on(self):
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders", dlq = true, pipeline = %s,
              on_change = function(ctx) report({ handled = true }) end,
            }
        """ % DROP_OP))
        p.wait_open()
        self.db.orders.insert_many([{"_id": 1, "total": 5}, {"_id": 2, "total": 7}])
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 2, what="two entries")
        entries = list(self.db["_fw_dlq"].find().sort("rawEvent.documentKey._id", 1))
        self.assertEqual([e["error"]["type"] for e in entries], ["MalformedEvent"] * 2)
        self.assertEqual(entries[0]["error"]["message"], "change event has no operationType")
        self.assertEqual(entries[0]["operationType"], "UNKNOWN")
        self.assertEqual(entries[0]["rawEvent"]["fullDocument"], {"_id": 1, "total": 5})
        self.assertEqual(entries[0]["documentKey"], {"_id": 1})
        self.assertEqual(p.reports(), [])
        # Each event's line is logged after its entry is written: the second may still be on
        # its way when both entries are seen.
        p.wait_until(lambda: p.count_log("unreadable change event", level="error") >= 2,
                     what="both unreadable events logged")
        self.assertEqual(p.count_log("unreadable change event", level="error"), 2)
        # The checkpoint passed both: a restart does not see them again.
        self.wait_checkpoint("s", lambda cp: cp.get("lastProcessedToken") ==
                             entries[1]["resumeToken"], what="checkpoint past both events")
        self.assertEqual(p.stop(), 0)

    def test_a_wrong_typed_event_is_dead_lettered_whole_before_any_handler(self):
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders", dlq = true, pipeline = %s,
              on_insert = function(ctx)
                report({ key = tostring(ctx:document_key()), id = ctx:event_id() })
              end,
              on_change = function(ctx) report({ on_change = true }) end,
            }
        """ % WRONG_TYPES))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "bad": True})
        self.db.orders.insert_one({"_id": 2, "total": 7})
        # The next event is handled: the stream went on past the wrong one.
        (r,) = p.wait_reports(1)
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 1)
        entry = self.db["_fw_dlq"].find_one({})
        self.assertEqual(entry["error"]["type"], "MalformedEvent")
        self.assertEqual(entry["error"]["message"],
                         "change event field fullDocument is int, expected document or "
                         "null; field documentKey is string, expected document (MongoDB's "
                         "change-event schema)")
        self.assertEqual(entry["attempts"], 0)
        self.assertEqual(entry["operationType"], "INSERT")
        # Whole, as it came: the wrong-typed fields and the rest.
        raw = entry["rawEvent"]
        self.assertEqual(raw["_id"], entry["resumeToken"])
        self.assertEqual(raw["operationType"], "insert")
        self.assertEqual(raw["documentKey"], "k1")
        self.assertEqual(raw["fullDocument"], 5)
        self.assertEqual(raw["ns"], {"db": self.db.name, "coll": "orders"})
        # No handler saw it: the one report is the next event's.
        self.assertEqual(p.reports(), [r])
        self.assertNotEqual(r["id"], entry["eventId"])
        self.assertEqual(p.count_log("unreadable change event", level="error"), 1)
        self.wait_checkpoint("s", lambda cp: cp.get("lastProcessedToken", {}).get("_data") ==
                             r["id"], what="checkpoint past both events")
        self.assertEqual(p.stop(), 0)
        # A replay refuses the entry, whose fields are still the wrong ones, naming them (in
        # the order the replay rebuilds the event in), and leaves it for a correction by hand.
        fixed = self.script("""
            fw.stream { name = "s", collection = "orders", dlq = true,
              on_insert = function(ctx) report({ replayed = true }) end }
        """, "fixed.lua")
        cp = run_cli(["dlq", "replay", fixed, "--uri", self.uri], timeout=60)
        self.assertEqual(cp.returncode, 3, cp.stdout + cp.stderr)
        self.assertIn("%s [s]: cannot be replayed: change event field documentKey is string, "
                      "expected document; field fullDocument is int, expected document or null "
                      "(MongoDB's change-event schema); left as it is" % entry["_id"], cp.stdout)
        self.assertEqual(reports_of(cp), [])
        self.assertEqual(self.db["_fw_dlq"].find_one({})["status"], "PENDING")

    def test_without_the_original_document_the_entry_keeps_none_and_a_replay_refuses_it(self):
        # Only fullDocument is wrong: include_original_document = false keeps it out of
        # the entry, rawEvent included, so a replay would rebuild an event without the
        # very field that was wrong; it refuses the entry instead.
        only_doc = """{ { ["$addFields"] = { fullDocument = { ["$cond"] = {
            { ["$eq"] = { "$fullDocument.bad", true } }, 5, "$fullDocument" } } } } }"""
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders", pipeline = %s,
              dlq = { include_original_document = false },
              on_insert = function(ctx) report({ key = ctx:document_key()._id }) end,
            }
        """ % only_doc))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "bad": True, "card": "4111-secret"})
        self.db.orders.insert_one({"_id": 2})
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)
        entry = self.db["_fw_dlq"].find_one({})
        self.assertEqual(entry["error"]["type"], "MalformedEvent")
        self.assertNotIn("fullDocument", entry)
        self.assertNotIn("fullDocument", entry["rawEvent"])
        self.assertEqual(entry["rawEvent"]["documentKey"], {"_id": 1})
        self.assertEqual(entry["omitted"], ["fullDocument"])
        fixed = self.script("""
            fw.stream { name = "s", collection = "orders", dlq = true,
              on_insert = function(ctx) report({ replayed = true }) end }
        """, "fixed.lua")
        cp = run_cli(["dlq", "replay", fixed, "--uri", self.uri], timeout=60)
        self.assertEqual(cp.returncode, 3, cp.stdout + cp.stderr)
        self.assertIn("%s [s]: cannot be replayed: the event was unreadable (MalformedEvent) "
                      "and the entry does not hold it whole (omitted: fullDocument)" % entry["_id"],
                      cp.stdout)
        self.assertEqual(reports_of(cp), [])
        self.assertEqual(self.db["_fw_dlq"].find_one({})["status"], "PENDING")

    def test_without_a_dlq_the_stream_stops_before_the_event(self):
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders", pipeline = %s,
              on_change = function(ctx) report({ handled = true }) end,
            }
        """ % DROP_OP))
        p.wait_open()
        start = self.wait_checkpoint("s")
        self.db.orders.insert_one({"_id": 1})
        self.assertEqual(p.wait_exit(30), 1)
        self.assertTrue(any("STREAM STOPPED: unreadable change event" in m and
                            "the checkpoint stays before it" in m
                            for m in p.messages("error")), p.raw_lines())
        cp = self.checkpoint("s")
        self.assertEqual(cp.get("lastProcessedToken"), start.get("lastProcessedToken"))
        # Fixed (the pipeline no longer drops the field), the stream resumes before the event
        # and handles it: nothing was lost.
        p2 = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders",
              on_change = function(ctx) report({ id = ctx:document_key()._id }) end,
            }
        """))
        self.assertEqual(p2.wait_reports(1), [{"id": 1}])
        self.assertEqual(p2.stop(), 0)

    def test_an_event_without_its_resume_token_stops_the_stream_instead_of_looping(self):
        # MongoDB (and the stand-in) end such a stream with ChangeStreamFatalError (280).
        p = self.run_fw(self.script("""
            fw.stream {
              name = "s", collection = "orders", dlq = true,
              pipeline = { { ["$project"] = { _id = 0 } } },
              on_change = function(ctx) report({ handled = true }) end,
            }
        """))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        self.assertEqual(p.wait_exit(30), 1)
        self.assertTrue(any("STREAM STOPPED: the server ended the change stream for good "
                            "(ChangeStreamFatalError 280)" in m
                            for m in p.messages("error")), p.raw_lines())
        self.assertEqual(p.count_log("re-opening the change stream"), 0)
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 0)
