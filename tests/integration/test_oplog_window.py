"""Watching the oplog window while running (issue 27): `flowwarden run` samples
flowwarden_oplog_window_seconds (FW_TEST_OPLOG_WINDOW_INTERVAL_MS makes the minute short), shows it
with each stream's headroom in `flowwarden status`, and where the user may not read
local.oplog.rs the metric is absent and one log line (not one per sample) says why and what to
do. The alert rule on lag against the window passes `promtool check rules`."""
import json
import os
import re
import shutil
import subprocess
import time
import unittest
import urllib.request

import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fwtest import (Flowwarden, StandInTestCase, clean_env, refused_port, run_cli, wait_until,
                    with_credentials, write_script)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INTERVAL_ENV = {"FW_TEST_OPLOG_WINDOW_INTERVAL_MS": "100"}

SCRIPT = """
fw.stream {
  name = "orders", collection = "orders",
  on_insert = function(ctx) report({ id = ctx:full_document()._id }) end,
}
"""


def metric(port, name="flowwarden_oplog_window_seconds"):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as f:
        text = f.read().decode()
    found = re.search(r"^%s (\S+)$" % name, text, re.M)
    return float(found.group(1)) if found else None, text


def free_port():
    """A loopback port that refuses connections (nothing else can take it)."""
    return refused_port()


def status(port, *extra):
    r = run_cli(["status", "--admin", "127.0.0.1:%d" % port] + list(extra))
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    return json.loads(r.stdout) if "--json" in extra else r.stdout


class WindowSampled(StandInTestCase):

    def oplog_span(self):
        local = self.client.local["oplog.rs"]
        first = local.find({}, {"ts": 1}).sort("$natural", 1).limit(1)[0]["ts"].time
        last = local.find({}, {"ts": 1}).sort("$natural", -1).limit(1)[0]["ts"].time
        return last - first

    def test_metric_and_status_show_the_window_and_headroom(self):
        p = self.run_fw(self.script(SCRIPT), extra=["--admin", "127.0.0.1:0"],
                        env=clean_env(INTERVAL_ENV))
        port = p.admin_port()
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_reports(1)
        # The sample equals what the oplog's first and last entries say now (a later entry can
        # only widen it while we look).
        want = self.oplog_span()
        wait_until(lambda: (metric(port)[0] or -1) >= want, 10, 0.05, "a sample of the window")
        got, text = metric(port)
        self.assertIn("# TYPE flowwarden_oplog_window_seconds gauge", text)
        self.assertLessEqual(got, self.oplog_span())
        s = status(port, "--json")["streams"][0]
        self.assertGreaterEqual(s["oplog_window_seconds"], want)
        self.assertAlmostEqual(s["headroom_seconds"], s["oplog_window_seconds"] - s["lag_seconds"],
                               places=3)
        self.assertRegex(status(port), r"\noplog window: \S+; headroom: orders \S+\n")
        self.assertEqual(p.count_log("oplog window is unknown"), 0, p.messages())
        # The sampler stops with the streams: no wait for its next tick (room for a loaded
        # machine: the tick is 100 ms here, the stop's own work is what is bounded).
        t0 = time.monotonic()
        self.assertEqual(p.stop(), 0)
        self.assertLess(time.monotonic() - t0, 10.0)


class WindowUnreadable(StandInTestCase):
    """A user with readWrite on its database only: no find on local.oplog.rs."""
    DB = "t_test_metric_absent_and_said_once"
    standin_auth = ("admin", "adminpw")
    standin_args = ("--user", "app:apppw:readWrite@" + DB)
    command_log = True

    def test_metric_absent_and_said_once(self):
        self.assertEqual(self.db_name, self.DB)
        uri = with_credentials("mongodb://127.0.0.1:%d/%s?replicaSet=rs0"
                               % (self.standin.port, self.DB), ("app", "apppw"))
        p = self.run_fw(self.script(SCRIPT), extra=["--admin", "127.0.0.1:0"],
                        env=clean_env(INTERVAL_ENV), uri=uri)
        port = p.admin_port()
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_reports(1)
        # Five samples at least were refused, and said once.
        wait_until(lambda: len(self.commands("find", db="local")) >= 5, 10, 0.05,
                   "five reads of local.oplog.rs")
        self.assertEqual(p.count_log("oplog window is unknown"), 1)
        line = [m for m in p.messages() if "oplog window is unknown" in m][0]
        self.assertIn("may not read local.oplog.rs", line)
        self.assertIn("clusterMonitor", line)
        self.assertNotIn("apppw", line)
        got, text = metric(port)
        self.assertIsNone(got)
        self.assertNotIn("flowwarden_oplog_window_seconds", text)
        s = status(port, "--json")["streams"][0]
        self.assertIsNone(s["oplog_window_seconds"])
        self.assertIsNone(s["headroom_seconds"])
        self.assertIn("oplog window: unknown (local.oplog.rs cannot be read: the log says why)",
                      status(port))
        self.assertEqual(s["oplog_window_unknown"],
                         "local.oplog.rs cannot be read: the log says why")
        p.stop()


class WindowUnknownSaysWhy(unittest.TestCase):
    """Issue 38: `status` said "unknown (the log says why)" where the log
    rightly said nothing: an empty oplog (a new replica set, whose first
    entry a running flowwarden's own first checkpoint soon writes, so the
    state cannot be held still against a server) and a server that cannot
    be reached. The reason travels in /v1/streams (`oplog_window_unknown`,
    c/test_admin); here `status` prints what an instance answers."""

    def serve(self, streams):
        body = json.dumps({"streams": streams}).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return srv.server_address[1]

    def test_status_prints_the_reason_the_instance_gives(self):
        stream = {"name": "orders", "state": "running", "ready": True, "reason": None,
                  "lag_seconds": 0, "oplog_window_seconds": None, "headroom_seconds": None,
                  "oplog_window_unknown": "empty oplog"}
        self.assertIn("\noplog window: unknown (empty oplog)\n",
                      status(self.serve([stream])))
        del stream["oplog_window_unknown"]   # an instance from before the field
        self.assertIn("\noplog window: unknown (the log may say why)\n",
                      status(self.serve([stream])))

    def test_an_unreachable_server_says_so(self):
        with tempfile.TemporaryDirectory() as d:
            p = Flowwarden(write_script(d, SCRIPT),
                           "mongodb://127.0.0.1:%d/shop?replicaSet=rs0" % free_port(),
                           extra=["--admin", "127.0.0.1:0"], env=clean_env(INTERVAL_ENV))
            try:
                port = p.admin_port()
                wait_until(lambda: "\noplog window: unknown (MongoDB cannot be reached)\n"
                           in status(port), 20, 0.1, "the sampler's verdict")
                self.assertEqual(p.count_log("oplog window is unknown"), 0, p.messages())
            finally:
                p.stop()


class AlertRule(unittest.TestCase):

    def test_promtool_accepts_the_history_lost_rule(self):
        path = os.path.join(ROOT, "examples", "flowwarden-alerts.yml")
        with open(path) as f:
            text = f.read()
        self.assertIn("alert: FlowwardenHeadingForHistoryLost", text)
        self.assertIn("flowwarden_oplog_window_seconds", text)
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool is not installed")
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
