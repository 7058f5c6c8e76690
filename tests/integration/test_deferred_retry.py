"""Deferred retries (retry.mode = "deferred", issue 29): a failed event waits
in the stream's DLQ as SCHEDULED with nextAttemptAt while the stream goes on;
the stream's thread runs it again once due (also after kill -9), and after
retry.max_attempts it is an ordinary PENDING dead letter. With a sequenced
DLQ later events of its key park behind it."""
import time
import unittest

from dlqtest import FailureTestCase, lua_stream, timed_reports, wait_for
from fwtest import run_cli
from test_admin import http, parse_metrics, value

DEFERRED = ('{ mode = "deferred", max_attempts = %d, initial_delay = "%s", multiplier = 2, '
            'max_delay = "5s", jitter = false }')


class DeferredRetry(FailureTestCase):

    def entries(self, status=None):
        q = {"streamName": "s"}
        if status:
            q["status"] = status
        return list(self.db["_fw_dlq"].find(q))

    def test_fails_twice_then_handled_on_attempt_3_after_later_events(self):
        p = self.start(lua_stream(retry=DEFERRED % (5, "300ms"), dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Http.Timeout", "fail_until": 3})
        scheduled = wait_for(lambda: self.entries("SCHEDULED"), 10, "a SCHEDULED entry")
        self.assertEqual(scheduled[0]["attempts"], 1)
        self.assertIn("nextAttemptAt", scheduled[0])
        # The stream goes on: later events are handled before the retry.
        self.db.orders.insert_many([{"_id": 2}, {"_id": 3}])
        p.wait_until(lambda: self.attempts_of(p, 1) == [1, 2, 3], 15, "attempt 3 of event 1")
        ids = [r["id"] for r in p.reports()]
        self.assertLess(ids.index(2), ids.index(1, 1))
        times = [t for t, r in timed_reports(p) if r["id"] == 1]
        # Delays 300 ms then 600 ms (multiplier 2, no jitter); log times are ms.
        self.assertGreaterEqual(times[1] - times[0], 290)
        self.assertGreaterEqual(times[2] - times[1], 590)
        wait_for(lambda: self.entries()[0]["status"] == "RESOLVED" or None, 10, "RESOLVED")
        self.assertEqual(self.entries("PENDING") + self.entries("SCHEDULED"), [])
        self.stop_cleanly(p)

    def test_kill9_while_it_waits_then_retried_after_restart(self):
        stream = lua_stream(retry=DEFERRED % (3, "1500ms"), dlq="true")
        p = self.run_fw(self.fw_script(stream), extra=["--admin", "127.0.0.1:0"])
        p.wait_open(1)
        port = p.admin_port()
        self.db.orders.insert_one({"_id": 1, "fail": "Http.Timeout", "fail_until": 2})
        wait_for(lambda: self.entries("SCHEDULED"), 10, "a SCHEDULED entry")
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: 2 in [r["id"] for r in p.reports()], 10, "event 2 handled")
        # Seen while it waits: dlq list (status filter) and the metrics.
        r = run_cli(["dlq", "list", p.script, "--uri", self.uri, "--status", "SCHEDULED"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("SCHEDULED", r.stdout)
        # dlq replay leaves it to the stream.
        r = run_cli(["dlq", "replay", p.script, "--uri", self.uri])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn('"id":1', r.stdout.replace(" ", ""))  # no handler ran there
        self.assertEqual(len(self.entries("SCHEDULED")), 1)
        self.assertEqual(self.attempts_of(p, 1), [1])
        got = wait_for(lambda: (lambda m: m if value(m, "flowwarden_retries_scheduled", stream="s")
                                == 1 else None)(parse_metrics(http(port, "GET", "/metrics")[1])),
                       10, "flowwarden_retries_scheduled 1")
        self.assertGreaterEqual(value(got, "flowwarden_oldest_retry_age_seconds", stream="s"), 0)
        p.kill9()
        self.assertEqual(self.attempts_of(p, 1), [1])
        q = self.start(lua_stream(retry=DEFERRED % (3, "1500ms"), dlq="true"))
        q.wait_until(lambda: self.attempts_of(q, 1) == [2], 15, "attempt 2 after the restart")
        wait_for(lambda: self.entries()[0]["status"] == "RESOLVED" or None, 10, "RESOLVED")
        self.assertEqual([r["id"] for r in q.reports()], [1])  # event 2 was checkpointed
        self.stop_cleanly(q)

    def test_a_killed_attempts_claim_expires_within_a_few_keeper_periods(self):
        # Attempt 2 reports, then works (a busy loop) until the process is killed: the entry
        # stays REPROCESSING, claimed by a dead process, until claimedUntil. The claim keeper
        # renews every third of the claim's TTL, so the TTL can be short: docs/retry-and-dlq.md
        # says 30 s (it was 5 minutes).
        slow = """function(ctx)
          local doc = ctx:full_document()
          report({ id = doc._id, attempt = ctx:attempt_number() })
          if ctx:attempt_number() == 1 then error(fw.error("Http.Timeout", "first")) end
          local t = os.clock() + 20
          while os.clock() < t do end
        end"""
        p = self.start(lua_stream(retry=DEFERRED % (3, "300ms"), dlq="true", handler=slow))
        self.db.orders.insert_one({"_id": 1})
        p.wait_until(lambda: self.attempts_of(p, 1) == [1, 2], 15, "attempt 2")
        entry = wait_for(lambda: self.entries("REPROCESSING"), 10, "the claimed entry")[0]
        p.kill9()
        left = (entry["claimedUntil"] - entry["lastTouched"]).total_seconds()
        self.assertLessEqual(left, 30.5, entry)
        self.assertGreater(left, 0, entry)

    def test_exhaustion_leaves_one_pending_entry_with_every_attempt(self):
        p = self.start(lua_stream(retry=DEFERRED % (3, "100ms"), dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Http.Timeout"})
        entry = wait_for(lambda: (self.entries("PENDING") or [None])[0], 15, "a PENDING entry")
        self.assertEqual(entry["attempts"], 3)
        self.assertEqual(entry["error"]["type"], "Http.Timeout")
        self.assertNotIn("nextAttemptAt", entry)
        self.assertEqual(len(self.entries()), 1)
        self.assertEqual(self.attempts_of(p, 1), [1, 2, 3])
        self.stop_cleanly(p)

    def test_sequenced_later_event_of_the_key_waits_behind_it(self):
        p = self.start(lua_stream(retry=DEFERRED % (3, "300ms"), dlq="{ sequenced = true }",
                                  extra='on_update = misbehave, full_document = "updateLookup"'))
        self.db.orders.insert_one({"_id": 1, "fail": "Http.Timeout", "fail_until": 2})
        wait_for(lambda: self.entries("SCHEDULED"), 10, "a SCHEDULED entry")
        # The same key: the update parks behind the scheduled head.
        self.db.orders.update_one({"_id": 1}, {"$unset": {"fail": 1}})
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: self.attempts_of(p, 1) == [1, 2, 1], 15, "the update after the retry")
        ids = [r["id"] for r in p.reports()]
        self.assertEqual(ids, [1, 2, 1, 1])  # insert, event 2, the retry, then the update
        wait_for(lambda: all(e["status"] == "RESOLVED" for e in self.entries()) or None, 10,
                 "every entry RESOLVED")
        self.assertEqual(len(self.entries()), 2)
        self.stop_cleanly(p)

if __name__ == "__main__":
    unittest.main()
