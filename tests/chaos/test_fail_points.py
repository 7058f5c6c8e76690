"""Server and network failures injected with the stand-in's fail points while
a stream runs (issue 18, the chaos suite): a getMore whose connection is
closed, every resumable error code of the change-stream spec, the DLQ insert
failing 5 times in a row, the checkpoint write failing, a 10 s network stall.
Each: nothing lost, no gap, and the checkpoint never ahead of what was
handled or dead-lettered."""
import datetime
import threading
import time
import unittest

from chaostest import SCALE, StandInTestCase, figures

# Every event is reported; events with bad = true fail and go to the DLQ
# (one attempt). The DLQ lives on its own connection, whose application name
# (flowwarden-io) lets a fail point hit DLQ writes and not checkpoints
# (written by the runtime's pool, application name flowwarden).
SCRIPT = """
fw.connection { name = "dlqconn", uri = "%(uri)s" }
fw.stream { name = "s", collection = "c",
  checkpoint = { save_every = %(save_every)d, save_interval = "100ms" },
  restart = { initial_delay = "100ms", max_delay = "400ms" },
  retry = false,
  dlq = { connection = "dlqconn" },
  on_insert = function(ctx)
    local d = ctx:full_document()
    report({ n = d.n, eid = ctx:event_id() })
    if d.bad then error(fw.error("Validation", "bad event " .. d.n)) end
  end }
"""

# The resumable codes of the change-stream spec's resumable-error list
# (MongoDB 4.4+ sends them with the ResumableChangeStreamError label).
RESUMABLE_CODES = [6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436,
                   63, 150, 13388, 234, 133]


def parse_ts(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


class CheckpointWatch:
    """Reads the checkpoint, then the DLQ's event ids, every few ms, so each
    sample says which events had reached the DLQ when that checkpoint was
    already written."""

    def __init__(self, test):
        self.test = test
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                cp = self.test.checkpoint("s")
                if cp and "lastProcessedToken" in cp:
                    dlq = {e["eventId"] for e in self.test.db["_fw_dlq"].find({}, {"eventId": 1})}
                    self.samples.append((cp["lastProcessedToken"]["_data"], cp["updatedAt"], dlq))
            except Exception:   # noqa: BLE001  (the server may be stalled by the test)
                pass
            time.sleep(0.01)

    def stop(self):
        self._stop.set()
        self._thread.join()


class FailPoints(StandInTestCase):

    def start(self, save_every=1):
        self.bad = set()
        self.next_n = 0
        p = self.run_fw(self.script(SCRIPT % {"uri": self.uri, "save_every": save_every}))
        p.wait_open()
        self.watch = CheckpointWatch(self)
        return p

    def write(self, count, bad_every=0):
        docs = []
        for n in range(self.next_n, self.next_n + count):
            bad = bool(bad_every) and n % bad_every == bad_every - 1
            if bad:
                self.bad.add(n)
            docs.append({"n": n, "bad": bad})
        self.next_n += count
        self.db.c.insert_many(docs)

    def last_n(self, p):
        return p._reports[-1][1]["n"] if p._reports else -1

    def wait_handled(self, p, timeout=60):
        last = self.next_n - 1
        p.wait_until(lambda: self.last_n(p) >= last, timeout, "event %d" % last)

    def finish(self, p, scenario, **extra):
        """Stops flowwarden and checks: every event handled once and in
        order, every bad one in the DLQ, every checkpoint sample behind what
        was handled or dead-lettered when it was read."""
        self.write(1)      # a duplicate or a late event would come before it
        self.wait_handled(p)
        self.assertEqual(p.stop(), 0)
        self.watch.stop()
        reps = p.reports()
        ns = [r["n"] for r in reps]
        lost = len(set(range(self.next_n)) - set(ns))
        duplicates = len(ns) - len(set(ns))
        gaps = sum(1 for a, b in zip(ns, ns[1:]) if b != a + 1)
        # When each event was reported (inside its handler, so before the
        # handler returned) and its id.
        ts_of, eid_of = {}, {}
        report_recs = [x for x in p.records if str(x.get("msg", "")).startswith("REPORT ")]
        for rec, (_, r) in zip(report_recs, p._reports):
            ts_of.setdefault(r["eid"], parse_ts(rec["ts"]))
            eid_of[r["n"]] = r["eid"]
        dlq = {e["eventId"] for e in self.db["_fw_dlq"].find({}, {"eventId": 1})}
        bad_eids = sorted(eid_of[n] for n in self.bad)
        ahead = 0
        for token, updated_at, dlq_then in self.watch.samples:
            # The named event was reported no later than the save (both times
            # from the flowwarden process's clock, in ms; 1 ms for rounding)
            # and every bad event up to it was in the DLQ.
            saved = updated_at.replace(tzinfo=None) + datetime.timedelta(milliseconds=1)
            if token not in ts_of or ts_of[token] > saved:
                ahead += 1
            ahead += sum(1 for e in bad_eids if e <= token and e not in dlq_then)
        values = figures(scenario, events=self.next_n, handled=len(ns), lost=lost,
                         duplicates=duplicates, gaps=gaps, dead_lettered=len(dlq),
                         checkpoint_samples=len(self.watch.samples), checkpoint_ahead=ahead,
                         **extra)
        self.assertEqual(lost, 0)
        self.assertEqual(gaps, 0)
        self.assertEqual(duplicates, 0)
        self.assertEqual(dlq, set(bad_eids))
        self.assertGreater(len(self.watch.samples), 0)
        self.assertEqual(ahead, 0)
        self.assertEqual(self.checkpoint("s")["lastProcessedToken"]["_data"], reps[-1]["eid"])
        return values

    def test_close_connection_on_get_more(self):
        p = self.start()
        fired = 0
        for _ in range(5 * SCALE):
            self.write(200, bad_every=50)
            self.wait_handled(p)
            self.fail_point({"times": 1}, {"failCommands": ["getMore"], "closeConnection": True,
                                           "appName": "flowwarden"})
            for _ in range(2):      # see test_every_resumable_error_code
                self.write(1)
                self.wait_handled(p)
            fired += self.fail_point("off")["count"]
        self.finish(p, "close_connection_on_get_more", fired=fired,
                    reopen_attempts=p.count_log("change stream failed"))
        self.assertEqual(fired, 5 * SCALE)

    def test_every_resumable_error_code(self):
        p = self.start()
        fired = []
        for _ in range(SCALE):
            for code in RESUMABLE_CODES:
                self.write(50, bad_every=25)
                self.wait_handled(p)
                self.fail_point({"times": 1}, {
                    "failCommands": ["getMore"], "errorCode": code,
                    "errorLabels": ["ResumableChangeStreamError"], "appName": "flowwarden"})
                # The getMore waiting when the fail point was set is not
                # failed; the first one sent after it is. Two events, each
                # waited for, make sure one such getMore was sent (and that
                # the stream resumed after it).
                for _ in range(2):
                    self.write(1)
                    self.wait_handled(p)
                if self.fail_point("off")["count"] == 1:
                    fired.append(code)
        self.finish(p, "resumable_error_codes", codes=len(RESUMABLE_CODES), fired=len(fired),
                    reopen_attempts=p.count_log("change stream failed"))
        self.assertEqual(sorted(fired), sorted(RESUMABLE_CODES * SCALE))

    def test_dlq_insert_failing_5_times_in_a_row(self):
        p = self.start()
        for _ in range(SCALE):
            self.write(100)
            self.wait_handled(p)
            self.fail_point({"times": 5}, {"failCommands": ["insert", "update"], "errorCode": 2,
                                           "errorLabels": [], "appName": "flowwarden-io"})
            self.write(100, bad_every=50)
            self.wait_handled(p)
            p.wait_until(lambda: self.db["_fw_dlq"].count_documents({}) >= len(self.bad),
                         timeout=30, what="the DLQ entries")
            self.assertEqual(self.fail_point("off")["count"], 5)
        failures = p.count_log("DLQ insert for event")
        self.finish(p, "dlq_insert_failing", dlq_insert_failures=failures)
        self.assertEqual(failures, 5 * SCALE)

    def test_checkpoint_write_failing(self):
        p = self.start(save_every=10)
        for _ in range(SCALE):
            self.write(100, bad_every=40)
            self.wait_handled(p)
            self.fail_point({"times": 10}, {"failCommands": ["update"], "errorCode": 2,
                                            "errorLabels": [], "appName": "flowwarden"})
            self.write(300, bad_every=40)
            self.wait_handled(p)
            self.wait_for(lambda: p.count_log("cannot save checkpoint") >= 10,
                          what="10 failed checkpoint writes")
            self.fail_point("off")
        failures = p.count_log("cannot save checkpoint")
        self.finish(p, "checkpoint_write_failing", checkpoint_write_failures=failures)

    def test_ten_second_network_stall(self):
        p = self.start()
        stalls = []
        for _ in range(SCALE):
            self.write(200, bad_every=50)
            self.wait_handled(p)
            self.fail_point({"times": 1}, {"failCommands": ["getMore"], "blockConnection": True,
                                           "blockTimeMS": 10000, "appName": "flowwarden"})
            # The getMore in flight (the reader asks for the next batch while
            # the handler works) returns this one event; the next one, asked
            # before any later write can be read, is the one that stalls.
            # (Rarely no getMore is in flight: the stall then holds this event.)
            t0 = time.monotonic()
            self.write(1)
            self.wait_handled(p)
            if time.monotonic() - t0 < 5:
                t0 = time.monotonic()
                before = p.report_count()
                self.write(200, bad_every=50)   # written during the stall
                time.sleep(0.5)
                self.assertEqual(p.report_count(), before, "the stall did not hold the stream")
                self.wait_handled(p, timeout=60)
            stalls.append(time.monotonic() - t0)
            self.assertEqual(self.fail_point("off")["count"], 1)
        self.finish(p, "network_stall_10s", stall_seconds="%.1f" % max(stalls),
                    reopen_attempts=p.count_log("change stream failed"))


if __name__ == "__main__":
    unittest.main()
