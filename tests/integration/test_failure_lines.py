"""A handler failure's log lines lead to the script's line and to the dead
letter (issue 26): every retry, dead-letter, skip and LOST line ends with
"(at FILE:LINE; key {...}[; entry ID])", the dead-letter line names the DLQ
entry `flowwarden dlq show` takes, and no line carries the document."""
import re
import unittest

from dlqtest import FailureTestCase, lua_stream

FAST = 'initial_delay = "20ms", jitter = false'


class FailureLines(FailureTestCase):

    def failing_source(self, line):
        """The script line a log line's "(at FILE:LINE" names."""
        m = re.search(r"\(at ([^;)]+):(\d+)[;)]", line)
        self.assertIsNotNone(m, line)
        with open(m.group(1)) as f:
            return f.read().split("\n")[int(m.group(2)) - 1]

    def key_of(self, line):
        m = re.search(r"; key (\{[^}]*\})", line) or re.search(r"\(key (\{[^}]*\})", line)
        self.assertIsNotNone(m, line)
        return m.group(1).replace(" ", "")

    def test_retry_and_dead_letter_lines_name_the_line_the_key_and_the_entry(self):
        p = self.start(lua_stream(retry="{ max_attempts = 2, %s }" % FAST, dlq="true"))
        self.db.orders.insert_one({"_id": 41, "fail": "plain", "secret_field": "do-not-log"})
        entry = self.wait_dlq(1)[0]
        p.wait_log("dead-lettered to _fw_dlq")
        retry = [m for m in p.messages() if "attempt 1 failed: RuntimeError" in m]
        dead = [m for m in p.messages() if "dead-lettered to _fw_dlq" in m]
        self.assertEqual((len(retry), len(dead)), (1, 1), p.messages())
        for line in retry + dead:
            self.assertIn('error("plain failure")', self.failing_source(line))
            self.assertEqual(self.key_of(line), '{"_id":41}')
            self.assertNotIn("do-not-log", line)
        self.assertTrue(dead[0].endswith("; entry %s)" % entry["_id"]), dead[0])
        self.assertNotIn("entry ", retry[0].split("(at ", 1)[1])
        self.stop_cleanly(p)

    def test_a_lost_event_names_its_line_and_key(self):
        p = self.start(lua_stream(retry="{ max_attempts = 1, %s }" % FAST))
        self.db.orders.insert_one({"_id": 42, "fail": "nil"})
        p.wait_log("LOST after 1 attempt(s)")
        lost = [m for m in p.messages("error") if "LOST after" in m][0]
        self.assertIn("return t.x", self.failing_source(lost))
        self.assertEqual(self.key_of(lost), '{"_id":42}')
        self.stop_cleanly(p)

    def test_a_failure_without_a_position_names_only_the_key(self):
        p = self.start(lua_stream(retry="{ max_attempts = 1, %s }" % FAST, dlq="true"))
        self.db.orders.insert_one({"_id": 43, "fail": "dlq", "reason": "bad order"})
        p.wait_log("dead-lettered to _fw_dlq")
        dead = [m for m in p.messages() if "dead-lettered to _fw_dlq" in m][0]
        self.assertIn("DlqRequested: bad order (key ", dead)
        self.assertNotIn("(at ", dead)
        self.assertEqual(self.key_of(dead), '{"_id":43}')
        self.stop_cleanly(p)

    def test_warn_lines_name_the_event_by_a_short_id_and_debug_maps_it(self):
        """Issue 38: warn lines carried the whole resume token (~170
        characters); they carry 12 hex digits of its hash and its
        clusterTime, and the whole token only at --log-level debug (and in
        the DLQ entry)."""
        p = self.run_fw(self.fw_script(lua_stream(retry="{ max_attempts = 2, %s }" % FAST,
                                                  dlq="true")),
                        extra=["--log-level", "debug"])
        p.wait_open(1)
        self.db.orders.insert_one({"_id": 44, "fail": "plain"})
        entry = self.wait_dlq(1)[0]
        p.wait_log("dead-lettered to _fw_dlq")
        token = entry["eventId"]
        self.assertGreater(len(token), 100)
        warn = [m for m in p.messages("warn") if "attempt 1 failed" in m or "dead-lettered" in m]
        self.assertEqual(len(warn), 2, p.messages())
        t, i = int(token[2:10], 16), int(token[10:18], 16)
        short = None
        for line in warn:
            m = re.match(r"event ([0-9a-f]{12})@(\d+)\.(\d+) \(token (\w+)\) ", line)
            self.assertIsNotNone(m, line)
            self.assertEqual((int(m.group(2)), int(m.group(3)), m.group(4)), (t, i, token))
            short = short or line.split(" ")[1]
        self.assertTrue(warn[1].startswith("event %s (token %s) dead-lettered" % (short, token)),
                        warn[1])
        self.stop_cleanly(p)
        # At the default level (info) the lines carry the short id alone.
        p = self.start(lua_stream(retry="{ max_attempts = 2, %s }" % FAST, dlq="true"))
        self.db.orders.insert_one({"_id": 45, "fail": "plain"})
        token = self.wait_dlq(2)[-1]["eventId"]
        p.wait_log("dead-lettered to _fw_dlq")
        warn = [m for m in p.messages("warn") if "attempt 1 failed" in m or "dead-lettered" in m]
        self.assertEqual(len(warn), 2, p.messages())
        for line in warn:
            self.assertNotIn(token, line)
            self.assertRegex(line, r"^event [0-9a-f]{12}@\d+\.\d+ ")
        self.stop_cleanly(p)


if __name__ == "__main__":
    unittest.main()
