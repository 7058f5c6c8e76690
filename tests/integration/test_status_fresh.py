"""`flowwarden status` tells the present (issue 26): the DLQ's pending count
moves with each dead letter (not only at the 30 s count), the last error
shows its age, and a failed reload shows with its time and message."""
import json
import os
import re
import unittest
import urllib.request

from fwtest import StandInTestCase, run_cli, wait_until

SCRIPT = """
fw.stream {
  name = "orders", collection = "orders",
  retry = { max_attempts = 1 },
  dlq = true,
  on_insert = function(ctx)
    local d = ctx:full_document()
    if d.bad then error(fw.error("Validation", "rejected")) end
    report({ id = d._id })
  end,
}
"""


class StatusIsFresh(StandInTestCase):

    def status(self, port, *extra):
        r = run_cli(["status", "--admin", "127.0.0.1:%d" % port] + list(extra))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout) if "--json" in extra else r.stdout

    def metric(self, port, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as f:
            text = f.read().decode()
        found = re.search(r'^%s\{stream="orders"\} (\S+)$' % name, text, re.M)
        return float(found.group(1)) if found else None

    def test_dead_letters_show_as_pending_at_once(self):
        p = self.run_fw(self.script(SCRIPT), extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open()
        # The count at start has run (0 pending) before the dead letters.
        wait_until(lambda: self.status(port, "--json")["streams"][0]["dlq_pending"] == 0, 10,
                   0.1, "the first count")
        self.db.orders.insert_many([{"_id": i, "bad": True} for i in range(13)]
                                   + [{"_id": 100}])
        p.wait_reports(1)
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 13, what="13 entries")
        wait_until(lambda: self.status(port, "--json")["streams"][0]["dlq_writes"] == 13, 10,
                   0.05, "13 writes counted")
        # Well before the next count (30 s): the writes moved the gauge.
        s = self.status(port, "--json")["streams"][0]
        self.assertEqual(s["dlq_pending"], 13)
        self.assertGreaterEqual(s["dlq_oldest_pending_age_seconds"], 0)
        self.assertEqual(self.metric(port, "flowwarden_dlq_pending"), 13)
        self.assertRegex(self.status(port), r"\norders\s+running\s+\S+\s+\S+\s+13\s")

        # The last error, with its age, after everything was handled.
        self.assertEqual(s["last_error_type"], "Validation")
        self.assertRegex(s["last_error_time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertGreaterEqual(s["last_error_age_seconds"], 0)
        self.assertLess(s["last_error_age_seconds"], 60)
        self.assertRegex(self.status(port), r"Validation \(\d+\.\d{3}s ago\)")
        p.stop()

    def test_a_failed_reload_shows_in_status_until_a_reload_succeeds(self):
        path = self.script(SCRIPT)
        p = self.run_fw(path, extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open()
        self.assertIsNone(self.status(port, "--json")["last_reload"])
        self.assertNotIn("reload", self.status(port))

        with open(path) as f:
            good = f.read()
        with open(path, "w") as f:
            f.write(good.replace('name = "orders"', 'name = "orders", bogus = 1'))
        r = run_cli(["reload", "--admin", "127.0.0.1:%d" % port])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        doc = self.status(port, "--json")
        self.assertEqual(doc["last_reload"]["result"], "failure")
        self.assertRegex(doc["last_reload"]["time"], r"^\d{4}-\d\d-\d\dT")
        self.assertLess(doc["last_reload"]["age_seconds"], 60)
        self.assertIn("reload failed; still running script version", doc["last_reload"]["message"])
        self.assertIn('unknown key "bogus"', doc["last_reload"]["message"])
        text = self.status(port)
        self.assertRegex(text, r"\nlast reload FAILED \d+\.\d{3}s ago: reload failed; still "
                               r"running script version [0-9a-f]+: ")
        self.assertIn('unknown key "bogus"', text)

        with open(path, "w") as f:
            f.write(good)
        os.utime(path)
        r = run_cli(["reload", "--admin", "127.0.0.1:%d" % port])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.status(port, "--json")["last_reload"]["result"], "success")
        self.assertNotIn("FAILED", self.status(port))
        p.stop()


if __name__ == "__main__":
    unittest.main()
