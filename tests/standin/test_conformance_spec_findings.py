"""Stand-in conformance: what MongoDB's driver specification tests showed the stand-in did
differently from mongod (standin/spec_unified runs those tests; these check each behaviour
directly, with the MongoDB source it follows)."""

import itertools
import os
import sys
import time
import unittest

import pymongo
from bson.int64 import Int64
from pymongo.errors import AutoReconnect, OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn, next_event  # noqa: E402

S = None
CLIENT = None
# pymongo hands its pooled server sessions (lsid) from test to test: each test numbers its
# transactions above every earlier one's.
TXN_BASE = itertools.count(100, 100)


def setUpModule():
    global S, CLIENT
    S = StandIn(["--server-version", "7.0"])
    S.start()
    CLIENT = pymongo.MongoClient(S.uri, retryWrites=False)


def tearDownModule():
    CLIENT.close()
    assert S.stop() == 0


def fail_point(mode, data=None, name="failCommand"):
    cmd = {"configureFailPoint": name, "mode": mode}
    if data is not None:
        cmd["data"] = data
    return CLIENT.admin.command(cmd)


class RetryableWritesTest(unittest.TestCase):
    """transaction_participant.cpp: per session, the last txnNumber and the statements it ran."""

    def setUp(self):
        self.db = CLIENT.rw
        self.c = self.db[self.id().rsplit(".", 1)[-1]]
        self.c.drop()
        self.session = CLIENT.start_session()
        self.base = next(TXN_BASE)

    def tearDown(self):
        fail_point("off", name="onPrimaryTransactionalWrite")
        self.session.end_session()

    def txn(self, n):
        return Int64(self.base + n)

    def cmd(self, *args, **kwargs):
        return self.db.command(*args, session=self.session, **kwargs)

    def test_a_retried_insert_is_not_applied_twice(self):
        for _ in range(2):
            r = self.cmd("insert", self.c.name, documents=[{"_id": 1}, {"_id": 2}],
                             txnNumber=self.txn(1))
            self.assertEqual(r["n"], 2)
            self.assertNotIn("writeErrors", r)   # not E11000: the statements ran already
        self.assertEqual(self.c.count_documents({}), 2)

    def test_a_retried_update_and_upsert_rebuild_their_result(self):
        self.c.insert_one({"_id": 1, "x": 0})
        updates = [{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}},
                   {"q": {"_id": 2}, "u": {"$inc": {"x": 1}}, "upsert": True}]
        replies = [self.cmd("update", self.c.name, updates=updates, txnNumber=self.txn(7))
                   for _ in range(2)]
        for r in replies:
            self.assertEqual((r["n"], r["nModified"]), (2, 1))
            self.assertEqual(r["upserted"], [{"index": 1, "_id": 2}])
        self.assertEqual(list(self.c.find(sort=[("_id", 1)])),
                         [{"_id": 1, "x": 1}, {"_id": 2, "x": 1}])
        # A new txnNumber is a new write: it runs.
        self.cmd("update", self.c.name, updates=updates[:1], txnNumber=self.txn(8))
        self.assertEqual(self.c.find_one({"_id": 1})["x"], 2)

    def test_a_retried_find_and_modify_returns_its_first_reply(self):
        self.c.insert_one({"_id": 1, "x": 0})
        replies = [self.cmd("findAndModify", self.c.name, query={"_id": 1},
                                update={"$inc": {"x": 1}}, new=True, txnNumber=self.txn(3))
                   for _ in range(2)]
        self.assertEqual([r["value"] for r in replies], [{"_id": 1, "x": 1}] * 2)
        self.assertEqual(self.c.find_one({"_id": 1})["x"], 1)

    def test_an_older_txn_number_is_refused(self):
        self.cmd("insert", self.c.name, documents=[{"_id": 1}], txnNumber=self.txn(5))
        with self.assertRaises(OperationFailure) as cm:
            self.cmd("insert", self.c.name, documents=[{"_id": 2}], txnNumber=self.txn(4))
        self.assertEqual((cm.exception.code, cm.exception.details["codeName"]),
                         (225, "TransactionTooOld"))
        self.assertEqual(self.c.count_documents({}), 1)

    def test_on_primary_transactional_write_close_connection_applies_the_write(self):
        fail_point({"times": 1}, name="onPrimaryTransactionalWrite")
        with self.assertRaises(AutoReconnect):
            self.cmd("update", self.c.name, txnNumber=self.txn(1),
                         updates=[{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}, "upsert": True}])
        self.assertEqual(self.c.find_one({"_id": 1}), {"_id": 1, "x": 1})
        r = self.cmd("update", self.c.name, txnNumber=self.txn(1),
                         updates=[{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}, "upsert": True}])
        self.assertEqual(r["upserted"], [{"index": 0, "_id": 1}])
        self.assertEqual(self.c.find_one({"_id": 1}), {"_id": 1, "x": 1})

    def test_on_primary_transactional_write_fail_before_commit_does_not_apply(self):
        fail_point({"times": 1}, {"closeConnection": False, "failBeforeCommitExceptionCode": 1},
                   name="onPrimaryTransactionalWrite")
        r = self.cmd("insert", self.c.name, documents=[{"_id": 1}], txnNumber=self.txn(1))
        self.assertEqual((r["n"], r["writeErrors"][0]["code"]), (0, 1))
        self.assertEqual(self.c.count_documents({}), 0)
        # Not remembered: the retry runs it.
        r = self.cmd("insert", self.c.name, documents=[{"_id": 1}], txnNumber=self.txn(1))
        self.assertEqual(r["n"], 1)
        self.assertEqual(self.c.count_documents({}), 1)

    def test_without_txn_number_nothing_is_remembered(self):
        self.cmd("insert", self.c.name, documents=[{"_id": 1}])
        r = self.cmd("insert", self.c.name, documents=[{"_id": 1}])
        self.assertEqual(r["writeErrors"][0]["code"], 11000)


class WritesTest(unittest.TestCase):
    def setUp(self):
        self.db = CLIENT.wr
        self.c = self.db[self.id().rsplit(".", 1)[-1]]
        self.c.drop()

    def test_an_id_with_a_dollar_prefixed_field_is_refused(self):
        # ops/insert.cpp fixDocumentForInsert -> BSONObj::storageValidEmbedded.
        r = self.db.command("insert", self.c.name, documents=[{"_id": {"$a": 1}}])
        self.assertEqual(r["writeErrors"][0]["code"], 52)
        self.assertIn("$a is not valid for storage.", r["writeErrors"][0]["errmsg"])
        r = self.db.command("insert", self.c.name, documents=[{"_id": {"a": {"$b": 1}}}])
        self.assertEqual(r["writeErrors"][0]["code"], 52)
        r = self.db.command("insert", self.c.name, documents=[{"_id": [1]}])
        self.assertEqual((r["writeErrors"][0]["code"], r["writeErrors"][0]["errmsg"]),
                         (2, "can't use an array for _id"))
        r = self.db.command("insert", self.c.name, documents=[{"_id": {"a.b": 1}},
                                                               {"_id": {"$ref": "c", "$id": 1}}])
        self.assertEqual(r["n"], 2)

    def test_let_is_refused_where_it_is_not_played(self):
        # The stand-in does not play `let`: it says so rather than ignore it (a $$var in the
        # filter then failed with a misleading "Use of undefined variable", 17276).
        for cmd in (dict(delete=self.c.name, deletes=[{"q": {"$expr": {"$eq": ["$_id", "$$v"]}},
                                                       "limit": 1}], let={"v": 1}),
                    dict(aggregate=self.c.name, pipeline=[], cursor={}, let={"v": 1})):
            with self.assertRaises(OperationFailure) as cm:
                self.db.command(cmd)
            self.assertEqual(cm.exception.code, 2)
            self.assertIn("'let' is not supported", str(cm.exception))

    def test_sort_in_an_update_before_8_0_fails_the_whole_command(self):
        # MongoDB 8.0 added `sort` to update statements; before, the command's parser refuses
        # the unknown field before any statement runs (the spec test updateOne-sort's
        # "server-side error").
        self.c.insert_one({"_id": 1, "x": 0})
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("update", self.c.name, updates=[
                {"q": {"_id": 1}, "u": {"$inc": {"x": 1}}},
                {"q": {"_id": 1}, "u": {"$inc": {"x": 1}}, "sort": {"_id": 1}}])
        self.assertEqual(cm.exception.code, 40415)
        self.assertIn("BSON field 'update.updates.sort' is an unknown field.", str(cm.exception))
        self.assertEqual(self.c.find_one({"_id": 1})["x"], 0)
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("delete", self.c.name, deletes=[{"q": {}, "limit": 1},
                                                            {"q": {}}])
        self.assertEqual(cm.exception.code, 40414)
        self.assertEqual(self.c.count_documents({}), 1)


class ChangeStreamTest(unittest.TestCase):
    def setUp(self):
        self.db = CLIENT.csf
        self.c = self.db[self.id().rsplit(".", 1)[-1]]
        self.c.drop()

    def tearDown(self):
        fail_point("off")

    def test_pipeline_update_reports_truncated_arrays(self):
        # document_diff_calculator.cpp computeArrayDiff: a shorter array is a resize.
        self.c.insert_one({"_id": 1, "a": ["foo", {"b": 1}, 1, 2, 3], "c": [1, 2, 3]})
        with self.c.watch(max_await_time_ms=100) as cs:
            self.c.update_one({"_id": 1}, [{"$set": {"a": ["foo", {"b": 1}], "c": [1, 2, 4]}}])
            ud = next_event(cs)["updateDescription"]
        self.assertEqual(ud["updatedFields"], {"c.2": 4})
        self.assertEqual(ud["truncatedArrays"], [{"field": "a", "newSize": 2}])

    def test_resume_after_another_collections_token_is_280(self):
        # document_source_change_stream_check_resumability.cpp: the token's event is not in
        # this stream, so it cannot be resumed after (the change streams spec's prose test).
        other = self.db[self.c.name + "_other"]
        with other.watch(max_await_time_ms=100) as cs:
            other.insert_one({"_id": 1})
            token = next_event(cs)["_id"]
        with self.assertRaises(OperationFailure) as cm:
            self.c.watch(resume_after=token)
        self.assertEqual(cm.exception.code, 280)
        self.assertIn("NonResumableChangeStreamError", cm.exception.details["errorLabels"])
        # The database's stream shows that event: it resumes.
        self.db.watch(resume_after=token).close()

    def test_unknown_stage_after_change_stream_is_40324(self):
        with self.assertRaises(OperationFailure) as cm:
            self.c.watch([{"$unsupported": "foo"}])
        self.assertEqual(cm.exception.code, 40324)
        with self.assertRaises(OperationFailure) as cm:
            self.c.watch([{"$sort": {"x": 1}}])
        self.assertEqual(cm.exception.code, 20)   # a real stage a change stream refuses

    def test_fail_command_on_a_change_stream_aggregate_is_labelled(self):
        # error_labels.cpp: the aggregate's own command shows the $changeStream.
        fail_point({"times": 1}, {"failCommands": ["aggregate"], "errorCode": 6})
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("aggregate", self.c.name, pipeline=[{"$changeStream": {}}],
                            cursor={})
        self.assertEqual(cm.exception.details["errorLabels"], ["ResumableChangeStreamError"])

    def test_write_concern_error_takes_the_fail_points_labels(self):
        fail_point({"times": 1}, {"failCommands": ["insert"], "errorLabels": ["X"],
                                  "writeConcernError": {"code": 91, "errmsg": "down"}})
        r = self.db.command("insert", self.c.name, documents=[{"_id": time.monotonic_ns()}])
        self.assertEqual((r["writeConcernError"]["code"], r["errorLabels"]), (91, ["X"]))


if __name__ == "__main__":
    unittest.main()
