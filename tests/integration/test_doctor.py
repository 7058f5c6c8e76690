"""flowwarden doctor SCRIPT [--uri URI] [--json] (issue 27): against a healthy stand-in, then
against stand-ins started in each mode that breaks something (a standalone, MongoDB 5.0, a user
without privileges, a collection without pre-images, a checkpoint older than the oplog window).
Each problem is a line with its status and its fix; the exit code is 0 / 1 / 2; --json says the
same."""

import datetime
import json
import tempfile
import time
import unittest

import pymongo

from fwtest import StandIn, clean_env, run_cli, wait_until, with_credentials, write_script

DB = "doc"
HANDLER = "on_change = function(ctx) end"


def script(directory, body):
    return write_script(directory, body)


def stream(extra=""):
    return """
        fw.stream { name = "s", collection = "orders", %s
          %s }
    """ % (extra, HANDLER)


class DoctorCase(unittest.TestCase):
    standin_args = ()
    credentials = None

    @classmethod
    def setUpClass(cls):
        cls.standin = StandIn(args=list(cls.standin_args), credentials=cls.credentials)
        cls.standin.start()

    @classmethod
    def tearDownClass(cls):
        cls.standin.stop()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def uri(self, credentials=None, replset=True):
        return with_credentials("mongodb://127.0.0.1:%d/%s?%s" % (
            self.standin.port, DB, "replicaSet=rs0" if replset else "directConnection=true"),
            credentials or self.standin.credentials)

    def client(self, **kw):
        return pymongo.MongoClient(self.uri(**kw))

    def doctor(self, body, **kw):
        path = script(self.tmp.name, body)
        text = run_cli(["doctor", path, "--uri", self.uri(**kw)], env=clean_env())
        js = run_cli(["doctor", path, "--uri", self.uri(**kw), "--json"], env=clean_env())
        self.assertEqual(js.returncode, text.returncode, js.stderr)
        report = json.loads(js.stdout)
        self.assertEqual(report["exit"], js.returncode)
        return text, report["checks"]

    def check(self, checks, name, stream=None):
        found = [c for c in checks if c["name"] == name and c["stream"] == stream]
        self.assertEqual(len(found), 1, "check %s/%s in %s" % (stream, name, checks))
        return found[0]


class HealthyTest(DoctorCase):

    def test_all_ok_exit_0_fast(self):
        with self.client() as c:
            c[DB].create_collection("orders", changeStreamPreAndPostImages={"enabled": True})
        body = stream('full_document = "required", full_document_before_change = "required",')
        t0 = time.monotonic()
        path = script(self.tmp.name, body)
        cp = run_cli(["doctor", path, "--uri", self.uri()], env=clean_env())
        elapsed = time.monotonic() - t0
        print("doctor against a healthy stand-in: %.3f s" % elapsed)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        # The figure is printed; the bound only catches a check that waits out a timeout
        # (a 30 s server selection), with room for a loaded machine.
        self.assertLess(elapsed, 20.0)
        for line in cp.stdout.splitlines():
            self.assertFalse(line.startswith(("warn", "fail")), line)
        self.assertIn("replica set rs0", cp.stdout)
        self.assertIn("MongoDB 6.0.9, maxWireVersion 17", cp.stdout)
        text, checks = self.doctor(body)
        for name in ("connection", "topology", "oplog_window"):
            self.assertIn(self.check(checks, name)["status"], ("ok", "info"))
        for name in ("pre_images", "split_large_events", "checkpoint"):
            self.assertEqual(self.check(checks, name, "s")["status"], "ok")

    def test_pre_images_missing_fails_with_collmod(self):
        with self.client() as c:
            c[DB].create_collection("plain")
        body = stream('full_document_before_change = "required",').replace("orders", "plain")
        text, checks = self.doctor(body)
        self.assertEqual(text.returncode, 2, text.stdout)
        c = self.check(checks, "pre_images", "s")
        self.assertEqual(c["status"], "fail")
        self.assertIn('collMod: "plain", changeStreamPreAndPostImages: {enabled: true}', c["fix"])
        self.assertIn("fail  s pre_images: doc.plain has not changeStreamPreAndPostImages",
                      text.stdout)
        self.assertIn("fix: " + c["fix"], text.stdout)

    def test_database_wide_stream_names_collections_without_pre_images(self):
        with self.client() as c:
            c[DB].create_collection("with_images", changeStreamPreAndPostImages={"enabled": True})
            c[DB].create_collection("bare")
        body = """
            fw.stream { name = "all", full_document = "required",
              on_change = function(ctx) end }
        """
        text, checks = self.doctor(body)
        self.assertEqual(text.returncode, 2, text.stdout)
        c = self.check(checks, "pre_images", "all")
        self.assertEqual(c["status"], "fail")
        self.assertIn("bare", c["message"])
        self.assertNotIn("with_images", c["message"])
        self.assertNotIn("_fw_", c["message"])
        with self.client() as cl:
            cl[DB].command({"collMod": "bare", "changeStreamPreAndPostImages": {"enabled": True}})
        text, checks = self.doctor(body)
        self.assertEqual(self.check(checks, "pre_images", "all")["status"], "ok", text.stdout)

    def test_clock_within_lease_margin_with_ha(self):
        text, checks = self.doctor('fw.defaults { ha = { mode = "leader", lease = "10s" } }'
                                   + stream())
        c = self.check(checks, "clock")
        self.assertEqual(c["status"], "ok", text.stdout)
        self.assertIn("safety margin: 1000 ms", c["message"])

    def test_unreachable(self):
        path = script(self.tmp.name, stream())
        cp = run_cli(["doctor", path, "--uri",
                      "mongodb://127.0.0.1:1/doc?serverSelectionTimeoutMS=500"], env=clean_env())
        self.assertEqual(cp.returncode, 2)
        self.assertIn("fail  connection: cannot reach or authenticate", cp.stdout)


class ClockTest(DoctorCase):
    standin_args = ("--clock-offset-ms", "5000")

    def test_clock_off_by_more_than_the_margin_warns_with_ha(self):
        body = 'fw.defaults { ha = { mode = "leader", lease = "10s" } }' + stream()
        text, checks = self.doctor(body)
        self.assertEqual(text.returncode, 1, text.stdout)
        c = self.check(checks, "clock")
        self.assertEqual(c["status"], "warn")
        self.assertIn("more than the lease's safety margin (1000 ms)", c["message"])
        self.assertIn("NTP", c["fix"])

    def test_without_ha_only_info(self):
        text, checks = self.doctor(stream())
        self.assertEqual(self.check(checks, "clock")["status"], "info")
        self.assertEqual(text.returncode, 0, text.stdout)


class StandaloneTest(DoctorCase):
    standin_args = ("--standalone",)

    def test_standalone_fails(self):
        text, checks = self.doctor(stream(), replset=False)
        self.assertEqual(text.returncode, 2, text.stdout)
        c = self.check(checks, "topology")
        self.assertEqual(c["status"], "fail")
        self.assertIn("standalone", c["message"])
        self.assertIn("--replSet", c["fix"])


class OldVersionTest(DoctorCase):
    standin_args = ("--server-version", "5.0")

    def test_no_split_stage_warns(self):
        text, checks = self.doctor(stream())
        self.assertEqual(text.returncode, 1, text.stdout)
        c = self.check(checks, "split_large_events", "s")
        self.assertEqual(c["status"], "warn")
        self.assertIn("stops the stream (oversize = \"fail\")", c["message"])
        self.assertIn("upgrade", c["fix"])

    def test_pre_images_on_5_0_fail(self):
        text, checks = self.doctor(stream('full_document = "required",'))
        self.assertEqual(text.returncode, 2, text.stdout)
        self.assertIn("6.0+", self.check(checks, "pre_images", "s")["fix"])


class PrivilegesTest(DoctorCase):
    credentials = ("admin", "adminpw")
    standin_args = ("--user", "reader:readerpw:read@" + DB)

    def test_read_only_user_fails_with_role(self):
        text, checks = self.doctor(stream(), credentials=("reader", "readerpw"))
        self.assertEqual(text.returncode, 2, text.stdout)
        c = self.check(checks, "privileges", "s")
        self.assertEqual(c["status"], "fail")
        self.assertIn("insert/update/remove/createIndex on doc._fw_checkpoints", c["message"])
        self.assertNotIn("changeStream on doc.orders", c["message"])
        self.assertIn('role: "readWrite", db: "doc"', c["fix"])
        self.assertEqual(self.check(checks, "oplog_window")["status"], "warn")
        self.assertNotIn("readerpw", text.stdout + text.stderr)

    def test_wrong_password_fails_to_connect(self):
        text, checks = self.doctor(stream(), credentials=("reader", "nope"))
        self.assertEqual(text.returncode, 2, text.stdout)
        c = self.check(checks, "connection")
        self.assertEqual(c["status"], "fail")
        self.assertIn("uthentication failed", c["message"])
        self.assertEqual(len(checks), 1)

    def test_no_credentials_fails(self):
        path = script(self.tmp.name, stream())
        cp = run_cli(["doctor", path, "--uri", "mongodb://127.0.0.1:%d/%s?replicaSet=rs0"
                      % (self.standin.port, DB)], env=clean_env())
        self.assertEqual(cp.returncode, 2, cp.stdout)
        self.assertIn("connected (no credentials)", cp.stdout)
        self.assertIn("fail  privileges: the server requires authentication", cp.stdout)

    def test_root_user_ok(self):
        text, checks = self.doctor(stream())
        self.assertEqual(self.check(checks, "privileges", "s")["status"], "ok", text.stdout)


class OplogWindowTest(DoctorCase):
    standin_args = ("--oplog-max-entries", "5")

    def test_checkpoint_older_than_window_fails(self):
        with self.client() as c:
            c[DB].orders.insert_many([{"_id": i} for i in range(20)])
            old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
            c[DB]["_fw_checkpoints"].insert_one({"_id": "s", "updatedAt": old})
        text, checks = self.doctor(stream())
        self.assertEqual(text.returncode, 2, text.stdout)
        c = self.check(checks, "checkpoint", "s")
        self.assertEqual(c["status"], "fail")
        self.assertIn("history lost", c["message"])
        self.assertIn('stop (on_history_lost = "fail")', c["message"])
        self.assertIn("resume_from_now", c["fix"])
        text, checks = self.doctor(stream('checkpoint = { on_history_lost = "resume_from_now" },'))
        self.assertIn("resume from now", self.check(checks, "checkpoint", "s")["message"])

    def test_checkpoint_older_than_half_the_window_warns(self):
        with self.client() as c:
            c[DB].orders.insert_many([{"_id": "w%d" % i} for i in range(10)])
            first = c.local["oplog.rs"].find({}, {"ts": 1}).sort("$natural", 1).limit(1)[0]
            first_s = first["ts"].time
            # A checkpoint a second after the first entry (the write below moves the first entry
            # by one of these inserts, a second later at most); three seconds after it, the
            # checkpoint is 2+ s old in a window of 3 s or less.
            wait_until(lambda: time.time() >= first_s + 3, timeout=6,
                       message="three seconds past the oplog's first entry")
            at = datetime.datetime.fromtimestamp(first_s + 1, datetime.timezone.utc)
            c[DB]["_fw_checkpoints"].replace_one({"_id": "w"}, {"updatedAt": at}, upsert=True)
        text, checks = self.doctor(stream().replace('"s"', '"w"'))
        self.assertEqual(text.returncode, 1, text.stdout)
        c = self.check(checks, "checkpoint", "w")
        self.assertEqual(c["status"], "warn")
        self.assertIn("more than half the oplog window", c["message"])
        self.assertIn("replSetResizeOplog", c["fix"])


def without_replica_set(uri):
    """uri without its replicaSet option (a standalone has no set), credentials kept."""
    base, _, query = uri.partition("?")
    opts = [o for o in query.split("&") if o and not o.startswith("replicaSet=")]
    return base + ("?" + "&".join(opts) if opts else "")


SINK_STREAM = """
    fw.connection { name = "sink", uri = %r }
    fw.stream { name = "s", collection = "orders", exactly_once = { connection = "sink" },
      on_change = function(ctx) end }
"""


class ExactlyOnceSinkTest(DoctorCase):
    """exactly_once = { connection = "sink" } (issue 39): doctor checks the
    sink deployment too: reachable, with transactions (its hello: a replica
    set member or mongos; a standalone has none), and its
    transactionLifetimeLimitSeconds (getParameter)."""

    def start_sink(self, *args):
        sink = StandIn(args=list(args))
        sink.start()
        self.addCleanup(sink.stop)
        return sink

    def test_a_replica_set_sink_is_ok_with_its_transaction_lifetime(self):
        sink = self.start_sink("--transaction-lifetime-limit-seconds", "7")
        text, checks = self.doctor(SINK_STREAM % sink.uri)
        self.assertEqual(text.returncode, 0, text.stdout + text.stderr)
        eo = [c for c in checks if c["name"] == "exactly_once"]
        self.assertEqual([c["status"] for c in eo], ["ok", "ok"], eo)
        self.assertIn('connection "sink" (MongoDB', eo[0]["message"])
        self.assertIn("runs transactions", eo[0]["message"])
        self.assertIn("transactionLifetimeLimitSeconds is 7 s", eo[1]["message"])

    def test_a_standalone_sink_fails_with_the_remedy(self):
        sink = self.start_sink("--standalone")
        text, checks = self.doctor(SINK_STREAM % without_replica_set(sink.uri))
        self.assertEqual(text.returncode, 2, text.stdout + text.stderr)
        c = self.check(checks, "exactly_once")
        self.assertEqual(c["status"], "fail")
        self.assertIn('connection "sink"', c["message"])
        self.assertIn("standalone mongod", c["message"])
        self.assertIn("replica set", c["fix"])

    def test_an_unreachable_sink_fails(self):
        text, checks = self.doctor(SINK_STREAM % "mongodb://127.0.0.1:1/?connectTimeoutMS=500")
        self.assertEqual(text.returncode, 2, text.stdout + text.stderr)
        found = [c for c in checks if c["name"] == "connection" and "sink" in c["message"]]
        self.assertEqual(len(found), 1, checks)
        self.assertEqual(found[0]["status"], "fail")
        self.assertIn("cannot reach", found[0]["message"])


if __name__ == "__main__":
    unittest.main()
