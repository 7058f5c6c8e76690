"""Checkpoints in _fw_checkpoints: a clean stop loses and repeats nothing, a
kill -9 loses nothing and repeats at most save_every events with
checkpoint.mode = "sync", at most 20 x save_every with "async" (the default;
docs/configuration.md#checkpoint) or, when writes fall behind that, the
events handled within checkpoint.max_unsaved plus save_every, idle streams
keep their seen position fresh (issue 3: runtime behaviour, checkpoints)."""
import json
import signal
import time
import unittest
import urllib.request

from fwtest import needs_standin, StandInTestCase, token_at, within_async_bound

SEQ_STREAM = """
fw.stream { name = "seq", collection = "c",
  checkpoint = { save_every = %(save_every)d, save_interval = "100ms"%(extra_cp)s },
  restart = { initial_delay = "100ms" },
  on_insert = function(ctx)
    local n = ctx:full_document().n
    %(busy)s
    report({ n = n, eid = ctx:event_id() })
  end }
"""

# About 2 ms of work per event, so a kill -9 lands in the middle of a run.
BUSY = "local t = os.clock() + 0.002 while os.clock() < t do end"

# The documented repeat bound after kill -9 is save_every with mode = "sync"
# and, with "async" (saves pipelined behind the handler:
# docs/configuration.md#checkpoint), 20 x save_every or, when writes fall
# behind that, the events handled within max_unsaved plus save_every
# (fwtest.within_async_bound). A test asserts the bound of the mode it runs,
# or it fails at random with the machine's load (issue 25).
SYNC = ', mode = "sync"'


def keeps_bound(extra_cp, save_every, times_ms):
    """Whether the events past the stored checkpoint (their report times, in
    order) keep the bound of the mode extra_cp sets."""
    if extra_cp.startswith(SYNC):
        return len(times_ms) <= save_every
    return within_async_bound(times_ms, save_every)


def seq_script(save_every=1, busy="", extra_cp=""):
    return SEQ_STREAM % {"save_every": save_every, "busy": busy, "extra_cp": extra_cp}


class StopAndRestart(StandInTestCase):

    def insert(self, numbers):
        self.db.c.insert_many([{"n": n} for n in numbers])

    def test_clean_stop_then_restart_repeats_nothing_and_loses_nothing(self):
        script = self.script(seq_script(save_every=7))
        started = time.time()
        p = self.run_fw(script)
        p.wait_open()
        self.insert(range(0, 50))
        first = p.wait_reports(50)
        self.assertEqual(p.stop(), 0)
        cp = self.checkpoint("seq")
        # The final checkpoint names the last handled event, though 50 is not
        # a multiple of save_every.
        self.assertEqual(cp["lastProcessedToken"]["_data"], first[-1]["eid"])
        self.assertIn("lastSeenToken", cp)
        self.assertIn("updatedAt", cp)
        # Each run claims a writer generation before its first save (the first: the time
        # in ms, each later start one more), so a late write of an earlier run never
        # lands over a later run's (operations.md).
        first_gen = cp["writerGen"]
        self.assertGreater(first_gen, int((started - 60) * 1000))
        self.assertLessEqual(first_gen, int(time.time() * 1000) + 1)

        self.insert(range(50, 80))          # written while flowwarden is down
        p2 = self.run_fw(script)
        p2.wait_open()
        p2.wait_reports(30)
        self.insert([80])                   # anything redelivered comes before it
        second = p2.wait_reports(31)
        self.assertEqual([r["n"] for r in first], list(range(50)))
        self.assertEqual([r["n"] for r in second], list(range(50, 81)))
        self.assertEqual(p2.stop(), 0)
        self.assertEqual(len(p2.reports()), 31)
        self.assertEqual(self.checkpoint("seq")["writerGen"], first_gen + 1)

    def test_kill9_then_restart_loses_nothing_and_repeats_at_most_save_every(self):
        self.kill9_then_restart(save_every=10, extra_cp=SYNC)

    def test_async_kill9_then_restart_loses_nothing_and_repeats_within_the_async_bound(self):
        self.kill9_then_restart(save_every=10, extra_cp="")

    def kill9_then_restart(self, save_every, extra_cp):
        script = self.script(seq_script(save_every=save_every, busy=BUSY, extra_cp=extra_cp))
        p = self.run_fw(script)
        p.wait_open()
        self.insert(range(300))
        p.wait_reports(120)
        p.kill9()
        first = p.reports()
        first_ms = {r["n"]: t for t, r in p.report_times()}
        self.assertLess(len(first), 300, "the kill came too late to test anything")

        p2 = self.run_fw(script)
        p2.wait_open()
        seen = {r["n"] for r in first}
        p2.wait_until(lambda: seen.union(r["n"] for r in p2.reports()) >= set(range(300)),
                      what="every event after the restart")
        self.insert([300])
        p2.wait_until(lambda: any(r["n"] == 300 for r in p2.reports()), what="the sentinel")
        second = p2.reports()
        first_ids = {r["n"]: r["eid"] for r in first}

        # Nothing lost, in order, and the replay starts after the checkpoint.
        self.assertEqual(sorted(seen.union(r["n"] for r in second)), list(range(301)))
        ns = [r["n"] for r in second]
        self.assertEqual(ns, list(range(ns[0], 301)))
        repeated = [r for r in second if r["n"] in first_ids]
        self.assertTrue(keeps_bound(extra_cp, save_every, [first_ms[r["n"]] for r in repeated]),
                        "%d events repeated" % len(repeated))
        # A replayed event has the same event id as the first time.
        for r in repeated:
            self.assertEqual(r["eid"], first_ids[r["n"]])
        self.assertEqual(p2.stop(), 0)

    def test_sync_checkpoint_keeps_up_while_running(self):
        self.checkpoint_keeps_up(save_every=5, extra_cp=SYNC)

    def test_async_checkpoint_keeps_up_while_running(self):
        self.checkpoint_keeps_up(save_every=5, extra_cp="")

    def checkpoint_keeps_up(self, save_every, extra_cp):
        """While the stream runs (not only at its stop), the stored checkpoint is
        never further behind the handled events than the documented bound: the
        kill -9 tests would not see a checkpoint that lags and catches up at the
        final save. No save_interval: only save_every moves it."""
        script = self.script(seq_script(save_every=save_every, busy=BUSY,
                                        extra_cp=extra_cp + ', save_interval = "1h"'))
        total = 400
        p = self.run_fw(script)
        p.wait_open()
        self.insert(range(total))
        p.wait_reports(1)
        samples = 0
        deadline = time.monotonic() + 60
        while p.report_count() < total:
            self.assertLess(time.monotonic(), deadline, "the stream did not handle every event")
            handled = p.report_times()       # read first: the lag is never overstated
            cp = self.checkpoint("seq")
            if not cp or "lastProcessedToken" not in cp:
                continue
            # The checkpoint may name an event handled after the first read, or
            # whose report line is still on its way through the pipe.
            eid = cp["lastProcessedToken"]["_data"]
            p.wait_until(lambda: any(r["eid"] == eid for r in p.reports()),
                         what="the report of the checkpoint's event")
            stored = next(r["n"] for r in p.reports() if r["eid"] == eid)
            past = [t for t, r in handled if r["n"] > stored]   # handled in n order
            self.assertTrue(keeps_bound(extra_cp, save_every, past),
                            "stored checkpoint %d events behind" % len(past))
            samples += 1
        self.assertGreater(samples, 3, "the run ended before the checkpoint was sampled")
        self.assertEqual(p.stop(), 0)

    def test_kill9_with_save_every_1_repeats_at_most_one_event(self):
        self.kill9_with_save_every_1(extra_cp=SYNC)

    def test_async_kill9_with_save_every_1_repeats_within_the_async_bound(self):
        self.kill9_with_save_every_1(extra_cp="")

    def kill9_with_save_every_1(self, extra_cp):
        script = self.script(seq_script(save_every=1, busy=BUSY, extra_cp=extra_cp))
        p = self.run_fw(script)
        p.wait_open()
        self.insert(range(200))
        p.wait_reports(60)
        p.kill9()
        first = p.reports()
        first_ms = {r["n"]: t for t, r in p.report_times()}
        p2 = self.run_fw(script)
        p2.wait_open()
        have = {r["n"] for r in first}
        p2.wait_until(lambda: have.union(r["n"] for r in p2.reports()) >= set(range(200)),
                      what="every event after the restart")
        repeated = [r["n"] for r in p2.reports() if r["n"] in have]
        self.assertTrue(keeps_bound(extra_cp, 1, [first_ms[n] for n in repeated]), repeated)

    def test_kill9_of_a_new_stream_before_its_first_save_loses_nothing(self):
        # Regression (fixed in src/runtime/stream/stream_worker.c, worker_main/consume): a stream with no
        # checkpoint starts "from now" but does not save that position when
        # its change stream opens; the first save waits for save_interval (or
        # an event and save_every). A crash before then leaves no checkpoint,
        # so the restart starts "from now" again and everything written while
        # it was down is lost.
        script = self.script(seq_script(save_every=10).replace(
            'save_interval = "100ms"', 'save_interval = "1h"'))
        p = self.run_fw(script)
        p.wait_open()
        p.kill9()
        self.insert(range(3))               # while it is down
        p2 = self.run_fw(script)
        p2.wait_open()
        self.insert([3])
        p2.wait_until(lambda: any(r["n"] == 3 for r in p2.reports()), what="the last event")
        self.assertEqual([r["n"] for r in p2.reports()], [0, 1, 2, 3])

    def run_then_stop(self, script, numbers):
        p = self.run_fw(script)
        p.wait_open()
        self.insert(numbers)
        p.wait_reports(len(numbers))
        self.assertEqual(p.stop(), 0)
        return self.checkpoint("seq")

    def starts_from_now(self, script, before):
        """A run of script begins from start_position ("resume" without a position:
        from now): nothing written before it comes, what comes after does, and
        nothing is refused or failed."""
        p = self.run_fw(script)
        p.wait_open()
        self.assertIn("from now", " ".join(p.messages()))
        self.insert([100])
        self.assertEqual([r["n"] for r in p.wait_reports(1)], [100])
        self.assertEqual(p.stop(), 0)
        self.assertEqual([r["n"] for r in p.reports()], [100], before)
        self.assertEqual(p.messages(level="error"), [])
        self.assertEqual(p.messages(level="warn"), [])
        return self.checkpoint("seq")

    def test_a_checkpoint_without_a_position_starts_as_configured(self):
        # A run killed between its writer generation's claim and its first save
        # leaves a checkpoint with writerGen and no token: the next start begins
        # from start_position, and claims past it.
        script = self.script(seq_script())
        self.db["_fw_checkpoints"].insert_one({"_id": "seq", "writerGen": 41})
        self.insert([0, 1])                 # before the start: not delivered
        cp = self.starts_from_now(script, "written before the start")
        self.assertEqual(cp["writerGen"], 42)
        self.assertIn("lastProcessedToken", cp)

    def test_a_reset_by_hand_starts_from_start_position(self):
        # docs/operations.md "Setting or resetting a checkpoint by hand": the tokens
        # unset and writerGen raised in one update (no earlier run's late write lands
        # after it); the next start begins from start_position and claims past it.
        script = self.script(seq_script())
        gen = self.run_then_stop(script, [0, 1])["writerGen"]
        self.db["_fw_checkpoints"].update_one(
            {"_id": "seq"}, {"$unset": {"lastProcessedToken": "", "lastSeenToken": ""},
                             "$inc": {"writerGen": 1}})
        self.insert([2, 3])                 # while down: skipped, as after a first start
        cp = self.starts_from_now(script, "written before the reset's start")
        self.assertEqual(cp["writerGen"], gen + 2)

    def test_a_deleted_checkpoint_starts_from_start_position_past_its_generation(self):
        # Deleting the document drops its generation: the next claim is the time in
        # ms, past every generation an earlier run could still write with.
        script = self.script(seq_script())
        self.db["_fw_checkpoints"].insert_one({"_id": "seq", "writerGen": 7})
        gen = self.run_then_stop(script, [0])["writerGen"]
        self.assertEqual(gen, 8)
        self.db["_fw_checkpoints"].delete_one({"_id": "seq"})
        self.insert([1])
        started = time.time()
        cp = self.starts_from_now(script, "written before the delete's start")
        self.assertGreater(cp["writerGen"], gen)
        self.assertGreaterEqual(cp["writerGen"], int(started * 1000) - 1000)

    def test_a_paused_async_run_replaced_by_a_newer_one_stops_its_stream_once(self):
        self.paused_run_replaced("")

    def test_a_paused_sync_run_replaced_by_a_newer_one_stops_its_stream_once(self):
        self.paused_run_replaced(SYNC)

    def processed_token(self):
        cp = self.checkpoint("seq") or {}
        return cp.get("lastProcessedToken", {}).get("_data")

    def paused_run_replaced(self, extra_cp):
        # Without ha, a process paused (SIGSTOP: a stalled VM) and replaced by a
        # new run, which claims a later writer generation. Resumed, the old run's
        # save is refused (the checkpoint stays the new run's): its stream stops
        # with one line naming it and why, instead of trying again every second,
        # and its health and exit summary say so.
        script = self.script(seq_script(extra_cp=extra_cp))
        old = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        old.wait_open()
        port = old.admin_port()
        self.insert([0])
        first = old.wait_reports(1)[0]["eid"]
        old.wait_until(lambda: self.processed_token() == first, what="the old run's checkpoint")
        old.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: old.proc.poll() is None and old.proc.send_signal(signal.SIGCONT))
        new = self.run_fw(script)
        new.wait_open()
        self.insert([1])
        eid = new.wait_reports(1)[0]["eid"]
        new.wait_until(lambda: self.processed_token() == eid, what="the new run's checkpoint")
        gen = self.checkpoint("seq")["writerGen"]
        old.proc.send_signal(signal.SIGCONT)  # its change stream hands it event 1 too
        old.wait_log('STREAM STOPPED: checkpoint of stream "seq" NOT saved: a newer run of the '
                     "stream (writer generation %d" % gen, stream="seq")
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/streams/seq" % port,
                                    timeout=30) as r:
            health = json.loads(r.read().decode())
        self.assertEqual(health["state"], "failed")
        self.assertIn("a newer run of the stream", health["reason"])
        self.assertEqual(new.stop(), 0)
        self.assertEqual(self.checkpoint("seq")["writerGen"], gen)
        self.assertEqual(self.processed_token(), eid)
        old.stop()
        self.assertEqual(old.count_log("NOT saved"), 1, old.messages())
        self.assertEqual(old.count_log("will try again"), 0)
        old.wait_log("(stream stopped on an error)", stream="seq")

    def test_start_position_latest_ignores_the_saved_checkpoint(self):
        resume = self.script(seq_script())
        latest = self.script(seq_script(extra_cp=', start_position = "latest"'), "latest.lua")
        p = self.run_fw(resume)
        p.wait_open()
        self.insert([0])
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)
        self.insert([1, 2])                 # while down: "latest" skips these
        p2 = self.run_fw(latest)
        p2.wait_open()
        self.assertIn("from now", " ".join(p2.messages()))
        self.insert([3])
        self.assertEqual([r["n"] for r in p2.wait_reports(1)], [3])
        self.assertEqual(p2.stop(), 0)
        self.assertEqual([r["n"] for r in p2.reports()], [3])


@needs_standin("command log (--log)")
class IdleStop(StandInTestCase):
    command_log = True

    def test_clean_stop_while_idle_then_restart_loses_nothing(self):
        # No event at all in the first run: the position the stream read to
        # (the server's post-batch token) is saved at shutdown, and the
        # restarted stream resumes there.
        script = self.script(seq_script().replace('save_interval = "100ms"',
                                                  'save_interval = "1h"'))
        p = self.run_fw(script)
        p.wait_open()
        # Stop while the stream waits in a getMore (not before it asked).
        self.wait_for(lambda: self.commands("getMore"), what="the stream's first getMore")
        self.assertEqual(p.stop(), 0)
        cp = self.checkpoint("seq")
        self.assertIsNotNone(cp, "no checkpoint written for an idle stream at shutdown")
        self.assertIn("lastSeenToken", cp)
        self.db.c.insert_many([{"n": n} for n in range(5)])
        p2 = self.run_fw(script)
        self.assertEqual([r["n"] for r in p2.wait_reports(5)], list(range(5)))
        self.assertIn("from its checkpoint", " ".join(p2.messages()))


class SeenPosition(StandInTestCase):

    def test_idle_stream_moves_its_seen_token_past_unrelated_writes(self):
        p = self.run_fw(self.script(seq_script()))
        p.wait_open()
        self.db.c.insert_one({"n": 0})
        (first,) = p.wait_reports(1)
        cp = self.wait_checkpoint("seq", lambda cp: cp.get("lastProcessedToken", {}).get("_data") == first["eid"])
        # Writes the stream does not watch: no event, but the server's
        # post-batch resume token moves and the seen token follows it.
        with self.client.start_session() as s:
            self.db.other.insert_many([{"x": i} for i in range(5)], session=s)
            after = token_at(s.operation_time)
        cp = self.wait_checkpoint("seq", lambda cp: cp["lastSeenToken"]["_data"] >= after,
                                  what="lastSeenToken to pass the unrelated writes")
        self.assertEqual(cp["lastProcessedToken"]["_data"], first["eid"])
        self.assertGreater(cp["lastSeenToken"]["_data"], cp["lastProcessedToken"]["_data"])
        self.assertEqual(len(p.reports()), 1)
        self.assertEqual(p.stop(), 0)

    def test_processed_token_follows_save_every(self):
        p = self.run_fw(self.script(seq_script(save_every=5).replace(
            'save_interval = "100ms"', 'save_interval = "1h"')))
        p.wait_open()
        self.db.c.insert_many([{"n": n} for n in range(12)])
        reps = p.wait_reports(12)
        # Saved after the 5th and the 10th event; the 11th and 12th wait for
        # the next save (or the shutdown).
        self.wait_checkpoint("seq", lambda cp: cp.get("lastProcessedToken", {}).get("_data")
                             == reps[9]["eid"], what="the checkpoint at event 10")
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.checkpoint("seq")["lastProcessedToken"]["_data"], reps[11]["eid"])


@needs_standin("--latency-ms: every reply 5 ms late")
class OverANetwork(StandInTestCase):
    """Checkpoint writes of a round trip of 5 ms while a backlog drains with
    save_every = 1 (the default): more than 19 saves can wait for a write, and
    the handler goes on while the newest stored one is younger than
    max_unsaved. A kill -9 then loses nothing, the repeat comes first and in
    order, and it keeps the async bound (fwtest.within_async_bound)."""

    standin_args = ("--latency-ms", "5")

    def test_async_kill9_while_catching_up_keeps_the_bound(self):
        total = 4000
        script = self.script(seq_script(save_every=1))
        p = self.run_fw(script)
        p.wait_open()
        self.insert_backlog(total)
        p.wait_until(lambda: p.report_count() >= total // 4, what="a quarter of the backlog")
        p.kill9()
        first = p.reports()
        first_ms = {r["n"]: t for t, r in p.report_times()}
        self.assertLess(len(first), total, "the kill came too late to test anything")
        p2 = self.run_fw(script)
        have = {r["n"] for r in first}
        p2.wait_until(lambda: have.union(r["n"] for r in p2.reports()) >= set(range(total)),
                      what="every event after the restart")
        self.assertEqual(p2.stop(), 0)
        ns = [r["n"] for r in p2.reports()]
        self.assertEqual(ns, list(range(ns[0], total)))
        repeated = [n for n in ns if n in have]
        self.assertEqual(repeated, ns[:len(repeated)])
        times = [first_ms[n] for n in repeated]
        self.assertTrue(within_async_bound(times, 1),
                        "%d events repeated, handled over %.0f ms"
                        % (len(repeated), times[-1] - times[0] if times else 0))

    def insert_backlog(self, total):
        for lo in range(0, total, 1000):
            self.db.c.insert_many([{"n": n} for n in range(lo, min(lo + 1000, total))])


if __name__ == "__main__":
    unittest.main()
