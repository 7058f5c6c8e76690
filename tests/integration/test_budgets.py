"""Handler budgets (timeout, memory_limit) and shutdown during a retry wait."""
import time
import unittest

from dlqtest import FailureTestCase, lua_stream, record_index, summary

RUNAWAY = """
local function runaway(ctx)
  local doc = ctx:full_document()
  report({ id = doc._id, attempt = ctx:attempt_number(), eid = ctx:event_id(),
           stream = ctx:stream_name() })
  if doc.spin then while true do end end
  if doc.spin_in_pcall then
    -- A handler cannot swallow its timeout with pcall.
    while true do pcall(function() while true do end end) end
  end
  if doc.hog then
    local t = {}
    for i = 1, 1e9 do t[i] = string.rep("x", 64) .. i end
  end
end
"""


class HandlerBudgets(FailureTestCase):

    def start_runaway(self, *streams):
        p = self.run_fw(self.script(RUNAWAY + "".join(streams)))
        p.wait_open(len(streams))
        return p

    def test_timeout_stops_the_handler_with_a_retryable_timeout_error(self):
        p = self.start_runaway(lua_stream(
            handler="runaway", dlq="true", extra='timeout = "200ms"',
            retry='{ max_attempts = 2, initial_delay = "50ms", jitter = false }'))
        started = time.monotonic()
        self.db.orders.insert_one({"_id": 1, "spin": True})
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: any(r["id"] == 2 for r in p.reports()), timeout=20,
                     what="event 2 after the runaway one")
        self.assertGreaterEqual(time.monotonic() - started, 0.4)  # two 200 ms attempts
        self.assertEqual(self.attempts_of(p, 1), [1, 2])           # retried: Timeout
        e = self.wait_dlq(1)[0]
        self.assertEqual(e["error"]["type"], "Timeout")
        self.assertIn("200 ms", e["error"]["message"])
        self.assertEqual(e["attempts"], 2)

    def test_timeout_cannot_be_swallowed_by_pcall(self):
        p = self.start_runaway(lua_stream(handler="runaway", dlq="true",
                                          extra='timeout = "200ms"'))
        self.db.orders.insert_one({"_id": 1, "spin_in_pcall": True})
        self.db.orders.insert_one({"_id": 2})
        p.wait_until(lambda: any(r["id"] == 2 for r in p.reports()), timeout=20,
                     what="event 2")
        self.assertEqual(self.wait_dlq(1)[0]["error"]["type"], "Timeout")

    def test_memory_limit_raises_memory_error_and_the_stream_goes_on(self):
        p = self.start_runaway(lua_stream(handler="runaway", dlq="true",
                                          extra='memory_limit = "8MB"'))
        self.db.orders.insert_one({"_id": 1, "hog": True})
        self.db.orders.insert_one({"_id": 2})
        self.db.orders.insert_one({"_id": 3, "hog": True})
        self.db.orders.insert_one({"_id": 4})
        p.wait_until(lambda: any(r["id"] == 4 for r in p.reports()), timeout=30,
                     what="event 4")
        entries = self.wait_dlq(2)
        self.assertEqual([(e["documentKey"]["_id"], e["error"]["type"]) for e in entries],
                         [(1, "MemoryError"), (3, "MemoryError")])
        self.assertIn("memory_limit", entries[0]["error"]["message"])
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["handled"], s["dead_lettered"]), (2, 2))

    def test_memory_error_is_retried_by_default(self):
        p = self.start_runaway(lua_stream(
            handler="runaway", dlq="true", extra='memory_limit = "8MB"',
            retry='{ max_attempts = 2, initial_delay = "50ms", jitter = false }'))
        self.db.orders.insert_one({"_id": 1, "hog": True})
        e = self.wait_dlq(1, timeout=30, p=p)[0]
        self.assertEqual((e["error"]["type"], e["attempts"]), ("MemoryError", 2))
        self.assertEqual(self.attempts_of(p, 1), [1, 2])

    # Regression: fw_lua_host_call once labelled the whole call a memory stop
    # when any allocation had been refused, even one the handler caught.
    def test_a_caught_allocation_failure_does_not_relabel_a_later_error(self):
        p = self.start_runaway(lua_stream(
            handler="h", dlq="true", extra='memory_limit = "8MB"').replace("fw.stream", """
local function h(ctx)
  local ok = pcall(string.rep, "x", 64 * 1024 * 1024)
  report({ refused = not ok })
  error(fw.error("Boom", "after a refused allocation"))
end
fw.stream""", 1))
        self.db.orders.insert_one({"_id": 1})
        e = self.wait_dlq(1, p=p)[0]
        self.assertTrue(p.reports()[0]["refused"])
        self.assertEqual((e["error"]["type"], e["error"]["message"]),
                         ("Boom", "after a refused allocation"))

    def test_runaway_handler_does_not_stall_another_stream(self):
        p = self.start_runaway(
            lua_stream(name="slow", collection="orders", handler="runaway",
                       extra='timeout = "3s"'),
            lua_stream(name="fast", collection="users", handler="runaway"))
        self.db.orders.insert_one({"_id": 1, "spin": True})
        p.wait_until(lambda: p.reports("slow"), what="the runaway handler to start")
        for i in range(1, 4):
            self.db.users.insert_one({"_id": i})
        p.wait_reports(3, stream="fast", timeout=10)
        # All three were handled while the runaway one was still spinning.
        self.assertIsNone(record_index(p, "LOST"))
        p.wait_log("LOST", timeout=20)
        with p._cond:
            fast = [i for i, r in enumerate(p.records)
                    if r.get("stream") == "fast" and r.get("msg", "").startswith("REPORT ")]
        self.assertEqual(len(fast), 3)
        self.assertLess(max(fast), record_index(p, "LOST"))
        self.assertIn("Timeout", [m for m in p.messages("error") if "LOST" in m][0])


class ShutdownDuringBackoff(FailureTestCase):

    def test_sigterm_during_a_retry_wait_stops_promptly_and_the_event_comes_back(self):
        stream = lua_stream(dlq="true", retry='{ max_attempts = 3, initial_delay = "30s" }')
        p = self.start(stream)
        self.db.orders.insert_one({"_id": 0})
        eid0 = p.wait_reports(1)[0]["eid"]
        self.wait_checkpoint_at_least("s", eid0)
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        p.wait_log("retrying in")
        eid1 = [r for r in p.reports() if r["id"] == 1][0]["eid"]
        started = time.monotonic()
        rc = p.stop(timeout=20)
        self.assertEqual(rc, 0)
        self.assertLess(time.monotonic() - started, 15.0)  # not the 30 s backoff
        self.assertEqual(self.processed_token("s"), eid0)
        self.assertLess(self.processed_token("s"), eid1)
        self.assertEqual(self.dlq_entries(), [])

        p2 = self.start(stream.replace('"30s"', '"50ms"'))
        p2.wait_until(lambda: self.attempts_of(p2, 1) == [1, 2, 3], what="3 attempts")
        self.assertEqual([r["id"] for r in p2.reports()], [1, 1, 1])  # 0 is not replayed
        self.assertEqual(self.wait_dlq(1)[0]["attempts"], 3)


if __name__ == "__main__":
    unittest.main()
