"""flowwarden against a stand-in playing MongoDB 5.0 (--server-version 5.0, issue 23 §2 and §4).

- The DLQ's sorts: a 5.0 server fails a blocking sort over 100 MB unless an index serves it or
  the query allows disk use (292). `dlq list`, `dlq replay` and dlq.reprocess work over ~110 MB
  of dead letters (110 entries of ~1 MB).
- Change stream options that need 6.0: a stream with full_document = "required" (or
  "whenAvailable", or full_document_before_change) stops with a message naming the option, the
  stream and the server's version, once, instead of re-opening for ever; the other streams run.
"""
import datetime
import json
import time
import uuid

from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

from fwtest import needs_standin, StandInTestCase, run_cli

N_ENTRIES = 110
PAD = "x" * (1024 * 1024)


@needs_standin("version mode (--server-version 5.0)")
class DlqOver100MB(StandInTestCase):
    standin_args = ("--server-version", "5.0")

    def setUp(self):
        super().setUp()
        self.t0 = time.monotonic()

    def tearDown(self):
        took = time.monotonic() - self.t0
        self.client.drop_database(self.db_name)     # 110 MB the next test does not need
        super().tearDown()
        print("\n%s took %.1f s" % (self.id().rsplit(".", 1)[-1], took))
        self.assertLess(took, 60, "the 110 MB DLQ test must stay bounded")

    def fill(self):
        """N_ENTRIES PENDING dead letters of stream "s", each holding ~1 MB of fullDocument,
        written as run writes them (but without the indexes run creates)."""
        now = datetime.datetime.utcnow().replace(microsecond=0)
        batch = []
        for i in range(N_ENTRIES):
            token = "82%08X%08X" % (1700000000, i + 1)
            batch.append({
                "_id": str(uuid.uuid4()), "streamName": "s", "operationType": "INSERT",
                "documentKey": {"_id": i}, "fullDocument": {"_id": i, "pad": PAD},
                "resumeToken": {"_data": token}, "eventId": token,
                "error": {"type": "Http.Timeout", "message": "slow", "stackTrace": ""},
                "attempts": 1, "status": "PENDING", "firstAttemptAt": now,
                "lastAttemptAt": now, "createdAt": now + datetime.timedelta(milliseconds=i),
                "expiresAt": None, "metadata": {}, "ns": {"db": self.db_name, "coll": "orders"},
                # Newest event first in clusterTime, so the order is the sort's work.
                "clusterTime": Timestamp(1700000000, N_ENTRIES - i), "scriptVersion": "0" * 12,
                "lastTouched": now, "reprocessAttempts": 0, "diagnostics": {}})
            if len(batch) == 10:
                self.db["_fw_dlq"].insert_many(batch)
                batch = []
        if batch:
            self.db["_fw_dlq"].insert_many(batch)

    def assert_sort_refused_without_disk(self):
        """The precondition that makes these tests able to fail: the server refuses the
        readers' sort unless it may spill or an index serves it."""
        with self.assertRaises(OperationFailure) as cm:
            list(self.db["_fw_dlq"].find({"streamName": "s"}, {"_id": 1})
                 .sort([("clusterTime", 1), ("createdAt", 1)]))
        self.assertEqual(cm.exception.code, 292)

    def script_path(self, handler="function(ctx) end", dlq="true"):
        return self.script("""
            fw.stream { name = "s", collection = "orders", dlq = %s, on_insert = %s }
            """ % (dlq, handler))

    def test_dlq_list_and_replay(self):
        self.fill()
        self.assert_sort_refused_without_disk()
        path = self.script_path()

        cp = run_cli(["dlq", "list", path, "--uri", self.uri], timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        rows = [l for l in cp.stdout.splitlines() if " s " in l and "PENDING" in l]
        self.assertEqual(len(rows), N_ENTRIES, cp.stdout[:2000])
        cp = run_cli(["dlq", "list", path, "--uri", self.uri, "--stream", "s", "--limit", "3",
                      "--json"], timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        listed = [json.loads(l) for l in cp.stdout.splitlines()]
        self.assertEqual([e["documentKey"]["_id"] for e in listed], [0, 1, 2])  # oldest first

        cp = run_cli(["dlq", "replay", path, "--uri", self.uri, "--log-format", "json"],
                     timeout=90)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr[-3000:])
        self.assertIn("replaying %d entries" % N_ENTRIES, cp.stdout)
        self.assertIn("summary: resolved=%d skipped=0 requeued=0 evicted=0 errors=0" % N_ENTRIES,
                      cp.stdout)
        self.assertEqual(self.db["_fw_dlq"].count_documents({"status": "RESOLVED"}), N_ENTRIES)

    def test_automatic_reprocessing(self):
        self.fill()
        self.assert_sort_refused_without_disk()
        p = self.run_fw(self.script_path(
            handler="function(ctx) report({ key = ctx:document_key()._id }) end",
            dlq='{ reprocess = { every = "1s", max_attempts = 5 } }'))
        p.wait_open()
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({"status": "RESOLVED"})
                      == N_ENTRIES, timeout=60, what="every entry resolved by dlq.reprocess")
        self.assertEqual(p.stop(), 0)
        self.assertEqual(p.count_log("cannot read the DLQ"), 0)
        # Oldest clusterTime first: the entry written last went first.
        self.assertEqual(p.reports()[0]["key"], N_ENTRIES - 1)
        # run created the indexes that serve the readers' sorts: without allowDiskUse the
        # same queries are now accepted.
        names = set(self.db["_fw_dlq"].index_information())
        self.assertLessEqual({"streamName_clusterTime_createdAt__id",
                              "streamName_createdAt__id"}, names)
        self.db["_fw_dlq"].update_many({}, {"$set": {"status": "PENDING"}})
        n = len(list(self.db["_fw_dlq"].find({"streamName": "s"}, {"_id": 1})
                     .sort([("clusterTime", 1), ("createdAt", 1)])))
        self.assertEqual(n, N_ENTRIES)
        n = len(list(self.db["_fw_dlq"].find({"streamName": "s"}, {"_id": 1})
                     .sort([("createdAt", 1), ("_id", 1)])))
        self.assertEqual(n, N_ENTRIES)


@needs_standin("version mode (--server-version 5.0)")
class OptionsThatNeed60(StandInTestCase):
    standin_args = ("--server-version", "5.0")
    command_log = True

    def expected(self, stream, option, advice):
        return ('stream "%s": %s needs MongoDB 6.0 or later, but the server 127.0.0.1:%d is '
                'MongoDB 5.0 (maxWireVersion 13): the stream is stopped; %s'
                % (stream, option, self.standin.port, advice))

    def test_the_stream_stops_once_with_the_reason_and_the_others_run(self):
        p = self.run_fw(self.script("""
            local quick = { initial_delay = "20ms", max_delay = "50ms" }
            fw.stream { name = "req", collection = "orders", full_document = "required",
                        restart = quick, on_insert = function(ctx) end }
            fw.stream { name = "pre", collection = "orders",
                        full_document_before_change = "whenAvailable",
                        restart = quick, on_insert = function(ctx) end }
            fw.stream { name = "ok", collection = "other", full_document = "updateLookup",
                        on_insert = function(ctx) report({ id = ctx:document_key()._id }) end }
            """), extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_log("STREAM STOPPED", stream="req")
        p.wait_log("STREAM STOPPED", stream="pre")
        req = self.expected("req", 'full_document = "required"',
                            'use full_document = "updateLookup" on this server, or upgrade it')
        pre = self.expected("pre", 'full_document_before_change = "whenAvailable"',
                            "remove it on this server (pre-images come from the collection's "
                            "changeStreamPreAndPostImages, a 6.0 option), or upgrade it")
        self.assertIn("STREAM STOPPED: " + req, p.messages("error", stream="req"))
        self.assertIn("STREAM STOPPED: " + pre, p.messages("error", stream="pre"))

        # The other stream runs on 5.0.
        p.wait_open(streams=1)
        self.db.other.insert_one({"_id": 7})
        self.assertEqual(p.wait_reports(1, stream="ok")[0]["id"], 7)

        r = run_cli(["status", "--admin", "127.0.0.1:%d" % port])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^req +failed ")
        self.assertRegex(r.stdout, r"(?m)^pre +failed ")
        self.assertIn("req: " + req, r.stdout)

        # Stopped once, never re-opened: no change stream aggregate on orders reached the
        # server at all (the check comes before the open), and no restart was scheduled.
        opened = [c for c in self.commands("aggregate")
                  if c["summary"].get("target") == "orders"]
        self.assertEqual(opened, [])
        self.assertEqual(p.count_log("STREAM STOPPED", stream="req"), 1)
        self.assertEqual(p.count_log("re-opening the change stream", stream="req"), 0)
        self.assertEqual(p.stop(), 0)
