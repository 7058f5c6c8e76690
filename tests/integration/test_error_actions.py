"""on_error actions and ctx:send_to_dlq, seen from outside."""
import unittest

from dlqtest import FailureTestCase, lua_stream, summary

FAST = 'initial_delay = "50ms", jitter = false'


def on_error(body):
    """An on_error that reports what it received, then runs body."""
    return ("on_error = function(err, ctx) "
            "report({ on_error = true, type = err.type, attempt = ctx:attempt_number() }) "
            "%s end" % body)


class OnErrorActions(FailureTestCase):

    def run_one(self, action_body, retry="{ max_attempts = 3, %s }" % FAST, dlq="true",
                fail="Boom"):
        p = self.start(lua_stream(retry=retry, dlq=dlq, extra=on_error(action_body)))
        self.db.orders.insert_one({"_id": 1, "fail": fail})
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: any(r.get("id") == 2 for r in p.reports()), what="event 2")
        return p

    def test_skip_means_no_retry_no_dlq_and_logged(self):
        p = self.run_one("return fw.SKIP")
        self.assertEqual(self.attempts_of(p, 1), [1])
        p.wait_log("skipped by on_error after attempt 1: Boom: failed with Boom")
        eid2 = [r for r in p.reports() if r.get("id") == 2][0]["eid"]
        self.wait_checkpoint_at_least("s", eid2)
        self.stop_cleanly(p)
        self.assertEqual(self.dlq_entries(), [])
        s = summary(p, "s")
        self.assertEqual((s["skipped"], s["retries"], s["dead_lettered"], s["lost"]),
                         (1, 0, 0, 0))

    def test_retry_retries_even_a_no_retry_type_bounded_by_max_attempts(self):
        p = self.run_one("return fw.RETRY", fail="nil")
        self.assertEqual(self.attempts_of(p, 1), [1, 2, 3])
        entries = self.wait_dlq(1)
        self.assertEqual(entries[0]["attempts"], 3)
        self.assertEqual(entries[0]["error"]["type"], "NilError")

    def test_retry_without_a_retry_policy_gets_one_attempt(self):
        p = self.run_one("return fw.RETRY", retry=None)
        self.assertEqual(self.attempts_of(p, 1), [1])
        self.assertEqual(self.wait_dlq(1)[0]["attempts"], 1)

    def test_dlq_dead_letters_now(self):
        p = self.run_one("return fw.DLQ", retry="{ max_attempts = 5, %s }" % FAST)
        self.assertEqual(self.attempts_of(p, 1), [1])
        entries = self.wait_dlq(1)
        self.assertEqual((entries[0]["attempts"], entries[0]["error"]["type"]), (1, "Boom"))

    def test_dlq_on_a_stream_without_dlq_loses_the_event_loudly(self):
        p = self.run_one("return fw.DLQ", dlq=None)
        self.assertEqual(self.attempts_of(p, 1), [1])
        self.assertTrue(any("LOST" in m for m in p.messages("error")), p.messages("error"))
        self.stop_cleanly(p)
        self.assertEqual(summary(p, "s")["lost"], 1)

    def test_rethrow_applies_the_standard_policy(self):
        p = self.run_one("return fw.RETHROW")
        self.assertEqual(self.attempts_of(p, 1), [1, 2, 3])
        self.assertEqual(self.wait_dlq(1)[0]["attempts"], 3)

    def test_nil_applies_the_standard_policy(self):
        p = self.run_one("return nil")
        self.assertEqual(self.attempts_of(p, 1), [1, 2, 3])
        self.assertEqual(self.wait_dlq(1)[0]["attempts"], 3)

    def test_nil_keeps_no_retry_types_unretried(self):
        p = self.run_one("return nil", fail="type")
        self.assertEqual(self.attempts_of(p, 1), [1])
        self.assertEqual(self.wait_dlq(1)[0]["error"]["type"], "TypeError")

    def test_on_error_is_called_once_per_failed_attempt(self):
        p = self.run_one("return nil")
        self.wait_dlq(1)
        calls = [r["attempt"] for r in p.reports() if r.get("on_error")]
        self.assertEqual(calls, [1, 2, 3])

    def test_unknown_return_value_is_rethrow_with_a_warning(self):
        p = self.run_one('return "skip"')
        self.assertEqual(self.attempts_of(p, 1), [1, 2, 3])
        p.wait_log('on_error returned "skip" (did you mean fw.SKIP?)')
        self.assertTrue(any("did you mean fw.SKIP?" in m for m in p.messages("warn")))

    def test_error_inside_on_error_is_logged_and_treated_as_rethrow(self):
        p = self.run_one('error("on_error broke")')
        self.assertEqual(self.attempts_of(p, 1), [1, 2, 3])
        self.assertEqual(self.wait_dlq(1)[0]["error"]["type"], "Boom")
        broke = [m for m in p.messages("error") if "on_error broke" in m]
        self.assertEqual(len(broke), 3, p.messages("error"))
        self.assertIn("on_error failed", broke[0])

    def test_runaway_on_error_is_stopped_and_treated_as_rethrow(self):
        # Regression: on_error and the policy shared one time budget, so a
        # runaway on_error left none for the policy: the event went to the
        # DLQ as "RuntimeError: handler failed and its error policy failed",
        # unretried, its own error type lost, logged as "(no message)".
        p = self.run_one("while true do end",
                         retry="{ max_attempts = 2, %s }, timeout = \"200ms\"" % FAST)
        self.assertEqual(self.attempts_of(p, 1), [1, 2])
        e = self.wait_dlq(1)[0]
        self.assertEqual((e["error"]["type"], e["attempts"]), ("Boom", 2))
        failed = [m for m in p.messages("error") if "on_error failed" in m]
        self.assertEqual(len(failed), 2, p.messages("error"))
        self.assertIn("exceeded its timeout of 200 ms", failed[0])

    def test_on_error_receives_type_message_fields_and_traceback(self):
        body = ("report({ seen = true, type = err.type, message = err.message, "
                "status = err.fields.status, id = nil, where = err.where, "
                "traceback = err.traceback }) return fw.SKIP")
        p = self.start(lua_stream(dlq="true", handler="h", extra=on_error(body)).replace(
            "fw.stream", """
local function h(ctx)
  local doc = ctx:full_document()
  if doc.kind == "typed" then
    error(fw.error("Http.Timeout", "gateway did not answer", { status = 504 }))
  end
  local t = nil
  return t.field
end
fw.stream""", 1))
        self.db.orders.insert_one({"_id": 1, "kind": "typed"})
        self.db.orders.insert_one({"_id": 2, "kind": "lua"})
        p.wait_until(lambda: len([r for r in p.reports() if r.get("seen")]) >= 2,
                     what="two on_error reports")
        typed, lua = [r for r in p.reports() if r.get("seen")]
        self.assertEqual(typed["type"], "Http.Timeout")
        self.assertEqual(typed["message"], "gateway did not answer")
        self.assertEqual(typed["status"], 504)
        self.assertIn("stack traceback:", typed["traceback"])
        self.assertIn("script.lua", typed["traceback"])
        self.assertRegex(typed["where"], r"script\.lua:\d+$")
        self.assertEqual(lua["type"], "NilError")
        # The message comes without its "file:line: " prefix, which is in where.
        self.assertEqual(lua["message"], "attempt to index a nil value (local 't')")
        self.assertRegex(lua["where"], r"script\.lua:\d+$")
        self.assertIsNone(lua.get("status"))
        self.assertIn("stack traceback:", lua["traceback"])


class SendToDlq(FailureTestCase):

    def test_send_to_dlq_from_on_error_dead_letters_now(self):
        # Regression: the request used to be ignored until the next attempt,
        # which then ran, succeeded, and was dead-lettered anyway.
        p = self.start(lua_stream(
            retry="{ max_attempts = 3, %s }" % FAST, dlq="true",
            extra='on_error = function(err, ctx) ctx:send_to_dlq("from on_error: " .. '
                  'err.type) end'))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom", "fail_until": 2})
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: any(r.get("id") == 2 for r in p.reports()), what="event 2")
        self.assertEqual(self.attempts_of(p, 1), [1])
        e = self.wait_dlq(1)[0]
        self.assertEqual((e["error"]["type"], e["error"]["message"], e["attempts"]),
                         ("DlqRequested", "from on_error: Boom", 1))
        self.stop_cleanly(p)
        self.assertEqual(summary(p, "s")["retries"], 0)

    def test_metadata_without_a_bson_form_is_reported_in_the_entry(self):
        self.start(lua_stream(
            dlq="true", extra='on_error = function(err, ctx) ctx:add_metadata("f", print) end'))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        e = self.wait_dlq(1)[0]
        self.assertEqual(e["metadata"],
                         {"_conversionError": "metadata.f: cannot convert a function to BSON"})
        self.assertEqual(e["error"]["type"], "Boom")

    def test_send_to_dlq_dead_letters_without_retry(self):
        p = self.start(lua_stream(retry="{ max_attempts = 3, %s }" % FAST, dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "dlq", "reason": "Invalid order total: -5"})
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: any(r.get("id") == 2 for r in p.reports()), what="event 2")
        self.assertEqual(self.attempts_of(p, 1), [1])
        entries = self.wait_dlq(1)
        self.assertEqual(len(entries), 1)
        e = entries[0]
        self.assertEqual(e["error"]["type"], "DlqRequested")
        self.assertEqual(e["error"]["message"], "Invalid order total: -5")
        self.assertEqual(e["attempts"], 1)
        self.assertEqual(e["documentKey"], {"_id": 1})
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["dead_lettered"], s["retries"], s["lost"]), (1, 0, 0))

    def test_send_to_dlq_on_a_retry_attempt_keeps_the_attempt_count(self):
        p = self.start(lua_stream(retry="{ max_attempts = 3, %s }" % FAST, dlq="true",
                                  handler="h").replace("fw.stream", """
local function h(ctx)
  report({ id = ctx:document_key()._id, attempt = ctx:attempt_number() })
  if ctx:attempt_number() == 1 then error(fw.error("Http.Timeout", "slow")) end
  ctx:add_metadata("why", "gave up on attempt 2")
  ctx:send_to_dlq("no point retrying")
end
fw.stream""", 1))
        self.db.orders.insert_one({"_id": 1})
        e = self.wait_dlq(1, p=p)[0]
        self.assertEqual(self.attempts_of(p, 1), [1, 2])
        self.assertEqual((e["error"]["type"], e["error"]["message"], e["attempts"]),
                         ("DlqRequested", "no point retrying", 2))
        self.assertEqual(e["metadata"], {"why": "gave up on attempt 2"})
        self.assertLess(e["firstAttemptAt"], e["lastAttemptAt"])

    def test_send_to_dlq_without_a_dlq_raises_a_clear_error(self):
        p = self.start(lua_stream(handler="h").replace("fw.stream", """
local function h(ctx)
  local ok, err = pcall(ctx.send_to_dlq, ctx, "nope")
  report({ ok = ok, err = tostring(err) })
end
fw.stream""", 1))
        self.db.orders.insert_one({"_id": 1})
        r = p.wait_reports(1)[0]
        self.assertFalse(r["ok"])
        self.assertIn('ctx:send_to_dlq: stream "s" has no dead-letter queue '
                      '(add dlq = true to its declaration)', r["err"])

    def test_send_to_dlq_without_a_dlq_uncaught_fails_the_event(self):
        p = self.start(lua_stream())
        self.db.orders.insert_one({"_id": 1, "fail": "dlq"})
        self.db.orders.insert_one({"_id": 2})
        p.wait_reports(2)
        p.wait_log("has no dead-letter queue")
        self.stop_cleanly(p)
        self.assertEqual(summary(p, "s")["lost"], 1)


if __name__ == "__main__":
    unittest.main()
