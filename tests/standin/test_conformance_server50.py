"""Stand-in conformance: the stand-in playing MongoDB 5.0 (--server-version 5.0), checked with
pymongo as a 5.0 server answers it.

- Identity: hello's maxWireVersion 13 and buildInfo's version 5.0 (src/mongo/db/wire_version.h).
- Blocking sorts: a sort no index serves, over more than 100 MB, fails with 292
  QueryExceededMemoryLimitNoDiskUseAllowed "Sort exceeded memory limit of 104857600 bytes, but
  did not opt in to external sorting." unless allowDiskUse is true (src/mongo/db/sorter/
  sorter.cpp and src/mongo/db/exec/sort_executor.cpp at r5.0; manual: cursor.allowDiskUse(),
  "allowDiskUseByDefault" (6.0+), find accepts allowDiskUse since 4.4). A 6.0 stand-in spills.
- Change streams: fullDocument "whenAvailable"/"required" is refused at open with 40575
  (document_source_change_stream.cpp at r5.0: fullDocument is a plain string there, checked
  against "default"/"updateLookup"); fullDocumentBeforeChange is accepted (its enum exists in
  5.0's document_source_change_stream.idl) but pre-images come only from a collection's
  recordPreImages, so "required" fails each update with 51770
  (document_source_lookup_change_pre_image.cpp); $changeStreamSplitLargeEvent is an unknown
  stage (40324).
"""

import os
import sys
import unittest

import pymongo
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn, next_event  # noqa: E402

S50 = None
S60 = None
C50 = None
C60 = None

MB = 1024 * 1024
SORT_MSG = ("Sort exceeded memory limit of 104857600 bytes, but did not opt in to external "
            "sorting.")


def setUpModule():
    global S50, S60, C50, C60
    S50 = StandIn(["--server-version", "5.0"])
    S50.start()
    S60 = StandIn()
    S60.start()
    C50 = pymongo.MongoClient(S50.uri)
    C60 = pymongo.MongoClient(S60.uri)


def tearDownModule():
    C50.close()
    C60.close()
    assert S50.stop() == 0
    assert S60.stop() == 0


def fill(coll, n=105, size=MB):
    """n documents of about `size` bytes each (just over 100 MB with the defaults)."""
    pad = "x" * size
    for i in range(n):
        coll.insert_one({"_id": i, "s": "a", "k": n - i, "t": i % 7, "pad": pad})


class IdentityTest(unittest.TestCase):
    def test_hello_and_build_info_say_5_0(self):
        hello = C50.admin.command("hello")
        self.assertEqual(hello["maxWireVersion"], 13)
        info = C50.admin.command("buildInfo")
        self.assertEqual(info["version"], "5.0.0")
        self.assertEqual(info["versionArray"][:2], [5, 0])
        self.assertEqual(C60.admin.command("hello")["maxWireVersion"], 17)

    def test_bad_version_is_refused(self):
        s = StandIn(["--server-version", "4.2"])
        with self.assertRaises(Exception) as cm:
            s.start()
        self.assertIn("must be 5.0, 6.0 or 7.0, got 4.2", str(cm.exception))


class BlockingSortTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c50 = C50.sort.big
        cls.c60 = C60.sort.big
        fill(cls.c50)
        fill(cls.c60)

    def assert_refused(self, fn, context):
        with self.assertRaises(OperationFailure) as cm:
            fn()
        self.assertEqual(cm.exception.code, 292)
        self.assertEqual(cm.exception.details["codeName"],
                         "QueryExceededMemoryLimitNoDiskUseAllowed")
        self.assertEqual(cm.exception.details["errmsg"], context + " :: caused by :: " + SORT_MSG)

    def test_unindexed_find_sort_over_100_mb_fails(self):
        self.assert_refused(lambda: list(self.c50.find({}, {"pad": 0}).sort("k", 1)),
                            "Executor error during find command")

    def test_allow_disk_use_lets_it_through(self):
        docs = list(self.c50.find({}, {"_id": 1}).sort("k", 1).allow_disk_use(True))
        self.assertEqual([d["_id"] for d in docs[:2]], [104, 103])

    def test_a_6_0_server_spills_without_asking(self):
        docs = list(self.c60.find({}, {"_id": 1}).sort("k", 1))
        self.assertEqual(len(docs), 105)

    def test_under_the_limit_is_fine(self):
        # A top-k sort keeps only `limit` documents in memory.
        docs = list(self.c50.find({}, {"_id": 1}).sort("k", 1).limit(10))
        self.assertEqual(len(docs), 10)
        docs = list(self.c50.find({"t": 3}, {"_id": 1}).sort("k", 1))
        self.assertEqual(len(docs), 15)

    def test_an_index_that_gives_the_order_serves_the_sort(self):
        c = C50.sort.indexed
        fill(c)
        try:
            self.assert_refused(lambda: list(c.find({"s": "a"}, {"_id": 1}).sort("k", 1)),
                                "Executor error during find command")
            c.create_index([("s", 1), ("k", 1), ("_id", 1)])
            self.assertEqual(len(list(c.find({"s": "a"}, {"_id": 1}).sort("k", 1))), 105)
            # Reversed in every key: the index is walked backwards.
            self.assertEqual(len(list(c.find({"s": "a"}, {"_id": 1}).sort(
                [("k", -1), ("_id", -1)]))), 105)
            # Equality inside $and counts too.
            self.assertEqual(len(list(c.find({"$and": [{"s": "a"}, {"t": {"$gte": 0}}]},
                                             {"_id": 1}).sort("k", 1))), 105)
            # Not the index's order: a blocking sort again.
            self.assert_refused(lambda: list(c.find({"s": "a"}, {"_id": 1}).sort(
                [("k", 1), ("_id", -1)])), "Executor error during find command")
            # Without the equality on its first key the index does not give k's order.
            self.assert_refused(lambda: list(c.find({}, {"_id": 1}).sort("k", 1)),
                                "Executor error during find command")
        finally:
            c.drop()

    def test_aggregate_sort(self):
        self.assert_refused(lambda: list(self.c50.aggregate([{"$sort": {"k": 1}},
                                                            {"$project": {"_id": 1}}])),
                            "PlanExecutor error during aggregation")
        docs = list(self.c50.aggregate([{"$sort": {"k": 1}}, {"$project": {"_id": 1}}],
                                       allowDiskUse=True))
        self.assertEqual(len(docs), 105)
        docs = list(self.c50.aggregate([{"$sort": {"k": 1}}, {"$limit": 3},
                                        {"$project": {"_id": 1}}]))
        self.assertEqual([d["_id"] for d in docs], [104, 103, 102])


class ChangeStreamOptionsTest(unittest.TestCase):
    def test_full_document_whenavailable_and_required_are_refused_at_open(self):
        for mode in ("whenAvailable", "required"):
            with self.assertRaises(OperationFailure) as cm:
                C50.cs.c.watch(full_document=mode)
            self.assertEqual(cm.exception.code, 40575)
            self.assertEqual(cm.exception.details["errmsg"],
                             "unrecognized value for the 'fullDocument' option to the "
                             "$changeStream stage. Expected \"default\" or \"updateLookup\", "
                             "got \"%s\"" % mode)
        with C60.cs.c.watch(full_document="whenAvailable"):
            pass

    def test_update_lookup_still_works(self):
        with C50.cs.u.watch(full_document="updateLookup") as cs:
            C50.cs.u.insert_one({"_id": 1})
            C50.cs.u.update_one({"_id": 1}, {"$set": {"a": 1}})
            self.assertEqual(next_event(cs)["operationType"], "insert")
            self.assertEqual(next_event(cs)["fullDocument"], {"_id": 1, "a": 1})

    def test_before_change_required_fails_each_update(self):
        # pymongo 3.11 has no full_document_before_change: the commands by hand.
        db = C50.cs
        reply = db.command("aggregate", "b", pipeline=[
            {"$changeStream": {"fullDocumentBeforeChange": "required"}}], cursor={})
        cid = reply["cursor"]["id"]
        db.b.insert_one({"_id": 1})
        db.b.update_one({"_id": 1}, {"$set": {"a": 1}})
        with self.assertRaises(OperationFailure) as cm:
            for _ in range(20):     # the insert comes first; the update fails the getMore
                db.command("getMore", cid, collection="b", maxTimeMS=100)
        self.assertEqual(cm.exception.code, 51770)
        self.assertIn("but no pre-image optime was recorded for event:",
                      cm.exception.details["errmsg"])

    def test_split_stage_is_unknown(self):
        with self.assertRaises(OperationFailure) as cm:
            C50.cs.s.watch([{"$changeStreamSplitLargeEvent": {}}])
        self.assertEqual(cm.exception.code, 40324)


if __name__ == "__main__":
    unittest.main()
