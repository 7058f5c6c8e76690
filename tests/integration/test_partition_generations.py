"""Changing a stream's number of partitions (issue 31): a restart or a reload with another N
switches generations once (the generation document "<stream>#generation"); the new units start
at the oldest old checkpoint's clusterTime and keep, per key, only the events after the
checkpoint of the old unit that held it: while writes go on, every event is handled exactly
once across the generations, in order per key. Back to no partitions switches the same way."""
import datetime
import tempfile
import os
import signal
import sys
import textwrap
import threading

import pymongo

from fwtest import PRELUDE, StandInTestCase, needs_standin

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standin"))
from fwstandin.hashing import hashed_index_key  # noqa: E402

KEYS, TOTAL = 16, 600


def body(n):
    parts = "partitions = %d," % n if n else ""
    return """
        fw.stream {
          name = "s", collection = "c", %s
          on_update = function(ctx)
            local k, parts = ctx:partition()
            report({ key = ctx:document_key()._id, n = ctx:update_description().updatedFields.n,
                     k = k or -1, parts = parts or 0 })
          end,
        }
    """ % parts


@needs_standin("version mode (--server-version 7.0)")
class GenerationsTest(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def start_writer(self, first, count):
        done = threading.Event()

        def write():
            for at in range(first, first + count, 10):
                self.db.c.bulk_write([pymongo.UpdateOne({"_id": "k%d" % (i % KEYS)},
                                                        {"$set": {"n": i}})
                                      for i in range(at, min(first + count, at + 10))])
            done.set()
        t = threading.Thread(target=write)
        t.start()
        return t

    def assert_once_in_order(self, reports, count):
        ns = sorted(r["n"] for r in reports)
        self.assertEqual(ns, list(range(count)))  # none lost, none twice
        for key in {r["key"] for r in reports}:
            mine = [r["n"] for r in reports if r["key"] == key]
            self.assertEqual(mine, sorted(mine), key)
        for r in reports:  # each key in the unit its hash names, in its generation
            if r["parts"] > 1:
                self.assertEqual(r["k"], abs(hashed_index_key(r["key"])) % r["parts"], r)

    def generation(self):
        return self.db["_fw_checkpoints"].find_one({"_id": "s#generation"})

    def test_restart_from_2_to_3_and_back_to_none_while_writing(self):
        self.db.c.insert_many([{"_id": "k%d" % j, "n": -1} for j in range(KEYS)])
        p = self.run_fw(self.script(body(2)))
        p.wait_open(streams=2)
        # Half the updates while the first run stops and the second starts, the other half
        # after: the first run may have handled all of its half before it stopped (a busy
        # machine), the second always has some to handle.
        t = self.start_writer(0, TOTAL // 2)
        p.wait_reports(50, timeout=60)
        self.assertEqual(p.stop(), 0)   # mid-writes: final checkpoints of s#0/2, s#1/2
        p2 = self.run_fw(self.script(body(3)))
        p2.wait_open(streams=3)
        t.join()
        self.start_writer(TOTAL // 2, TOTAL - TOTAL // 2).join()
        old = p.reports()
        p2.wait_until(lambda: len(old) + p2.report_count() >= TOTAL, 60, "every event")
        p2.wait_log("partitions changed from 2 to 3")
        self.assertEqual(p2.count_log("partitions changed from 2 to 3"), 1)  # one unit won
        self.assertEqual({r["parts"] for r in old}, {2})
        self.assertEqual({r["parts"] for r in p2.reports()}, {3})
        self.assertEqual(self.generation()["n"], 3)

        # Back to no partitions: switched the same way, and a restart does not switch again.
        t = self.start_writer(TOTAL, 200)
        p2.wait_until(lambda: len(old) + p2.report_count() >= TOTAL + 20, 60, "more events")
        self.assertEqual(p2.stop(), 0)
        p3 = self.run_fw(self.script(body(0)))
        p3.wait_open()
        t.join()
        done = old + p2.reports()
        p3.wait_until(lambda: len(done) + p3.report_count() >= TOTAL + 200, 60, "every event")
        self.assertEqual(self.generation()["n"], 0)
        self.assertEqual(p3.stop(), 0)
        self.assert_once_in_order(done + p3.reports(), TOTAL + 200)
        self.assertEqual(p3.count_log("partitions changed from 3 to 0"), 1)

    def test_reload_from_2_to_3_while_writing(self):
        self.db.c.insert_many([{"_id": "k%d" % j, "n": -1} for j in range(KEYS)])
        p = self.run_fw(self.script(body(2)))
        p.wait_open(streams=2)
        # Half the updates while the reload switches, the other half after it (the old units
        # may have handled all of the first half before the switch on a busy machine).
        t = self.start_writer(0, TOTAL // 2)
        p.wait_reports(50, timeout=60)
        with open(p.script, "w") as f:
            f.write(PRELUDE + textwrap.dedent(body(3)))
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log("partitions changed from 2 to 3", timeout=30)
        t.join()
        self.start_writer(TOTAL // 2, TOTAL - TOTAL // 2).join()
        got = p.wait_reports(TOTAL, timeout=60)
        self.assert_once_in_order(got, TOTAL)
        self.assertEqual({r["parts"] for r in got}, {2, 3})
        self.assertEqual(p.count_log("partitions changed from 2 to 3"), 1)

        # And back to 2: the units' own checkpoints are of the first run with 2, older than
        # the switch; they start at the switch instead.
        t = self.start_writer(TOTAL, 200)
        with open(p.script, "w") as f:
            f.write(PRELUDE + textwrap.dedent(body(2)))
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log("partitions changed from 3 to 2", timeout=30)
        t.join()
        got = p.wait_reports(TOTAL + 200, timeout=60)
        self.assertEqual(p.stop(), 0)
        self.assert_once_in_order(got, TOTAL + 200)
        self.assertEqual(self.generation()["n"], 2)
        self.assertGreaterEqual(p.count_log("older than the generation switch"), 1)

    def test_switch_waits_while_an_old_unit_is_held(self):
        # An old unit held by a live member (its lease): the new units wait, re-opening after
        # the restart delay, instead of running beside it; once released they go on (here to
        # the refusal of an old checkpoint without a position).
        self.db["_fw_checkpoints"].insert_one({"_id": "s#1/2"})
        self.db["_fw_leases"].insert_one({
            "_id": "s#1/2", "owner": "elsewhere:1", "epoch": 1,
            "expiresAt": datetime.datetime.now(datetime.timezone.utc)
            + datetime.timedelta(minutes=5)})
        p = self.run_fw(self.script(body(3).replace('name = "s",', 'name = "s", restart = '
                                                     '{ initial_delay = "100ms" },')))
        p.wait_log('old unit "s#1/2" (held by elsewhere:1) is still running', count=2,
                   stream="s#0/3")
        self.assertEqual(p.count_log("STREAM STOPPED", stream="s#0/3"), 0)
        self.db["_fw_leases"].delete_one({"_id": "s#1/2"})
        p.wait_log("STREAM STOPPED", stream="s#0/3")
        self.assertIn("none has a position", "\n".join(p.messages("error", stream="s#0/3")))
        self.assertEqual(p.stop(), 0)
        self.assertIsNone(self.generation())

    def test_a_snapshot_stream_does_not_snapshot_again_in_the_new_generation(self):
        snap = """
            fw.stream {
              name = "s", collection = "c", partitions = %d,
              checkpoint = { start_position = "snapshot" },
              on_snapshot = function(ctx) report({ snap = ctx:document_key()._id }) end,
              on_update = function(ctx) report({ key = ctx:document_key()._id }) end,
            }
        """
        self.db.c.insert_many([{"_id": "k%d" % j, "n": -1} for j in range(KEYS)])
        p = self.run_fw(self.script(snap % 2))
        p.wait_log("snapshot finished", count=2, timeout=60)
        self.assertEqual(len(p.wait_reports(KEYS)), KEYS)
        self.assertEqual(p.stop(), 0)
        p2 = self.run_fw(self.script(snap % 3))
        p2.wait_open(streams=3)
        self.db.c.update_one({"_id": "k1"}, {"$set": {"n": 1}})
        self.assertEqual(p2.wait_reports(1), [{"key": "k1"}])  # no snapshot again
        self.assertEqual(p2.count_log("partitions changed from 2 to 3"), 1)
        self.assertEqual(p2.stop(), 0)
        self.assertEqual(p2.reports(), [{"key": "k1"}])


@needs_standin("token versions (--token-version, --data-dir)")
class TokenVersionsTest(StandInTestCase):
    """The old generation's checkpoints hold version-1 tokens; the server then renders every
    event with version-2 tokens (an upgrade between the runs: --token-version 2 on the same
    data). resume_token.cpp encodes clusterTime, then the version, then tokenType, txnOpIndex,
    fromInvalidate...: a v2 token sorts after every v1 token of its clusterTime, so a plain
    string compare with the cut-off handled the old units' last events again."""

    @classmethod
    def setUpClass(cls):
        cls.data_dir = tempfile.TemporaryDirectory()
        cls.standin_args = ("--server-version", "7.0", "--data-dir", cls.data_dir.name)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.data_dir.cleanup()

    start_writer = GenerationsTest.start_writer
    assert_once_in_order = GenerationsTest.assert_once_in_order

    def restart_standin(self, *more):
        port = self.standin.port
        self.standin.stop()
        self.standin.args = list(self.standin_args) + ["--port", str(port)] + list(more)
        self.standin.start()

    def test_a_switch_across_token_versions_handles_each_event_once(self):
        self.db.c.insert_many([{"_id": "k%d" % j, "n": -1} for j in range(KEYS)])
        p = self.run_fw(self.script(body(2)))
        p.wait_open(streams=2)
        self.start_writer(0, 100).join()
        p.wait_reports(100, timeout=60)
        self.assertEqual(p.stop(), 0)   # final checkpoints: v1 tokens
        old = p.reports()
        cutoffs = [self.checkpoint("s#%d/2" % k)["lastProcessedToken"]["_data"]
                   for k in range(2)]
        self.assertEqual({c[18:22] for c in cutoffs}, {"2B02"})  # version 1
        self.restart_standin("--token-version", "2")
        try:
            p2 = self.run_fw(self.script(body(3)))
            p2.wait_open(streams=3)
            self.start_writer(100, 100).join()
            # the units run in parallel: wait for every event, then look for repeats
            p2.wait_until(lambda: {r["n"] for r in old + p2.reports()} >= set(range(200)), 60,
                          "every event")
            self.assertEqual(p2.stop(), 0)
        finally:
            self.restart_standin()
        self.assertEqual(p2.count_log("partitions changed from 2 to 3"), 1)
        self.assert_once_in_order(old + p2.reports(), 200)
