"""The DLQ entry's life (issue 12), from outside: the fields written at
enqueue, one entry per (streamName, eventId) even when an event comes back
after a kill -9 between its DLQ write and its checkpoint, duplicates already
in a collection, the default DLQ of ctx:send_to_dlq, and check's warning."""
import datetime
import os
import unittest

from fwtest import needs_mongodb, needs_standin, clean_env, run_cli
from dlqtest import FailureTestCase, lua_stream, summary, wait_for

# The checkpoint never moves while the test runs (it is saved when the
# stream opens, then only after 1000 events or an hour): a kill -9 brings
# back every event handled since the start.
FROZEN = 'checkpoint = { save_every = 1000, save_interval = "1h" }'
FAST = 'initial_delay = "50ms", jitter = false'


def by_event(entries):
    out = {}
    for e in entries:
        out.setdefault(e["eventId"], []).append(e)
    return out


class EnqueueFields(FailureTestCase):

    @needs_mongodb("6.0", "pre- and post-images")
    def test_new_entry_has_its_life_fields_and_what_a_replay_needs(self):
        self.db.create_collection("orders", changeStreamPreAndPostImages={"enabled": True})
        self.start(lua_stream(dlq="true", extra='on_update = misbehave, '
                                                'full_document = "updateLookup", '
                                                'full_document_before_change = "required"'))
        self.db.orders.insert_one({"_id": 1})
        self.db.orders.update_one({"_id": 1}, {"$set": {"fail": "Boom"}})
        e = self.wait_dlq(1)[0]
        self.assertEqual(e["operationType"], "UPDATE")
        self.assertEqual(e["status"], "PENDING")
        self.assertEqual(e["lastTouched"], e["createdAt"])
        self.assertIs(type(e["reprocessAttempts"]), int)
        self.assertEqual(e["reprocessAttempts"], 0)
        self.assertEqual(e["diagnostics"], {})
        self.assertEqual(len(e["history"]), 1)
        item = e["history"][0]
        self.assertEqual(list(item.keys()), ["at", "action", "actor", "result"])
        self.assertEqual((item["at"], item["action"], item["result"]),
                         (e["createdAt"], "enqueued", "Boom"))
        host, pid = item["actor"].rsplit(":", 1)
        self.assertEqual(host, os.uname().nodename)
        self.assertTrue(pid.isdigit())
        for absent in ("lastReprocessAt", "lastReprocessError", "resolvedAt", "resolution",
                       "discardedAt", "discardReason", "claimedBy", "claimedUntil", "omitted",
                       "truncated"):
            self.assertNotIn(absent, e)
        # The event as it came, for a replay.
        self.assertEqual(e["updateDescription"]["updatedFields"], {"fail": "Boom"})
        self.assertEqual(e["fullDocumentBeforeChange"], {"_id": 1})
        self.assertIsInstance(e["wallTime"], datetime.datetime)

    def test_without_the_original_document_the_entry_says_what_it_left_out(self):
        self.start(lua_stream(dlq="{ include_original_document = false }",
                              extra='on_update = misbehave, full_document = "updateLookup"'))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.db.orders.update_one({"_id": 1}, {"$set": {"v": 2}})
        insert, update = self.wait_dlq(2)
        self.assertEqual(insert["omitted"], ["fullDocument"])
        self.assertEqual(update["omitted"], ["fullDocument", "updateDescription"])
        for e in (insert, update):
            self.assertNotIn("fullDocument", e)
            self.assertNotIn("updateDescription", e)
            self.assertIn("wallTime", e)


class OneEntryPerEvent(FailureTestCase):

    def script_text(self):
        return self.fw_script(lua_stream(retry="{ max_attempts = 2, %s }" % FAST, dlq="true",
                                         extra=FROZEN))

    def test_kill9_between_dlq_write_and_checkpoint_leaves_one_entry_per_event(self):
        script = self.script_text()
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_many([{"_id": 1, "fail": "Boom"}, {"_id": 2, "fail": "Other"}])
        first = self.wait_dlq(2)
        # Operators acted on one entry meanwhile: resolved it, and it already
        # has a full history.
        full = [{"at": datetime.datetime(2026, 1, 1, 0, 0, i), "action": "replayed",
                 "actor": "op:1", "result": "failed"} for i in range(20)]
        self.db["_fw_dlq"].update_one({"_id": first[0]["_id"]},
                                   {"$set": {"status": "RESOLVED", "history": full}})
        p.kill9()

        p2 = self.run_fw(script)
        p2.wait_open()
        # The same events come back and fail again.
        p2.wait_until(lambda: len([r for r in p2.reports() if r["attempt"] == 2]) == 2,
                      what="both events failing twice again")
        entries = wait_for(lambda: (lambda e: e if all(x["attempts"] == 4 for x in e) else None)(
            self.dlq_entries()), what="both entries updated by the second enqueue")
        self.assertEqual(len(entries), 2)
        groups = by_event(entries)
        self.assertEqual(sorted(len(g) for g in groups.values()), [1, 1])
        self.assertEqual(set(groups), {e["eventId"] for e in first})
        before = {e["_id"]: e for e in first}
        for e in entries:
            old = before[e["_id"]]      # the same document, updated in place
            self.assertEqual(e["status"], "PENDING")
            self.assertEqual(e["attempts"], 4)
            self.assertIs(type(e["attempts"]), int)
            for kept in ("createdAt", "firstAttemptAt", "expiresAt", "resumeToken", "fullDocument"):
                self.assertEqual(e[kept], old[kept], kept)
            self.assertGreater(e["lastTouched"], old["lastTouched"])
            self.assertGreater(e["lastAttemptAt"], old["lastAttemptAt"])
            self.assertEqual(e["lastTouched"], e["history"][-1]["at"])
            self.assertEqual(e["history"][-1]["action"], "enqueued")
            self.assertEqual(e["history"][-1]["result"], old["error"]["type"])
            self.assertNotEqual(e["history"][-1]["actor"], old["history"][0]["actor"])
            # A new entry keeps seed 002's field order; an update keeps it too.
            self.assertEqual(list(e.keys())[:3], ["_id", "streamName", "operationType"])
        resolved = [e for e in entries if e["_id"] == first[0]["_id"]][0]
        self.assertEqual(len(resolved["history"]), 20)       # the last 20 actions
        self.assertEqual(resolved["history"][0], full[1])
        other = [e for e in entries if e["_id"] == first[1]["_id"]][0]
        self.assertEqual([h["action"] for h in other["history"]], ["enqueued", "enqueued"])
        self.stop_cleanly(p2)
        self.assertEqual(summary(p2, "s")["dead_lettered"], 2)
        self.assertEqual([m for m in p2.messages("error")], [])

    @needs_standin("fault injection (configureFailPoint failCommand)")
    def test_a_reenqueue_applied_but_not_acknowledged_counts_once(self):
        # The DLQ on a named connection, so a fail point can aim at its
        # writes alone (appName "flowwarden-io"; checkpoints use "flowwarden").
        script = self.fw_script(
            'fw.connection { name = "dlqconn", uri = "%s" }\n' % self.uri,
            lua_stream(dlq='{ connection = "dlqconn" }',
                       extra=FROZEN + ', restart = { initial_delay = "100ms" }'))
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        eid = self.wait_dlq(1)[0]["eventId"]
        p.kill9()
        self.fail_point({"times": 1}, {
            "failCommands": ["update"], "appName": "flowwarden-io",
            "writeConcernError": {"code": 64, "errmsg": "waiting for replication timed out"}})
        p2 = self.run_fw(script)
        p2.wait_open()
        p2.wait_log("DLQ insert for event %s failed (try 1)" % eid)
        p2.wait_log("dead-lettered to _fw_dlq")
        e = self.dlq_entries()
        self.assertEqual(len(e), 1)
        self.assertEqual(e[0]["attempts"], 2)
        self.assertEqual([h["action"] for h in e[0]["history"]], ["enqueued", "enqueued"])
        self.stop_cleanly(p2)

    def test_existing_duplicates_warn_and_the_stream_still_dead_letters(self):
        coll = self.db["_fw_dlq"]
        coll.insert_many([{"_id": "a1", "streamName": "s", "eventId": "dup-1"},
                          {"_id": "a2", "streamName": "s", "eventId": "dup-1"},
                          {"_id": "b1", "streamName": "s", "eventId": "dup-2"},
                          {"_id": "b2", "streamName": "s", "eventId": "dup-2"},
                          {"_id": "b3", "streamName": "s", "eventId": "dup-2"},
                          {"_id": "c1", "streamName": "t", "eventId": "dup-1"}])
        script = self.script_text()
        p = self.run_fw(script)
        p.wait_open()
        warning = [m for m in p.messages("warn") if "fw_stream_event_unique" in m]
        self.assertEqual(len(warning), 1, p.messages())
        self.assertIn("DLQ collection %s._fw_dlq holds 2 group(s) of entries with the same "
                      "(streamName, eventId)" % self.db_name, warning[0])
        self.assertNotIn("fw_stream_event_unique", [i["name"] for i in coll.list_indexes()])

        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        e = wait_for(lambda: list(coll.find({"error.type": "Boom"})), what="the new entry")
        self.assertEqual(len(e), 1)
        self.assertEqual((e[0]["attempts"], e[0]["status"], e[0]["error"]["type"]),
                         (2, "PENDING", "Boom"))
        eid = e[0]["eventId"]
        p.kill9()

        # Without the index the upsert alone keeps one entry per event.
        p2 = self.run_fw(script)
        p2.wait_open()
        wait_for(lambda: (coll.find_one({"eventId": eid}) or {}).get("attempts") == 4,
                 what="the entry updated by the second enqueue")
        self.assertEqual(coll.count_documents({"eventId": eid}), 1)
        self.stop_cleanly(p2)

        # Once the duplicates are gone the next start builds the index.
        coll.delete_many({"_id": {"$in": ["a2", "b2", "b3"]}})
        p3 = self.run_fw(script)
        p3.wait_open()
        wait_for(lambda: "fw_stream_event_unique" in [i["name"] for i in coll.list_indexes()],
                 what="the unique index")
        self.assertEqual([m for m in p3.messages("warn") if "fw_stream_event_unique" in m], [])
        self.stop_cleanly(p3)


class DefaultDlq(FailureTestCase):

    def test_send_to_dlq_on_a_stream_without_a_dlq_uses_the_first_declared_one(self):
        p = self.start(lua_stream(name="plain", collection="orders"),
                       lua_stream(name="audited", collection="users",
                                  dlq='{ collection = "audit_dlq", ttl_days = 7 }'),
                       lua_stream(name="other", collection="items",
                                  dlq='{ collection = "other_dlq" }'))
        self.db.orders.insert_one({"_id": 1, "fail": "dlq", "reason": "bad order"})
        self.db.orders.insert_one({"_id": 2, "fail": "Boom"})
        e = self.wait_dlq(1, "audit_dlq")[0]
        self.assertEqual((e["streamName"], e["error"]["type"], e["error"]["message"]),
                         ("plain", "DlqRequested", "bad order"))
        self.assertEqual(e["ns"], {"db": self.db_name, "coll": "orders"})
        self.assertEqual(e["expiresAt"] - e["createdAt"], datetime.timedelta(days=7))
        # A failure that is not send_to_dlq is still lost on this stream.
        p.wait_log("LOST", stream="plain")
        self.stop_cleanly(p)
        self.assertEqual(len(self.dlq_entries("audit_dlq")), 1)
        self.assertEqual(self.dlq_entries("other_dlq"), [])
        counts = summary(p, "plain")
        self.assertEqual((counts["dead_lettered"], counts["lost"]), (1, 1))
        self.assertTrue(any("the script's default DLQ" in m for m in p.messages("warn", "plain")))

    def test_check_warns_when_send_to_dlq_is_called_and_no_stream_has_a_dlq(self):
        script = self.fw_script(lua_stream(name="plain"))
        r = run_cli(["check", script], env=clean_env({"FLOWWARDEN_URI": self.uri}))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(script) as f:
            text_lines = f.read().split("\n")
        line = [n for n, text in enumerate(text_lines, 1)
                if "send_to_dlq" in text][0]
        self.assertIn("%s:%d: warning: ctx:send_to_dlq is called but no stream has a dlq, so it "
                      "raises (add dlq = true to a stream; streams without one send to the first "
                      "declared dlq)" % (script, line), r.stdout)
        script = self.fw_script(lua_stream(name="plain"), lua_stream(name="d", dlq="true"))
        r = run_cli(["check", script], env=clean_env({"FLOWWARDEN_URI": self.uri}))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("ctx:send_to_dlq is called", r.stdout)
        self.assertIn('(none; ctx:send_to_dlq writes to', r.stdout)


if __name__ == "__main__":
    unittest.main()
