"""Change streams that die come back without a gap or a duplicate: network
errors, labelled and unlabelled server errors, invalidate after a drop, lost
history; one stream's trouble never stops another (issue 3: restart loop,
history lost, isolation)."""
import os
import signal
import tempfile
import time
import unittest

from fwtest import needs_standin, StandInTestCase, token_at

# A stream over collection `coll` reporting {s = stream, n = fullDocument.n,
# op, eid} for every event; `extra` is more Lua fields of the declaration.
STREAM = """
fw.stream { name = "%(name)s", collection = "%(coll)s",
  checkpoint = { save_interval = "100ms"%(cp)s },
  restart = { initial_delay = "100ms", max_delay = "200ms" },%(extra)s
  on_change = function(ctx)
    local d = ctx:full_document()
    report({ s = ctx:stream_name(), op = ctx:operation_type(), n = d and d.n,
             eid = ctx:event_id() })
    %(body)s
  end }
"""


def stream(name="s", coll="c", cp="", extra="", body=""):
    return STREAM % {"name": name, "coll": coll, "cp": cp, "extra": extra, "body": body}


def numbers(reports, op="insert"):
    return [r["n"] for r in reports if r["op"] == op]


class MidStreamErrors(StandInTestCase):

    def run_through_failure(self, configure, inserts_before=20, inserts_after=20):
        """Runs one stream, lets `configure()` break its change stream after
        `inserts_before` events, then writes more: every event exactly once."""
        p = self.run_fw(self.script(stream()))
        p.wait_open()
        self.db.c.insert_many([{"n": n} for n in range(inserts_before)])
        p.wait_reports(inserts_before)
        configure()
        total = inserts_before + inserts_after
        for n in range(inserts_before, total):
            self.db.c.insert_one({"n": n})
        p.wait_reports(total)
        self.db.c.insert_one({"n": total})  # a duplicate would arrive before it
        p.wait_reports(total + 1)
        self.assertEqual(numbers(p.reports()), list(range(total + 1)))
        return p

    @needs_standin("fault injection (failCommand closeConnection)")
    def test_close_connection_during_get_more_resumes_without_gap_or_duplicate(self):
        p = self.run_through_failure(lambda: self.fail_point(
            {"times": 1}, {"failCommands": ["getMore"], "closeConnection": True,
                           "appName": "flowwarden"}))
        fired = self.fail_point("off")
        self.assertEqual(fired["count"], 1, "the fail point never fired")
        self.assertEqual(p.stop(), 0)

    @needs_standin("fault injection (failCommand on getMore)")
    def test_unlabelled_resumable_code_on_get_more_reopens_without_gap_or_duplicate(self):
        # HostUnreachable (6) from failCommand carries no ResumableChangeStreamError label:
        # mongod fails the getMore before checking its cursor out, so it cannot see a change
        # stream (error_labels.cpp, isResumableChangeStreamError; SERVER-46091). libmongoc
        # (4.4+ servers) resumes on the label only, so the stream's own restart loop
        # re-opens it from the last position it read. A server-labelled error is
        # test_cursor_killed_after_checkout_resumes_without_gap_or_duplicate.
        p = self.run_through_failure(lambda: self.fail_point(
            {"times": 1}, {"failCommands": ["getMore"], "errorCode": 6,
                           "appName": "flowwarden"}))
        self.assertEqual(self.fail_point("off")["count"], 1)
        self.assertGreaterEqual(p.count_log("change stream failed"), 1)
        self.assertEqual(p.stop(), 0)

    @needs_standin("fault injection (failCommand on getMore)")
    def test_explicitly_labelled_get_more_error_resumes_without_gap_or_duplicate(self):
        p = self.run_through_failure(lambda: self.fail_point(
            {"times": 1}, {"failCommands": ["getMore"], "errorCode": 2,
                           "errorLabels": ["ResumableChangeStreamError"],
                           "appName": "flowwarden"}))
        self.assertEqual(self.fail_point("off")["count"], 1)
        self.assertEqual(p.stop(), 0)

    @needs_standin("fault injection (failGetMoreAfterCursorCheckout)")
    def test_cursor_killed_after_checkout_resumes_without_gap_or_duplicate(self):
        p = self.run_through_failure(lambda: self.fail_point(
            {"times": 1}, {"errorCode": 91}, name="failGetMoreAfterCursorCheckout"))
        self.assertEqual(self.fail_point("off", name="failGetMoreAfterCursorCheckout")["count"], 1)
        self.assertEqual(p.stop(), 0)

    @needs_standin("fault injection (failCommand on getMore)")
    def test_non_resumable_error_reopens_with_backoff_without_gap_or_duplicate(self):
        # No label: libmongoc gives up, the stream's restart loop re-opens it
        # from the last position it read.
        p = self.run_through_failure(lambda: self.fail_point(
            {"times": 1}, {"failCommands": ["getMore"], "errorCode": 2, "errorLabels": [],
                           "appName": "flowwarden"}))
        self.assertEqual(self.fail_point("off")["count"], 1)
        self.assertGreaterEqual(p.count_log("change stream failed"), 1)
        self.assertGreaterEqual(p.count_log("re-opening the change stream in"), 1)
        self.assertEqual(p.stop(), 0)

    @needs_standin("fault injection (failCommand on getMore)")
    def test_error_before_the_first_event_does_not_lose_what_follows(self):
        # Regression (fixed in src/runtime/stream/stream_worker.c, consume/worker_main): a stream started
        # "from now" whose first getMore fails with a non-resumable error
        # has not stored any position yet (the aggregate's post-batch token
        # is only taken on the idle path, which an error skips), so it is
        # re-opened "from now" again and every event written between the
        # first open and the re-open is lost.
        p = self.run_fw(self.script(stream().replace(
            'restart = { initial_delay = "100ms", max_delay = "200ms" }',
            'restart = { initial_delay = "1500ms" }')))
        self.fail_point({"times": 1}, {"failCommands": ["getMore"], "errorCode": 2,
                                       "errorLabels": [], "appName": "flowwarden"})
        p.wait_log("change stream failed")
        self.assertEqual(p.count_log("change stream open"), 1)
        self.db.c.insert_many([{"n": n} for n in range(5)])   # before the re-open
        p.wait_open(2)
        self.db.c.insert_one({"n": 5})
        p.wait_reports(1)
        self.db.c.insert_one({"n": 6})
        p.wait_until(lambda: any(r["n"] == 6 for r in p.reports()), what="the last event")
        self.assertEqual(numbers(p.reports()), list(range(7)))

    @needs_standin("fault injection (failCommand on aggregate)")
    def test_stream_keeps_retrying_while_the_server_refuses_to_open_it(self):
        # aggregate fails three times: the stream backs off and opens on the
        # fourth try, then delivers what was written meanwhile.
        self.fail_point({"times": 3}, {"failCommands": ["aggregate"], "errorCode": 2,
                                       "errorLabels": [], "appName": "flowwarden"})
        p2 = self.run_fw(self.script(stream()))
        p2.wait_log("re-opening the change stream in", 3)
        p2.wait_open()
        self.db.c.insert_one({"n": 7})
        self.assertEqual(numbers(p2.wait_reports(1)), [7])
        self.assertEqual(p2.count_log("cannot open change stream"), 3)


    @needs_standin("fault injection (failCommand on aggregate)")
    def test_stream_stops_after_restart_max_attempts_and_the_process_exits_1(self):
        self.fail_point("alwaysOn", {"failCommands": ["aggregate"], "errorCode": 2,
                                     "errorLabels": [], "appName": "flowwarden"})
        p = self.run_fw(self.script(stream(extra=" restart = { max_attempts = 2, "
                                                 'initial_delay = "100ms" },')
                                    .replace('  restart = { initial_delay = "100ms", '
                                             'max_delay = "200ms" },', "")))
        self.assertEqual(p.wait_exit(timeout=20), 1)
        self.assertEqual(p.count_log("cannot open change stream"), 3)
        self.assertTrue(any("STREAM STOPPED" in m and "max_attempts" in m
                            for m in p.messages(level="error")))


class Invalidate(StandInTestCase):

    def test_drop_invalidates_and_the_stream_reopens_with_start_after(self):
        p = self.run_fw(self.script(stream()))
        p.wait_open()
        self.db.c.insert_one({"n": 1})
        p.wait_reports(1)
        self.db.c.drop()
        reps = p.wait_reports(3)
        self.assertEqual([r["op"] for r in reps], ["insert", "drop", "invalidate"])
        p.wait_log("after invalidate, with startAfter")
        p.wait_open(2)
        self.db.c.insert_one({"n": 2})      # recreates the collection
        self.db.c.insert_one({"n": 3})
        reps = p.wait_reports(5)
        self.assertEqual([(r["op"], r["n"]) for r in reps[3:]], [("insert", 2), ("insert", 3)])
        # startAfter, not resumeAfter (which refuses an invalidate token).
        self.assertEqual(p.count_log("cannot open change stream"), 0)
        self.assertEqual(p.stop(), 0)
        # The checkpoint is past the invalidate: a restart neither replays it
        # nor fails on it.
        p2 = self.run_fw(self.script(stream()))
        p2.wait_open()
        self.db.c.insert_one({"n": 4})
        self.assertEqual([(r["op"], r["n"]) for r in p2.wait_reports(1)], [("insert", 4)])

    def test_restart_from_a_checkpoint_at_an_invalidate(self):
        # Stopped right after the invalidate: the saved token is the
        # invalidate's, which only startAfter accepts.
        p = self.run_fw(self.script(stream()))
        p.wait_open()
        self.db.c.insert_one({"n": 1})
        self.db.c.drop()
        reps = p.wait_reports(3)
        self.assertEqual(p.stop(), 0)
        self.assertEqual(self.checkpoint("s")["lastProcessedToken"]["_data"], reps[2]["eid"])
        self.db.c.insert_one({"n": 2})
        p2 = self.run_fw(self.script(stream()))
        self.assertEqual([(r["op"], r["n"]) for r in p2.wait_reports(1)], [("insert", 2)])
        self.assertEqual(p2.count_log("cannot open change stream"), 0)


    def test_a_filtered_out_invalidate_still_reopens_the_stream(self):
        # operation_types without "invalidate": the server closes the cursor
        # (id 0, the invalidate's token as postBatchResumeToken) and libmongoc
        # reports neither an event nor an error (issue 23, section 6).
        self.filtered_invalidate('\n  operation_types = { "insert", "update" },')

    def test_a_filtered_out_invalidate_reopens_a_stream_with_lanes(self):
        self.filtered_invalidate('\n  operation_types = { "insert", "update" }, lanes = 2,')

    def filtered_invalidate(self, extra):
        p = self.run_fw(self.script(stream(extra=extra)))
        p.wait_open()
        self.db.c.insert_one({"n": 1})
        p.wait_reports(1)
        self.db.c.drop()
        p.wait_log("after invalidate, with startAfter")
        p.wait_open(2)
        self.db.c.insert_one({"n": 2})      # recreates the collection
        reps = p.wait_reports(2)
        self.assertEqual([(r["op"], r["n"]) for r in reps], [("insert", 1), ("insert", 2)])
        self.assertEqual(p.count_log("cannot open change stream"), 0)
        self.assertEqual(p.count_log("change stream failed"), 0)
        self.assertEqual(p.stop(), 0)

    def test_drop_database_invalidates_a_database_stream_which_reopens(self):
        p = self.run_fw(self.script("""
            fw.stream { name = "db", restart = { initial_delay = "100ms" },
              on_change = function(ctx)
                local d = ctx:full_document()
                report({ op = ctx:operation_type(), coll = ctx:collection_name(), n = d and d.n })
              end }
            """))
        p.wait_open()
        self.db.c.insert_one({"n": 1})
        p.wait_reports(1)
        self.client.drop_database(self.db_name)
        p.wait_until(lambda: any(r["op"] == "invalidate" for r in p.reports()),
                     what="the invalidate")
        p.wait_open(2)
        self.db.c.insert_one({"n": 2})
        p.wait_until(lambda: any(r.get("n") == 2 for r in p.reports()), what="the new insert")
        ops = [r["op"] for r in p.reports()]
        self.assertEqual(ops[0], "insert")
        self.assertEqual(ops[-3:], ["dropDatabase", "invalidate", "insert"])
        self.assertEqual(set(ops[1:-3]), {"drop"})
        self.assertEqual(p.count_log("cannot open change stream"), 0)


class Isolation(StandInTestCase):

    def test_a_stream_whose_handler_always_fails_does_not_hold_up_another(self):
        p = self.run_fw(self.script(
            stream(name="broken", coll="a", body='error("always")')
            + stream(name="healthy", coll="b")))
        p.wait_open(2)
        for n in range(10):
            self.db.a.insert_one({"n": n})
            self.db.b.insert_one({"n": n})
        self.assertEqual(numbers(p.wait_reports(10, "healthy")), list(range(10)))
        # The failing one still sees (and fails on) every one of its events.
        self.assertEqual(numbers(p.wait_reports(10, "broken")), list(range(10)))
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("summary: handled=0 handler_errors=10", stream="broken"), 1)
        self.assertEqual(p.count_log("summary: handled=10 handler_errors=0", stream="healthy"), 1)

    def test_dropping_one_streams_collection_does_not_disturb_another(self):
        p = self.run_fw(self.script(stream(name="dropped", coll="a")
                                    + stream(name="steady", coll="b")))
        p.wait_open(2)
        self.db.a.insert_one({"n": 0})
        self.db.b.insert_one({"n": 0})
        p.wait_reports(1, "dropped")
        self.db.a.drop()
        for n in range(1, 6):
            self.db.b.insert_one({"n": n})
        self.assertEqual(numbers(p.wait_reports(6, "steady")), list(range(6)))
        p.wait_log("after invalidate, with startAfter", stream="dropped")
        p.wait_open(3)
        self.db.a.insert_one({"n": 1})
        reps = p.wait_reports(4, "dropped")
        self.assertEqual([r["op"] for r in reps], ["insert", "drop", "invalidate", "insert"])
        self.assertEqual(p.count_log("change stream open", stream="steady"), 1)

    @needs_standin("fault injection (failCommand on getMore)")
    def test_an_error_on_one_streams_cursor_does_not_disturb_another(self):
        p = self.run_fw(self.script(stream(name="x", coll="a") + stream(name="y", coll="b")))
        p.wait_open(2)
        self.db.a.insert_one({"n": -1})
        self.db.b.insert_one({"n": -1})
        p.wait_reports(1, "x")
        p.wait_reports(1, "y")
        # Only one getMore fails: whichever stream gets it re-opens; both
        # deliver everything exactly once.
        self.fail_point({"times": 1}, {"failCommands": ["getMore"], "errorCode": 2,
                                       "errorLabels": [], "appName": "flowwarden"})
        for n in range(10):
            self.db.a.insert_one({"n": n})
            self.db.b.insert_one({"n": n})
        self.assertEqual(numbers(p.wait_reports(11, "x")), list(range(-1, 10)))
        self.assertEqual(numbers(p.wait_reports(11, "y")), list(range(-1, 10)))
        self.assertEqual(self.fail_point("off")["count"], 1)
        self.assertEqual(p.count_log("change stream failed"), 1)


@needs_standin("kill and restart (kill -9, --data-dir)")
class ServerRestart(StandInTestCase):
    """The server goes away (kill -9) and comes back on the same port with
    its data: the stream re-opens and picks up where it was."""

    @classmethod
    def setUpClass(cls):
        cls.data_dir = tempfile.TemporaryDirectory()
        cls.standin_args = ("--data-dir", cls.data_dir.name)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.data_dir.cleanup()

    def test_stream_survives_a_server_crash_and_restart(self):
        p = self.run_fw(self.script(stream()))
        p.wait_open()
        self.db.c.insert_many([{"n": n} for n in range(10)])
        p.wait_reports(10)
        port = self.standin.port
        self.standin.kill9()
        p.wait_log("libmongoc")             # the driver saw the connection drop
        self.standin.args = list(self.standin_args) + ["--port", str(port)]
        self.standin.start()
        self.db.c.insert_many([{"n": n} for n in range(10, 20)])
        p.wait_reports(20, timeout=40)
        self.db.c.insert_one({"n": 20})
        p.wait_reports(21, timeout=20)
        self.assertEqual(numbers(p.reports()), list(range(21)))
        self.assertEqual(p.stop(), 0)


@needs_standin("kill and restart (kill -9, --data-dir)")
class StopWithoutServer(StandInTestCase):
    """SIGTERM while the server is gone (issue 37, finding 7): the stop does
    not wait for server selection (30 s, serverSelectionTimeoutMS) but ends
    within docs/operations.md's bound, saying why it could not save the final
    checkpoint; what it had saved before is where the next run resumes, so
    only the events handled since the last save come again."""

    STOP_BOUND = 10  # s: the documented 2 s, with slack for a busy machine (was 32 s)

    @classmethod
    def setUpClass(cls):
        cls.data_dir = tempfile.TemporaryDirectory()
        cls.standin_args = ("--data-dir", cls.data_dir.name)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.data_dir.cleanup()

    def test_sigterm_with_the_server_gone_stops_within_the_bound(self):
        script = self.script(stream())
        pid_file = os.path.join(self.data_dir.name, "fw.pid")
        p = self.run_fw(script, extra=["--pid-file", pid_file])
        p.wait_open()
        self.assertTrue(os.path.exists(pid_file))
        self.db.c.insert_many([{"n": n} for n in range(10)])
        last = p.wait_reports(10)[-1]["eid"]
        saved = self.wait_checkpoint("s", lambda cp: cp.get("lastProcessedToken", {}).get(
            "_data") == last, what="the checkpoint of the 10th event")
        port = self.standin.port
        self.standin.kill9()
        p.wait_log("libmongoc")             # the driver saw the connection drop
        sent = time.monotonic()
        p.proc.send_signal(signal.SIGTERM)
        rc = p.wait_exit(timeout=60)
        took = time.monotonic() - sent
        self.assertLess(took, self.STOP_BOUND, "the stop took %.1f s" % took)
        self.assertEqual(rc, 0)
        self.assertFalse(os.path.exists(pid_file))  # removed at exit, as a clean stop does
        self.assertTrue(any("final checkpoint" in m and "not saved" in m
                            for m in p.messages(level="warn")), p.messages())
        # The server back with its data: the next run resumes from what was saved.
        self.standin.args = list(self.standin_args) + ["--port", str(port)]
        self.standin.start()
        self.assertEqual(self.checkpoint("s")["lastProcessedToken"], saved["lastProcessedToken"])
        q = self.run_fw(script)
        q.wait_open()
        self.db.c.insert_one({"n": 10})
        q.wait_until(lambda: 10 in numbers(q.reports()), what="the new event")
        self.assertEqual(numbers(q.reports()), [10])  # a repeat would come before it
        self.assertEqual(q.stop(), 0)


@needs_standin("oplog size (--oplog-max-entries)")
class HistoryLost(StandInTestCase):
    """An oplog of 100 entries: 150 writes while flowwarden is down push any
    saved position out of it."""

    standin_args = ("--oplog-max-entries", "100")
    CAP = 100

    def push_out_of_the_oplog(self, coll="c"):
        self.db[coll].insert_many([{"n": 1000 + i} for i in range(self.CAP + 50)])

    def first_run(self, script, streams=1):
        p = self.run_fw(script)
        p.wait_open(streams)
        self.db.c.insert_one({"n": 0})
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)

    def test_fail_policy_stops_the_only_stream_loudly_and_exits_1(self):
        script = self.script(stream(cp=', on_history_lost = "fail"'))
        self.first_run(script)
        self.push_out_of_the_oplog()
        p = self.run_fw(script)
        rc = p.wait_exit(timeout=20)
        self.assertEqual(rc, 1)
        errors = p.messages(level="error")
        self.assertTrue(any("STREAM STOPPED" in m and "history" in m and "on_history_lost" in m
                            for m in errors), errors)
        self.assertIn("every stream has stopped on an error: exiting", errors)
        self.assertEqual(p.reports(), [])
        self.assertEqual(p.count_log("(stream stopped on an error)", stream="s"), 1)

    def test_resume_from_now_policy_logs_the_gap_and_delivers_new_events(self):
        script = self.script(stream(cp=', on_history_lost = "resume_from_now"'))
        self.first_run(script)
        self.push_out_of_the_oplog()
        p = self.run_fw(script)
        p.wait_log("history lost: resuming from now")
        p.wait_log("change stream open (from now)")
        self.db.c.insert_one({"n": 1})
        self.db.c.insert_one({"n": 2})
        self.assertEqual(numbers(p.wait_reports(2)), [1, 2])
        self.assertTrue(any("NOT delivered" in m for m in p.messages(level="error")))
        self.assertEqual(p.stop(), 0)
        # The writes made while it was down (n >= 1000) are the gap: never delivered.
        self.assertEqual(numbers(p.reports()), [1, 2])

    def test_lost_processed_token_falls_back_to_a_newer_seen_token(self):
        # The stream handles one event, then sits idle while unrelated writes
        # go by: its seen token follows them; its processed token ages out.
        script = self.script(stream(cp=', on_history_lost = "fail"'))
        p = self.run_fw(script)
        p.wait_open()
        self.db.c.insert_one({"n": 0})
        (first,) = p.wait_reports(1)
        # Two chunks of 60 (each well inside the oplog, so the live cursor
        # never falls off it), together more than the oplog holds.
        for chunk in range(2):
            with self.client.start_session() as s:
                self.db.other.insert_many([{"x": i} for i in range(60)], session=s)
                last = token_at(s.operation_time)
            self.wait_checkpoint("s", lambda cp: cp["lastSeenToken"]["_data"] >= last,
                                 what="the seen token to pass the unrelated writes")
        self.assertEqual(p.stop(), 0)
        cp = self.checkpoint("s")
        self.assertEqual(cp["lastProcessedToken"]["_data"], first["eid"])

        p2 = self.run_fw(script)
        p2.wait_log("trying the last seen position")
        p2.wait_open()
        self.db.c.insert_one({"n": 1})
        self.assertEqual(numbers(p2.wait_reports(1)), [1])
        self.assertEqual(p2.count_log("STREAM STOPPED"), 0)
        self.assertEqual(p2.stop(), 0)

    @needs_standin("fault injection (failCommand on aggregate)")
    def test_seen_token_fallback_survives_a_transient_error_at_start(self):
        # Regression (fixed in src/runtime/stream/stream_worker.c, worker_main): any failed open sets
        # candidate = 2, so when the first open fails for a passing reason
        # (network, a refused aggregate) and the next one reports the
        # processed token lost, the seen token is never tried and the stream
        # applies on_history_lost at once ("fail": it stops).
        script = self.script(stream(cp=', on_history_lost = "fail"'))
        p = self.run_fw(script)
        p.wait_open()
        self.db.c.insert_one({"n": 0})
        p.wait_reports(1)
        for chunk in range(2):
            with self.client.start_session() as s:
                self.db.other.insert_many([{"x": i} for i in range(60)], session=s)
                last = token_at(s.operation_time)
            self.wait_checkpoint("s", lambda cp: cp["lastSeenToken"]["_data"] >= last,
                                 what="the seen token to pass the unrelated writes")
        self.assertEqual(p.stop(), 0)
        self.fail_point({"times": 1}, {"failCommands": ["aggregate"], "errorCode": 2,
                                       "errorLabels": [], "appName": "flowwarden"})
        p2 = self.run_fw(script)
        p2.wait_log("cannot open change stream")
        p2.wait_log("trying the last seen position", timeout=10)
        p2.wait_open()
        self.db.c.insert_one({"n": 1})
        self.assertEqual(numbers(p2.wait_reports(1)), [1])

    def test_history_lost_on_one_stream_does_not_stop_another(self):
        lost = stream(name="lost", coll="c", cp=', on_history_lost = "fail"')
        fresh = stream(name="fresh", coll="d", cp=', start_position = "latest"')
        script = self.script(lost + fresh)
        self.first_run(script, streams=2)
        self.push_out_of_the_oplog()
        p = self.run_fw(script)
        p.wait_log("STREAM STOPPED", stream="lost")
        p.wait_open(1)
        for n in range(5):
            self.db.d.insert_one({"n": n})
        self.assertEqual(numbers(p.wait_reports(5, "fresh")), list(range(5)))
        self.assertIsNone(p.proc.poll(), "flowwarden exited though a stream still runs")
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.reports("lost"), [])


if __name__ == "__main__":
    unittest.main()
