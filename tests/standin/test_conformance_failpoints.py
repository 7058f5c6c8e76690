"""Stand-in conformance: failCommand / failGetMoreAfterCursorCheckout with mongod semantics,
and pymongo's automatic change-stream resume on top of them."""

import os
import sys
import time
import unittest

import pymongo
from pymongo.errors import (AutoReconnect, OperationFailure, PyMongoError,
                            WriteConcernError)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn  # noqa: E402

S = None
CLIENT = None


def setUpModule():
    global S, CLIENT
    S = StandIn()
    S.start()
    CLIENT = pymongo.MongoClient(S.uri)


def tearDownModule():
    CLIENT.close()
    assert S.stop() == 0


def fail_point(mode, data=None, name="failCommand"):
    cmd = {"configureFailPoint": name, "mode": mode}
    if data is not None:
        cmd["data"] = data
    return CLIENT.admin.command(cmd)


def next_event(cs, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = cs.try_next()
        if ev is not None:
            return ev
    raise AssertionError("no change event within %.0f s" % timeout)


def monitored_client(**kw):
    from pymongo import monitoring

    class Listener(monitoring.CommandListener):
        def __init__(self):
            self.names = []

        def started(self, event):
            self.names.append(event.command_name)

        def succeeded(self, event):
            pass

        def failed(self, event):
            pass

    listener = Listener()
    return pymongo.MongoClient(S.uri, event_listeners=[listener], **kw), listener


class FailCommandTest(unittest.TestCase):
    def tearDown(self):
        fail_point("off")
        fail_point("off", name="failGetMoreAfterCursorCheckout")

    def test_times_mode_fails_n_times_then_turns_itself_off(self):
        fail_point({"times": 2}, {"failCommands": ["count"], "errorCode": 2})
        for _ in range(2):
            with self.assertRaises(OperationFailure) as cm:
                CLIENT.fp.command("count", "c")
            d = cm.exception.details
            self.assertEqual((d["code"], d["codeName"], d["errmsg"]),
                             (2, "BadValue", "Failing command via 'failCommand' failpoint"))
        self.assertEqual(CLIENT.fp.command("count", "c")["ok"], 1.0)
        self.assertEqual(fail_point("off")["count"], 2)

    def test_always_on_until_off_and_only_listed_commands(self):
        fail_point("alwaysOn", {"failCommands": ["distinct"], "errorCode": 11600})
        for _ in range(3):
            # 11600 is a shutdown error: pymongo raises NotMasterError, not OperationFailure.
            with self.assertRaises(PyMongoError) as cm:
                CLIENT.fp.command("distinct", "c", key="a")
            self.assertEqual(cm.exception.details["code"], 11600)
        CLIENT.fp.command("count", "c")
        fail_point("off")
        CLIENT.fp.command("distinct", "c", key="a")

    def test_skip_mode(self):
        fail_point({"skip": 1}, {"failCommands": ["count"], "errorCode": 2})
        CLIENT.fp.command("count", "c")
        with self.assertRaises(OperationFailure):
            CLIENT.fp.command("count", "c")

    def test_close_connection(self):
        client = pymongo.MongoClient(S.uri, retryReads=False)
        client.admin.command("ping")
        fail_point({"times": 1}, {"failCommands": ["find"], "closeConnection": True})
        with self.assertRaises(AutoReconnect):
            client.fp.c.find_one()
        self.assertIsNone(client.fp.c.find_one({"_id": "none"}))
        client.close()

    def test_block_connection(self):
        fail_point({"times": 1}, {"failCommands": ["ping"], "blockConnection": True,
                                  "blockTimeMS": 300})
        start = time.monotonic()
        self.assertEqual(CLIENT.admin.command("ping")["ok"], 1.0)
        self.assertGreaterEqual(time.monotonic() - start, 0.29)

    def test_error_labels_given_and_retryable_write_label_by_default(self):
        fail_point({"times": 1}, {"failCommands": ["count"], "errorCode": 2,
                                  "errorLabels": ["SomeLabel"]})
        with self.assertRaises(OperationFailure) as cm:
            CLIENT.fp.command("count", "c")
        self.assertEqual(cm.exception.details["errorLabels"], ["SomeLabel"])
        # A retryable write failing with a retryable code gets RetryableWriteError and
        # pymongo retries it once: the document is inserted exactly once.
        client, listener = monitored_client()
        fail_point({"times": 1}, {"failCommands": ["insert"], "errorCode": 91})
        client.fp.rw.insert_one({"_id": "retried"})
        self.assertEqual(listener.names.count("insert"), 2)
        self.assertEqual(client.fp.rw.count_documents({"_id": "retried"}), 1)
        # Explicit empty labels override the server's own: no retry.
        fail_point({"times": 1}, {"failCommands": ["insert"], "errorCode": 91,
                                  "errorLabels": []})
        with self.assertRaises(PyMongoError) as cm:
            client.fp.rw.insert_one({"_id": "not-retried"})
        self.assertNotIn("errorLabels", cm.exception.details)
        client.close()

    def test_write_concern_error_is_attached_after_the_write(self):
        fail_point({"times": 1}, {"failCommands": ["insert"], "writeConcernError": {
            "code": 100, "codeName": "UnsatisfiableWriteConcern", "errmsg": "Not enough data",
            "errInfo": {}}})
        with self.assertRaises(WriteConcernError) as cm:
            CLIENT.fp.wce.insert_one({"_id": 1})
        self.assertEqual(cm.exception.code, 100)
        self.assertEqual(CLIENT.fp.wce.count_documents({"_id": 1}), 1)

    def test_app_name_filter(self):
        other = pymongo.MongoClient(S.uri, appname="other-app")
        fail_point({"times": 1}, {"failCommands": ["count"], "errorCode": 2,
                                  "appName": "target-app"})
        other.fp.command("count", "c")
        target = pymongo.MongoClient(S.uri, appname="target-app")
        with self.assertRaises(OperationFailure):
            target.fp.command("count", "c")
        other.close()
        target.close()

    def test_unknown_fail_point_and_admin_only(self):
        with self.assertRaises(OperationFailure):
            fail_point("alwaysOn", name="noSuchFailPoint")
        with self.assertRaises(OperationFailure) as cm:
            CLIENT.fp.command({"configureFailPoint": "failCommand", "mode": "off"})
        self.assertEqual(cm.exception.code, 13)


class ChangeStreamResumeTest(unittest.TestCase):
    def tearDown(self):
        fail_point("off")
        fail_point("off", name="failGetMoreAfterCursorCheckout")

    def test_fail_command_on_get_more_adds_no_resumable_label(self):
        db = CLIENT.fpcs
        db.plain.insert_many([{} for _ in range(5)])
        r = db.command("find", "plain", batchSize=1)
        cs = db.command("aggregate", "cs", pipeline=[{"$changeStream": {}}], cursor={})
        fail_point({"times": 2}, {"failCommands": ["getMore"], "errorCode": 189})
        with self.assertRaises(PyMongoError) as cm:
            db.command("getMore", r["cursor"]["id"], collection="plain")
        self.assertNotIn("errorLabels", cm.exception.details)
        # Not on a change stream's either: failCommand fails the getMore before it checks
        # its cursor out, so mongod cannot tell it is a change stream's (error_labels.cpp,
        # isResumableChangeStreamError reads the cursor's originating command; SERVER-46091
        # added failGetMoreAfterCursorCheckout for that reason).
        with self.assertRaises(PyMongoError) as cm:
            db.command("getMore", cs["cursor"]["id"], collection="cs", maxTimeMS=10)
        self.assertNotIn("errorLabels", cm.exception.details)
        # failCommand fires before the cursor is touched: it still works.
        db.command("getMore", cs["cursor"]["id"], collection="cs", maxTimeMS=10)

    def test_fail_get_more_after_cursor_checkout_kills_the_cursor(self):
        db = CLIENT.fpcs
        cs = db.command("aggregate", "cs2", pipeline=[{"$changeStream": {}}], cursor={})
        fail_point({"times": 1}, {"errorCode": 6}, name="failGetMoreAfterCursorCheckout")
        with self.assertRaises(OperationFailure) as cm:
            db.command("getMore", cs["cursor"]["id"], collection="cs2", maxTimeMS=10)
        d = cm.exception.details
        self.assertEqual((d["code"], d["codeName"]), (6, "HostUnreachable"))
        self.assertEqual(d["errorLabels"], ["ResumableChangeStreamError"])
        with self.assertRaises(OperationFailure) as cm:
            db.command("getMore", cs["cursor"]["id"], collection="cs2", maxTimeMS=10)
        self.assertEqual(cm.exception.code, 43)

    def _resumes(self, data, name="failCommand"):
        client, listener = monitored_client()
        coll = client.fpcs["resume_" + str(len(listener.names)) + str(time.monotonic_ns())]
        with coll.watch(max_await_time_ms=100) as cs:
            coll.insert_one({"_id": 1})
            self.assertEqual(next_event(cs)["documentKey"], {"_id": 1})
            aggregates = listener.names.count("aggregate")
            fail_point({"times": 1}, data, name=name)
            coll.insert_one({"_id": 2})
            coll.insert_one({"_id": 3})
            got = [next_event(cs)["documentKey"]["_id"], next_event(cs)["documentKey"]["_id"]]
            self.assertEqual(got, [2, 3])
            self.assertEqual(listener.names.count("aggregate"), aggregates + 1)
        client.close()

    def test_pymongo_resumes_after_labelled_error(self):
        self._resumes({"failCommands": ["getMore"], "errorCode": 10107,
                       "errorLabels": ["ResumableChangeStreamError"]})

    def test_pymongo_does_not_resume_after_unlabelled_fail_command(self):
        # As against mongod: no label on a failCommand getMore error (see above), so a
        # 4.4+ driver raises it (the spec test "change stream does not resume if error does
        # not contain ResumableChangeStreamError").
        client, _ = monitored_client()
        coll = client.fpcs["noresume_" + str(time.monotonic_ns())]
        with coll.watch(max_await_time_ms=100) as cs:
            fail_point({"times": 1}, {"failCommands": ["getMore"], "errorCode": 6})
            coll.insert_one({"_id": 1})
            with self.assertRaises(OperationFailure) as cm:
                next_event(cs)
            self.assertEqual(cm.exception.code, 6)
        client.close()

    def test_pymongo_resumes_after_close_connection(self):
        self._resumes({"failCommands": ["getMore"], "closeConnection": True})

    def test_pymongo_resumes_after_get_more_checkout_failure(self):
        self._resumes({"errorCode": 91}, name="failGetMoreAfterCursorCheckout")


if __name__ == "__main__":
    unittest.main()
