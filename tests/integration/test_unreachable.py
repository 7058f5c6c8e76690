"""A wrong or unreachable MongoDB (issue 26): `flowwarden run` names what it
connects to at once, says within seconds why it cannot reach it (in the log,
once per reason, and in `status`), and stops within seconds on SIGINT or
SIGTERM; a second SIGINT exits at once. Traffic goes to 127.0.0.1 only: port 1
refuses at once, a local listener that never answers stands for a server
that hangs."""
import json
import signal
import socket
import tempfile
import time
import unittest

from fwtest import Flowwarden, run_cli, wait_until, write_script

SCRIPT = """
    local fw = require("flowwarden")
    fw.stream { name = "orders", database = "shop", collection = "orders",
                on_change = function(ctx) end }
    """


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers a byte."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def close(self):
        self.sock.close()


class Unreachable(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.script = write_script(self.tmp.name, SCRIPT, prelude=False)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.proc.poll() is None:
                p.stop(signal.SIGKILL)

    def run_fw(self, uri, extra=()):
        # The user's command: text logs, as typed.
        p = Flowwarden(self.script, uri, list(extra), log_format=None)
        self.procs.append(p)
        return p

    def elapsed_until(self, p, needle, timeout):
        p.wait_log(needle, timeout=timeout)
        return time.monotonic() - p.started_at

    def stop_within(self, p, sig, seconds):
        t0 = time.monotonic()
        p.proc.send_signal(sig)
        rc = p.wait_exit(timeout=30)
        took = time.monotonic() - t0
        self.assertLess(took, seconds, "exit took %.2f s after %s" % (took, sig.name))
        return rc

    def test_refused_port_is_named_at_once_reported_in_seconds_and_stops_fast(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig.name):
                p = self.run_fw("mongodb://127.0.0.1:1/?replicaSet=rs0",
                                ["--admin", "127.0.0.1:0"])
                # Bounds far below what they guard against (a 30 s server selection),
                # with room for a loaded machine.
                self.assertLess(self.elapsed_until(
                    p, "connecting to 127.0.0.1:1 (replica set rs0) ...", 20), 5.0)
                self.assertLess(self.elapsed_until(
                    p, "cannot reach MongoDB at 127.0.0.1:1 (replica set rs0): No suitable "
                       "servers found", 20), 10.0)
                self.assertEqual(p.count_log("connection refused"), 1, p.raw_lines())
                port = p.admin_port()

                # status shows the pending error while it lasts, its age growing.
                def reason():
                    r = run_cli(["status", "--json", "--admin", "127.0.0.1:%d" % port])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    return json.loads(r.stdout)["streams"][0]["reason"] or ""
                wait_until(lambda: " for 2 s: " in reason(), 10, 0.1, "the error 2 s old")
                r = run_cli(["status", "--admin", "127.0.0.1:%d" % port])
                self.assertIn("orders: cannot reach MongoDB at 127.0.0.1:1 (replica set rs0) "
                              "for ", r.stdout)
                self.assertIn("connection refused calling hello on '127.0.0.1:1'", r.stdout)
                self.assertRegex(r.stdout, r"\norders\s+starting\s")
                # Logged once per reason, not once per try.
                self.assertEqual(p.count_log("cannot reach MongoDB"), 1, p.raw_lines())

                self.assertEqual(self.stop_within(p, sig, 10.0), 0)  # not 30 s
                self.assertEqual(p.count_log("%s received: stopping" % sig.name), 1)

    def test_a_server_that_never_answers_is_reported_and_stops_fast(self):
        silent = SilentServer()
        self.addCleanup(silent.close)
        where = "127.0.0.1:%d" % silent.port
        p = self.run_fw("mongodb://%s/?replicaSet=rs0" % where)
        self.assertLess(self.elapsed_until(p, "connecting to %s (replica set rs0)" % where, 20),
                        5.0)
        # The probe's connectTimeoutMS (2 s) when the URI sets none, not a 30 s selection.
        self.assertLess(self.elapsed_until(
            p, "cannot reach MongoDB at %s (replica set rs0): " % where, 20), 10.0)
        self.assertEqual(p.count_log("socket timeout calling hello on '%s'" % where), 1)
        t0 = time.monotonic()
        p.proc.send_signal(signal.SIGINT)
        # The streams stop within the probe's bound; the exit itself can wait
        # for the driver's monitor of the silent host (connectTimeoutMS, 10 s
        # by default: docs/operations.md, Signals).
        p.wait_log("[orders] summary:", timeout=10)
        self.assertLess(time.monotonic() - t0, 6.0)  # the 2 s probe, not the 10 s monitor
        self.assertEqual(p.wait_exit(timeout=30), 0)

    def test_a_second_sigint_exits_at_once_with_130(self):
        silent = SilentServer()
        self.addCleanup(silent.close)
        waiting = ("waiting for stream orders to finish its event or MongoDB call (SIGINT "
                   "again exits at once)")
        # The stream's thread logs "probing" just before its probe blocks: a SIGINT that
        # comes in between stops the stream at once (its summary), with nothing to wait for
        # and nothing for a second SIGINT to cut short. Then the run is started again.
        for _ in range(5):
            # connectTimeoutMS from the URI is kept: a probe then waits 60 s.
            p = self.run_fw("mongodb://127.0.0.1:%d/?replicaSet=rs0&connectTimeoutMS=60000"
                            % silent.port, extra=["--log-level", "debug"])
            p.wait_log("[orders] probing MongoDB at 127.0.0.1:%d" % silent.port, timeout=10)
            p.proc.send_signal(signal.SIGINT)
            p.wait_until(lambda: p.count_log(waiting) or p.count_log("[orders] summary:"),
                         timeout=10, what="the wait for the probe, or a stop before it")
            if p.count_log(waiting):
                break
            # Stopped before its probe: the exit itself then waits for the driver's monitor
            # of the silent host (this URI's connectTimeoutMS, 60 s; docs/operations.md).
            p.kill9()
        else:
            self.fail("the first SIGINT never found the stream in its probe in 5 runs")
        self.assertIsNone(p.proc.poll())
        self.assertEqual(self.stop_within(p, signal.SIGINT, 10.0), 130)  # not the 60 s probe
        self.assertEqual(p.count_log("SIGINT received again: exiting at once (exit code 130)"),
                         1, p.raw_lines())


if __name__ == "__main__":
    unittest.main()
