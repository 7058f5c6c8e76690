"""Retry policy (seed 001) and seed 000's retry/DLQ matrix, seen from outside:
what the handler sees, what lands in the DLQ, what the log and the exit
summary say."""
import re
import unittest

from dlqtest import FailureTestCase, lua_stream, summary, timed_reports

FAST = 'initial_delay = "50ms", jitter = false'


class RetryDlqMatrix(FailureTestCase):
    """Seed 000's table, row by row. Event 1 always fails; event 2 after it
    must be handled, proving the stream goes on."""

    def run_matrix_row(self, retry, dlq):
        p = self.start(lua_stream(retry=retry, dlq=dlq))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.db.orders.insert_one({"_id": 2})
        reports = p.wait_until(lambda: any(r["id"] == 2 for r in p.reports()),
                               what="event 2 handled") or p.reports()
        return p, reports

    def test_retry_and_dlq_retries_max_attempts_then_dead_letters(self):
        p, reports = self.run_matrix_row("{ max_attempts = 3, %s }" % FAST, "true")
        self.assertEqual([(r["id"], r["attempt"]) for r in reports],
                         [(1, 1), (1, 2), (1, 3), (2, 1)])
        entries = self.wait_dlq(1)
        self.assertEqual(len(entries), 1)
        self.assertEqual(entries[0]["attempts"], 3)
        self.assertEqual(entries[0]["documentKey"], {"_id": 1})
        self.assertEqual(entries[0]["error"]["type"], "Boom")
        self.wait_checkpoint_at_least("s", reports[-1]["eid"])
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["handled"], s["retries"], s["dead_lettered"], s["lost"]),
                         (1, 2, 1, 0))

    def test_dlq_only_first_failure_goes_to_dlq(self):
        p, reports = self.run_matrix_row(None, "true")
        self.assertEqual([(r["id"], r["attempt"]) for r in reports], [(1, 1), (2, 1)])
        entries = self.wait_dlq(1)
        self.assertEqual(entries[0]["attempts"], 1)
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["retries"], s["dead_lettered"], s["lost"]), (0, 1, 0))

    def test_retry_only_retries_then_drops_the_event(self):
        p, reports = self.run_matrix_row("{ max_attempts = 3, %s }" % FAST, None)
        self.assertEqual([(r["id"], r["attempt"]) for r in reports],
                         [(1, 1), (1, 2), (1, 3), (2, 1)])
        lost = [m for m in p.messages("error") if "LOST" in m]
        self.assertEqual(len(lost), 1, p.messages("error"))
        self.assertIn("after 3 attempt(s)", lost[0])
        self.assertIn("Boom: failed with Boom", lost[0])
        # The stream goes on: its checkpoint passes the lost event.
        self.wait_checkpoint_at_least("s", reports[-1]["eid"])
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["handled"], s["retries"], s["dead_lettered"], s["lost"]),
                         (1, 2, 0, 1))
        self.assertNotIn("_fw_dlq", self.db.list_collection_names())

    def test_neither_loses_the_event_at_first_failure(self):
        p, reports = self.run_matrix_row(None, None)
        self.assertEqual([(r["id"], r["attempt"]) for r in reports], [(1, 1), (2, 1)])
        lost = [m for m in p.messages("error") if "LOST" in m]
        self.assertEqual(len(lost), 1, p.messages("error"))
        self.assertIn("after 1 attempt(s)", lost[0])
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["handled"], s["retries"], s["dead_lettered"], s["lost"]),
                         (1, 0, 0, 1))
        self.assertNotIn("_fw_dlq", self.db.list_collection_names())

    def test_retry_false_and_dlq_false_mean_neither(self):
        p, reports = self.run_matrix_row("false", "false")
        self.assertEqual([(r["id"], r["attempt"]) for r in reports], [(1, 1), (2, 1)])
        self.stop_cleanly(p)
        self.assertEqual(summary(p, "s")["lost"], 1)

    def test_dlq_enabled_false_means_no_dlq(self):
        p, reports = self.run_matrix_row(None, "{ enabled = false }")
        self.stop_cleanly(p)
        self.assertEqual(summary(p, "s")["lost"], 1)
        self.assertNotIn("_fw_dlq", self.db.list_collection_names())


class RetryAttemptsAndBackoff(FailureTestCase):

    def test_attempt_numbers_and_gaps_grow_exponentially(self):
        p = self.start(lua_stream(
            retry='{ max_attempts = 4, initial_delay = "100ms", multiplier = 2.0, '
                  'jitter = false }', dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        p.wait_reports(4)
        self.wait_dlq(1)
        timed = timed_reports(p)
        self.assertEqual([r["attempt"] for _, r in timed], [1, 2, 3, 4])
        gaps = [b[0] - a[0] for a, b in zip(timed, timed[1:])]
        # Lower bounds only: the stream may be slower, never faster.
        for gap, delay in zip(gaps, (100, 200, 400)):
            self.assertGreaterEqual(gap, delay, gaps)
        self.assertGreater(gaps[2], gaps[0], gaps)
        for delay in (100, 200, 400):
            p.wait_log("retrying in %d ms" % delay)
        self.assertEqual(self.dlq_entries()[0]["attempts"], 4)

    def test_delays_are_capped_at_max_delay(self):
        p = self.start(lua_stream(
            retry='{ max_attempts = 4, initial_delay = "50ms", multiplier = 3.0, '
                  'max_delay = "100ms", jitter = false }', dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.wait_dlq(1, p=p)
        delays = [int(m) for m in re.findall(r"retrying in (\d+) ms", " ".join(p.messages()))]
        self.assertEqual(delays, [50, 100, 100])
        gaps = [b[0] - a[0] for a, b in zip(timed_reports(p), timed_reports(p)[1:])]
        for gap, delay in zip(gaps, delays):
            self.assertGreaterEqual(gap, delay)

    def test_jitter_keeps_each_delay_within_20_percent(self):
        p = self.start(lua_stream(
            retry='{ max_attempts = 6, initial_delay = "50ms", multiplier = 1.0 }', dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        self.wait_dlq(1, p=p)
        delays = [int(m) for m in re.findall(r"retrying in (\d+) ms", " ".join(p.messages()))]
        self.assertEqual(len(delays), 5)
        for d in delays:
            self.assertTrue(40 <= d <= 60, delays)

    def test_defaults_retry_fills_the_stream_attribute_by_attribute(self):
        p = self.start(lua_stream(retry="{ max_attempts = 2 }", dlq="true"),
                       defaults='fw.defaults { retry = { initial_delay = "70ms", '
                                'jitter = false, max_attempts = 9 } }\n')
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        entries = self.wait_dlq(1, p=p)
        self.assertEqual(entries[0]["attempts"], 2)
        self.assertEqual(self.attempts_of(p, 1), [1, 2])
        p.wait_log("retrying in 70 ms")

    def test_retry_true_uses_seed_defaults(self):
        # max_attempts 3, 500ms then 1s with jitter: each within [0.8, 1.2].
        p = self.start(lua_stream(retry="true", dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Boom"})
        entries = self.wait_dlq(1, p=p)
        self.assertEqual(entries[0]["attempts"], 3)
        delays = [int(m) for m in re.findall(r"retrying in (\d+) ms", " ".join(p.messages()))]
        self.assertEqual(len(delays), 2)
        self.assertTrue(400 <= delays[0] <= 600, delays)
        self.assertTrue(800 <= delays[1] <= 1200, delays)

    def test_transient_failure_recovers_on_a_later_attempt(self):
        p = self.start(lua_stream(retry="{ max_attempts = 3, %s }" % FAST, dlq="true"))
        self.db.orders.insert_one({"_id": 1, "fail": "Http.Timeout", "fail_until": 3})
        self.db.orders.insert_one({"_id": 2})
        reports = p.wait_reports(4)
        self.assertEqual([(r["id"], r["attempt"]) for r in reports],
                         [(1, 1), (1, 2), (1, 3), (2, 1)])
        self.stop_cleanly(p)
        s = summary(p, "s")
        self.assertEqual((s["handled"], s["handler_errors"], s["retries"], s["dead_lettered"]),
                         (2, 2, 2, 0))
        self.assertEqual(self.dlq_entries(), [])


class RetryClassification(FailureTestCase):
    """Which error types are retried."""

    def dead_letter_types(self, retry, failures):
        """Inserts one failing event per entry of failures; returns
        {id: (attempts seen by the handler, DLQ error.type)}."""
        p = self.start(lua_stream(retry=retry, dlq="true"))
        for i, kind in enumerate(failures, 1):
            self.db.orders.insert_one({"_id": i, "fail": kind})
        self.wait_dlq(len(failures), p=p)
        out = {}
        for e in self.dlq_entries():
            i = e["documentKey"]["_id"]
            self.assertEqual(e["attempts"], len(self.attempts_of(p, i)))
            out[failures[i - 1]] = (self.attempts_of(p, i), e["error"]["type"])
        return out

    def test_default_no_retry_types_are_not_retried(self):
        got = self.dead_letter_types("{ max_attempts = 3, %s }" % FAST,
                                     ["nil", "type", "arg", "plain"])
        self.assertEqual(got, {
            "nil": ([1], "NilError"),
            "type": ([1], "TypeError"),
            "arg": ([1], "ArgumentError"),
            "plain": ([1, 2, 3], "RuntimeError"),
        })

    def test_retry_on_narrows_and_matches_subtypes(self):
        got = self.dead_letter_types(
            '{ max_attempts = 3, retry_on = { "Timeout", "Http" }, %s }' % FAST,
            ["Timeout", "Http", "Http.Timeout", "HttpX", "Validation", "plain"])
        self.assertEqual(got, {
            "Timeout": ([1, 2, 3], "Timeout"),
            "Http": ([1, 2, 3], "Http"),
            "Http.Timeout": ([1, 2, 3], "Http.Timeout"),
            "HttpX": ([1], "HttpX"),
            "Validation": ([1], "Validation"),
            "plain": ([1], "RuntimeError"),
        })

    def test_no_retry_on_wins_over_retry_on(self):
        got = self.dead_letter_types(
            '{ max_attempts = 3, retry_on = { "Http" }, no_retry_on = { "Http.Fatal" }, %s }'
            % FAST, ["Http.Timeout", "Http.Fatal", "Http.Fatal.Tls"])
        self.assertEqual(got, {
            "Http.Timeout": ([1, 2, 3], "Http.Timeout"),
            "Http.Fatal": ([1], "Http.Fatal"),
            "Http.Fatal.Tls": ([1], "Http.Fatal.Tls"),
        })

    def test_same_type_in_both_lists_is_not_retried(self):
        got = self.dead_letter_types(
            '{ max_attempts = 3, retry_on = { "Http" }, no_retry_on = { "Http" }, %s }' % FAST,
            ["Http"])
        self.assertEqual(got, {"Http": ([1], "Http")})

    def test_setting_no_retry_on_replaces_the_default_list(self):
        got = self.dead_letter_types(
            '{ max_attempts = 2, no_retry_on = { "Validation" }, %s }' % FAST,
            ["nil", "Validation"])
        self.assertEqual(got, {"nil": ([1, 2], "NilError"), "Validation": ([1], "Validation")})


if __name__ == "__main__":
    unittest.main()
