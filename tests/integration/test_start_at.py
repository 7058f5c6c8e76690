"""checkpoint.start_at (issue 28): a stream without a checkpoint starts at a point of the server's
history (startAtOperationTime), given as a Timestamp (exact: from that operation on) or an
RFC 3339 date (its whole second on). Events before it are not delivered, those from it on are;
once the stream has a checkpoint the checkpoint wins. A start_at older than the oplog's first
entry is history lost: on_history_lost = "fail" stops the stream saying so, "resume_from_now"
starts from now."""
import datetime
import json
import time
import unittest

from fwtest import StandInTestCase, clean_env, run_cli, wait_until

STREAMS = """
fw.stream {
  name = "%(name)s", collection = "orders",
  checkpoint = { start_at = %(start_at)s %(extra)s },
  on_insert = function(ctx) report({ id = ctx:full_document()._id }) end,
}
"""


def stream(name, start_at, extra=""):
    return STREAMS % {"name": name, "start_at": start_at, "extra": extra}


def iso(secs):
    return datetime.datetime.fromtimestamp(secs, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class StartAt(StandInTestCase):

    def insert(self, _id):
        """Inserts {_id} and returns the operation's cluster time (a bson Timestamp)."""
        with self.client.start_session() as s:
            self.db.orders.insert_one({"_id": _id}, session=s)
            return s.operation_time

    def ids(self, p, name):
        return [r["id"] for r in p.reports(name)]

    def test_timestamp_and_date_start_there_and_the_checkpoint_wins_after(self):
        self.insert("a1")
        a2 = self.insert("a2")
        self.insert("a3")
        # The date form starts at a whole second: one after a3's.
        after = a2.time + 1
        wait_until(lambda: time.time() >= after, 3, 0.02, "the next second")
        self.insert("b1")
        body = (stream("exact", "fw.timestamp(%d, %d)" % (a2.time, a2.inc))
                + stream("dated", '"%s"' % iso(after)))
        p = self.run_fw(self.script(body))
        p.wait_open(2)
        self.insert("c1")
        p.wait_reports(4, "exact")
        p.wait_reports(2, "dated")
        self.assertEqual(self.ids(p, "exact"), ["a2", "a3", "b1", "c1"])
        self.assertEqual(self.ids(p, "dated"), ["b1", "c1"])
        self.assertEqual(p.stop(), 0)

        # Restarted with a checkpoint: it resumes there, start_at no longer applies.
        self.insert("d1")
        p = self.run_fw(self.script(body))
        p.wait_reports(1, "exact")
        p.wait_reports(1, "dated")
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.ids(p, "exact"), ["d1"])
        self.assertEqual(self.ids(p, "dated"), ["d1"])


class StartAtHistoryLost(StandInTestCase):
    standin_args = ("--oplog-max-entries", "5")

    def test_start_at_older_than_the_oplog_is_history_lost(self):
        self.db.orders.insert_many([{"_id": "old%d" % i} for i in range(20)])
        hour_ago = '"%s"' % iso(int(time.time()) - 3600)
        body = (stream("strict", hour_ago)
                + stream("lenient", hour_ago, ', on_history_lost = "resume_from_now"'))
        path = self.script(body)
        # doctor foresees it, with the fix.
        cp = run_cli(["doctor", path, "--uri", self.uri, "--json"], env=clean_env())
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)
        checks = {(c["stream"], c["name"]): c for c in json.loads(cp.stdout)["checks"]}
        strict = checks[("strict", "checkpoint")]
        self.assertEqual(strict["status"], "fail")
        self.assertIn("checkpoint.start_at", strict["message"])
        self.assertIn('stop (on_history_lost = "fail")', strict["message"])
        self.assertIn("later start_at", strict["fix"])
        self.assertIn("start from now", checks[("lenient", "checkpoint")]["message"])

        p = self.run_fw(path)
        p.wait_log("checkpoint.start_at %s" % hour_ago.strip('"'), 2)
        strict = [m for m in p.messages(stream="strict") if "start_at" in m]
        self.assertTrue(any("older than the oplog's first entry, and on_history_lost = "
                            "\"fail\"" in m for m in strict), strict)
        self.assertTrue(any("starting from now" in m
                            for m in p.messages(level="error", stream="lenient")))
        p.wait_log("change stream open", stream="lenient")
        self.db.orders.insert_one({"_id": "new"})
        p.wait_reports(1, "lenient")
        self.assertEqual(self.ids(p, "lenient"), ["new"])
        self.assertEqual(p.report_count("strict"), 0)
        p.stop()

    def ids(self, p, name):
        return [r["id"] for r in p.reports(name)]


if __name__ == "__main__":
    unittest.main()
