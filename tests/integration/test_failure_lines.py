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


if __name__ == "__main__":
    unittest.main()
