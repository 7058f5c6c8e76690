"""kill -9 of the MongoDB stand-in (persistent journal, --data-dir) and a
restart on the same port, three times while flowwarden reads (issue 18, the
chaos suite): every event written is handled."""
import http.server
import tempfile
import threading
import time
import unittest

from chaostest import SCALE, StandInTestCase, figures
from fwtest import clean_env

CRASHES = 3 * SCALE
BATCH = 3000            # events written between two crashes

# The event in the middle of each batch waits, once reported, on the test's gate: the crash
# lands mid-backlog whatever the machine's pace (the events before it handled, those after it
# not), and the handler goes on once the stand-in is dead.
SCRIPT = """
fw.stream { name = "seq", collection = "c",
  checkpoint = { save_every = 100, save_interval = "100ms" },
  restart = { initial_delay = "100ms", max_delay = "500ms" },
  on_insert = function(ctx)
    local n = ctx:full_document().n
    local t = os.clock() + 0.0002 while os.clock() < t do end
    report({ n = n })
    if n %% %d == %d and n < %d then
      fw.http.get(fw.env("FW_TEST_GATE_URL") .. "/" .. n, { timeout = "60s" })
    end
  end }
""" % (BATCH, BATCH // 2, CRASHES * BATCH)


class Gates:
    """An HTTP endpoint on 127.0.0.1: a request for /N waits until open(N) (60 s at most);
    wait_entered(N) returns once one came."""

    def __init__(self):
        self.cond = threading.Condition()
        self.entered, self.opened = set(), set()
        gates = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                n = int(self.path.strip("/"))
                with gates.cond:
                    gates.entered.add(n)
                    gates.cond.notify_all()
                    gates.cond.wait_for(lambda: n in gates.opened, 60)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def wait_entered(self, n, timeout):
        with self.cond:
            if not self.cond.wait_for(lambda: n in self.entered, timeout):
                raise AssertionError("the handler of event %d did not reach the gate within "
                                     "%d s" % (n, timeout))

    def open(self, n):
        with self.cond:
            self.opened.add(n)
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.opened.update(range(CRASHES * BATCH))
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()


class KillStandIn(StandInTestCase):

    @classmethod
    def setUpClass(cls):
        cls.data_dir = tempfile.TemporaryDirectory()
        cls.standin_args = ("--data-dir", cls.data_dir.name)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.data_dir.cleanup()

    def test_standin_killed_and_restarted_mid_stream_loses_nothing(self):
        started = time.monotonic()
        gates = Gates()
        self.addCleanup(gates.close)
        p = self.run_fw(self.script(SCRIPT), env=clean_env({"FW_TEST_GATE_URL": gates.url}))
        p.wait_open()
        port = self.standin.port
        n = 0
        for crash in range(CRASHES):
            self.db.c.insert_many([{"n": i} for i in range(n, n + BATCH)])
            # Mid-stream: half of this batch handled, its middle event held, the rest to come.
            gates.wait_entered(n + BATCH // 2, 60)
            n += BATCH
            self.standin.kill9()
            gates.open(n - BATCH + BATCH // 2)
            self.standin.args = list(self.standin_args) + ["--port", str(port)]
            self.standin.start()
        self.db.c.insert_many([{"n": i} for i in range(n, n + BATCH)])
        n += BATCH
        # Every acknowledged write survived the crashes (the journal): that
        # is what flowwarden must deliver.
        written = sorted(d["n"] for d in self.db.c.find({}, {"n": 1, "_id": 0}))
        self.assertEqual(written, list(range(n)))
        # One collection written in order: the last event comes last.
        p.wait_until(lambda: p._reports and p._reports[-1][1]["n"] == n - 1,
                     timeout=120, what="the last event")
        self.assertEqual(p.stop(), 0)
        ns = [r["n"] for r in p.reports()]
        lost = len(set(written) - set(ns))
        duplicates = len(ns) - len(set(ns))
        failures = p.count_log("change stream failed") + p.count_log("cannot open change stream")
        figures("kill_standin", events=n, handled=len(ns), lost=lost, duplicates=duplicates,
                crashes=CRASHES, reopen_attempts=failures,
                opens=p.count_log("change stream open"),
                seconds="%.1f" % (time.monotonic() - started))
        self.assertEqual(lost, 0)


if __name__ == "__main__":
    unittest.main()
