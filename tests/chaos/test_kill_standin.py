"""kill -9 of the MongoDB stand-in (persistent journal, --data-dir) and a
restart on the same port, three times while flowwarden reads (issue 18, the
chaos suite): every event written is handled."""
import tempfile
import time
import unittest

from chaostest import SCALE, StandInTestCase, figures

CRASHES = 3 * SCALE
BATCH = 3000            # events written between two crashes

SCRIPT = """
fw.stream { name = "seq", collection = "c",
  checkpoint = { save_every = 100, save_interval = "100ms" },
  restart = { initial_delay = "100ms", max_delay = "500ms" },
  on_insert = function(ctx)
    -- A little work per event, so each crash lands mid-backlog.
    local t = os.clock() + 0.0002 while os.clock() < t do end
    report({ n = ctx:full_document().n })
  end }
"""


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
        p = self.run_fw(self.script(SCRIPT))
        p.wait_open()
        port = self.standin.port
        n = 0
        for crash in range(CRASHES):
            self.db.c.insert_many([{"n": i} for i in range(n, n + BATCH)])
            n += BATCH
            # Mid-stream: part of this batch handled, the rest still to come.
            p.wait_until(lambda: p.report_count() >= n - BATCH // 2, timeout=60,
                         what="half of batch %d" % crash)
            self.assertLess(p.report_count(), n, "the crash came too late to test anything")
            self.standin.kill9()
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
