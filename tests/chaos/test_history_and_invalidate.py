"""History lost while running (the stand-in's oplog cap overtakes a slow
stream) and invalidate (the collection dropped under load) (issue 18, the
chaos suite): the declared policy happens, and re-opens stay bounded by the
restart backoff instead of looping hot."""
import threading
import time
import unittest

from chaostest import SCALE, StandInTestCase, figures

CAP = 100

STREAM = """
fw.stream { name = "s", collection = "c",
  checkpoint = { save_every = 1, save_interval = "100ms"%(cp)s },
  restart = { initial_delay = "200ms", max_delay = "1s" },%(extra)s
  on_change = function(ctx)
    local d = ctx:full_document()
    %(busy)s
    report({ op = ctx:operation_type(), n = d and d.n })
  end }
"""
SLOW = "local t = os.clock() + 0.02 while os.clock() < t do end"


def reopen_attempts(p):
    return p.count_log("cannot open change stream") + p.count_log("change stream failed")


class HistoryLostWhileRunning(StandInTestCase):
    standin_args = ("--oplog-max-entries", str(CAP))

    def overtake(self, p):
        """A slow stream reads a first batch; meanwhile more than the oplog
        holds is written, so its next getMore has lost its place."""
        self.db.c.insert_many([{"n": n} for n in range(50)])
        p.wait_reports(1)
        self.db.c.insert_many([{"n": n} for n in range(50, 50 + 3 * CAP)])

    def test_fail_policy_stops_the_stream_without_a_hot_loop(self):
        p = self.run_fw(self.script(STREAM % {"cp": ', on_history_lost = "fail"', "busy": SLOW,
                                                "extra": ""}))
        p.wait_open()
        started = time.monotonic()
        self.overtake(p)
        self.assertEqual(p.wait_exit(timeout=60), 1)
        attempts = reopen_attempts(p)
        figures("history_lost_fail", events=50 + 3 * CAP, handled=len(p.reports()),
                lost="declared(fail)", reopen_attempts=attempts,
                seconds="%.1f" % (time.monotonic() - started))
        self.assertTrue(any("STREAM STOPPED" in m and "history" in m
                            for m in p.messages(level="error")))
        # One failure of the live cursor, at most one more open that finds the
        # history gone (the seen-token fallback may try once more).
        self.assertLessEqual(attempts, 3)

    def test_resume_from_now_policy_goes_on_without_a_hot_loop(self):
        p = self.run_fw(self.script(STREAM % {"cp": ', on_history_lost = "resume_from_now"',
                                              "busy": SLOW, "extra": ""}))
        p.wait_open()
        started = time.monotonic()
        rounds = 2 * SCALE
        for r in range(rounds):
            self.overtake(p)
            p.wait_log("history lost: resuming from now", count=r + 1, timeout=60)
            p.wait_open(r + 2)
        self.db.c.insert_one({"n": -1})
        p.wait_until(lambda: any(x.get("n") == -1 for x in p.reports()), timeout=60,
                     what="the event after the gap")
        attempts = reopen_attempts(p)
        figures("history_lost_resume_from_now", rounds=rounds, handled=len(p.reports()),
                lost="declared(resume_from_now)", reopen_attempts=attempts,
                seconds="%.1f" % (time.monotonic() - started))
        self.assertLessEqual(attempts, 3 * rounds)
        self.assertEqual(p.stop(), 0)


class InvalidateUnderLoad(StandInTestCase):

    def test_drops_under_load_reopen_with_start_after_and_lose_nothing(self):
        self.drops_under_load("", "after invalidate, with startAfter", "invalidate_under_load")

    def test_filtered_out_invalidates_under_load_reopen_and_lose_nothing(self):
        # operation_types without "invalidate": the server closes the cursor
        # without the event (issue 23, section 6); the stream re-opens all the
        # same, with startAfter the invalidate's token.
        self.drops_under_load('\n  operation_types = { "insert" },',
                              "the server closed the change stream",
                              "filtered_invalidate_under_load")

    def drops_under_load(self, extra, reopen_line, name):
        p = self.run_fw(self.script(STREAM % {"cp": "", "busy": "", "extra": extra}))
        p.wait_open()
        drops = 3 * SCALE
        written = []
        stop = threading.Event()

        def writer():
            n = 0
            while not stop.is_set():
                self.db.c.insert_many([{"n": i} for i in range(n, n + 20)])
                written.extend(range(n, n + 20))
                n += 20
                time.sleep(0.01)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        started = time.monotonic()
        for d in range(drops):
            time.sleep(0.5)
            self.db.c.drop()
            p.wait_log(reopen_line, count=d + 1, timeout=30)
        time.sleep(0.5)
        stop.set()
        t.join()
        last = written[-1]
        p.wait_until(lambda: any(r.get("n") == last for r in p.reports()), timeout=60,
                     what="the last event")
        self.assertEqual(p.stop(), 0)
        inserts = [r["n"] for r in p.reports() if r["op"] == "insert"]
        lost = len(set(written) - set(inserts))
        duplicates = len(inserts) - len(set(inserts))
        invalidates = sum(1 for r in p.reports() if r["op"] == "invalidate")
        attempts = reopen_attempts(p)
        figures(name, events=len(written), handled=len(inserts), lost=lost,
                duplicates=duplicates, invalidates=invalidates,
                reopens=p.count_log("change stream open") - 1, reopen_attempts=attempts,
                seconds="%.1f" % (time.monotonic() - started))
        self.assertEqual(lost, 0)
        self.assertEqual(duplicates, 0)
        self.assertEqual(inserts, sorted(inserts))
        self.assertEqual(invalidates, 0 if extra else drops)
        self.assertEqual(p.count_log("after invalidate, with startAfter"), drops)
        self.assertEqual(p.count_log("change stream failed"), 0)
        self.assertEqual(p.count_log("change stream open") - 1, drops)
        self.assertEqual(p.count_log("cannot open change stream"), 0)


if __name__ == "__main__":
    unittest.main()
