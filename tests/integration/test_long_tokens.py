"""Resume tokens as long as MongoDB's (issue 23 section 7): a token holds the
event's documentKey (resume_token.cpp), so a 2,000-byte string _id makes a
token of over 4,000 characters. Such an event is handled with its whole
ctx:event_id(), checkpointed and resumed from, dead-lettered once however
often it fails (the unique (streamName, eventId) index keys the whole id),
and replayed by `flowwarden dlq replay`."""

from fwtest import StandInTestCase, reports_of, run_cli

BIG_ID = "k" * 2000

# The handler keeps what it saw in the test's database ("seen"): a report
# line is too short for a 4,000-character id.
HANDLER = """
fw.stream { name = "s", collection = "orders", dlq = true,
  checkpoint = { save_every = 1000, save_interval = "1h" },
  on_insert = function(ctx)
    local id = ctx:document_key()._id
    local key = #id > 100 and "big" or id
    fw.mongo.collection("%(db)s", "seen"):insert_one({ key = key, event_id = ctx:event_id(),
      letter = ctx:dead_letter() ~= nil })
    report({ key = key })
    %(extra)s
  end }
"""


class LongTokenTest(StandInTestCase):

    def setUp(self):
        super().setUp()
        self.db.create_collection("orders")

    def handler(self, extra=""):
        return HANDLER % {"db": self.db_name, "extra": extra}

    def seen(self):
        return [{k: d[k] for k in ("key", "event_id", "letter")}
                for d in self.db.seen.find().sort("_id", 1)]

    def test_a_2000_byte_id_is_handled_with_its_whole_event_id_and_checkpointed(self):
        script = self.script(self.handler().replace(
            'save_every = 1000, save_interval = "1h"', "save_every = 1"))
        p = self.run_fw(script)
        p.wait_open()
        self.wait_checkpoint("s")
        self.db.orders.insert_one({"_id": BIG_ID})
        p.wait_reports(1)
        (r,) = self.seen()
        self.assertEqual(r["key"], "big")
        self.assertGreater(len(r["event_id"]), 4000)
        cp = self.wait_checkpoint("s", lambda cp: (cp.get("lastProcessedToken") or {}).get(
            "_data") == r["event_id"], what="the long token checkpointed")
        self.assertEqual(p.stop(), 0)
        # Resumed from the long token: the event is not handled again, the next one is.
        p2 = self.run_fw(script)
        p2.wait_open()
        self.db.orders.insert_one({"_id": "after"})
        p2.wait_reports(1)
        self.assertEqual([r["key"] for r in self.seen()], ["big", "after"])
        self.assertEqual(p2.stop(), 0)
        self.assertEqual(p2.report_count(), 1)
        self.assertEqual(p2.count_log("change stream failed"), 0)
        del cp

    def test_dead_lettered_once_over_two_failures_then_replayed(self):
        failing = self.script(self.handler('error(fw.error("Payment.Unavailable", "down"))'))
        p = self.run_fw(failing)
        p.wait_open()
        self.wait_checkpoint("s")
        self.db.orders.insert_one({"_id": BIG_ID})
        entry = self.wait_for(lambda: self.db["_fw_dlq"].find_one(), what="a DLQ entry")
        (r,) = self.seen()
        self.assertEqual(entry["eventId"], r["event_id"])
        self.assertEqual(entry["resumeToken"]["_data"], r["event_id"])
        self.assertGreater(len(entry["eventId"]), 4000)
        # Killed before its checkpoint moved past the event: the restart delivers it again and
        # it fails again; the entry is the same one (its attempts add up), not a second.
        p.kill9()
        p.wait_exit()
        p2 = self.run_fw(failing)
        p2.wait_open()
        self.wait_for(lambda: self.db["_fw_dlq"].find_one()["attempts"] > entry["attempts"],
                      what="the second failure recorded")
        self.assertEqual(p2.stop(), 0)
        self.assertEqual(self.db["_fw_dlq"].count_documents({}), 1)
        self.assertEqual(p2.count_log("eventId", level="warn"), 0)

        fixed = self.script(self.handler(), "fixed.lua")
        cp = run_cli(["dlq", "replay", fixed, "--uri", self.uri, "--log-format", "json"],
                     timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("summary: resolved=1 skipped=0 requeued=0 evicted=0 errors=0", cp.stdout)
        self.assertEqual([x["key"] for x in reports_of(cp)], ["big"])
        self.assertEqual(self.seen()[-1], {"key": "big", "event_id": r["event_id"],
                                           "letter": True})
        (done,) = list(self.db["_fw_dlq"].find())
        self.assertEqual(done["status"], "RESOLVED")
