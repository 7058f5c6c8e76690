"""Stand-in conformance: what flowwarden's leases (issues 17, 23) ask of the server, checked
with pymongo as MongoDB answers it: update pipelines with $$NOW, the take (an upsert on _id
alone that decides inside its update pipeline), the refusal of $expr in any upsert's query, and
failCommand's appName filter with blockConnection (a renewal that hangs for one client only)."""

import datetime
import os
import sys
import threading
import time
import unittest

import pymongo
from bson.int64 import Int64
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure, WriteError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn  # noqa: E402

S = None
CLIENT = None

LEASE_MS = 10000


def setUpModule():
    global S, CLIENT
    S = StandIn()
    S.start()
    CLIENT = pymongo.MongoClient(S.uri, tz_aware=True)


def tearDownModule():
    CLIENT.close()
    assert S.stop() == 0


# The take as src/runtime/ha/lease_store.c sends it: the query is the _id alone (MongoDB refuses
# $expr in an upsert's query), and $replaceWith keeps the document unless the lease is free,
# the taker's, or expired by the server's $$NOW (a non-date expiresAt counts as expired).
def takeable(owner):
    return {"$or": [{"$in": [{"$type": "$owner"}, ["missing", "null"]]},
                    {"$eq": ["$owner", {"$literal": owner}]},
                    {"$ne": [{"$type": "$expiresAt"}, "date"]},
                    {"$lte": ["$expiresAt", "$$NOW"]}]}


def take_update(owner, floor=0):
    epoch = {"$add": [{"$max": [{"$cond": [{"$in": [{"$type": "$epoch"}, ["int", "long"]]},
                                           "$epoch", Int64(0)]}, Int64(floor)]}, Int64(1)]}
    return [{"$replaceWith": {"$cond": [
        takeable(owner),
        {"$mergeObjects": ["$$ROOT", {"owner": {"$literal": owner}, "epoch": epoch,
                                      "renewedAt": "$$NOW",
                                      "expiresAt": {"$add": ["$$NOW", LEASE_MS]}}]},
        "$$ROOT"]}}]


def take(coll, stream, owner, floor=0):
    return coll.find_one_and_update({"_id": stream}, take_update(owner, floor), upsert=True,
                                    return_document=ReturnDocument.AFTER)


# The old take's query, refused by every MongoDB from 5.0 to 8.x.
def expr_filter(stream, owner):
    return {"_id": stream, "$or": [
        {"owner": None}, {"owner": owner},
        {"$expr": {"$or": [{"$ne": [{"$type": "$expiresAt"}, "date"]},
                           {"$lte": ["$expiresAt", "$$NOW"]}]}}]}


EXPR_UPSERT_MSG = "$expr is not allowed in the query predicate for an upsert"


class PipelineUpdateTest(unittest.TestCase):
    def setUp(self):
        self.c = CLIENT.lease[self._testMethodName]

    def test_now_is_the_servers_date_and_one_value_per_operation(self):
        before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
        self.c.update_one({"_id": 1}, [{"$set": {"a": "$$NOW", "b": "$$NOW",
                                                  "c": {"$add": ["$$NOW", 1500]}}}], upsert=True)
        doc = self.c.find_one({"_id": 1})
        self.assertIsInstance(doc["a"], datetime.datetime)
        self.assertEqual(doc["a"], doc["b"])
        self.assertEqual(doc["c"] - doc["a"], datetime.timedelta(milliseconds=1500))
        self.assertGreater(doc["a"], before)

    def test_upsert_seeds_from_the_filters_equalities(self):
        r = self.c.update_one({"_id": "s", "$or": [{"owner": None}, {"owner": "me"}]},
                              [{"$set": {"owner": "me", "n": {"$add": [{"$ifNull": ["$n", 0]},
                                                                      1]}}}], upsert=True)
        self.assertEqual(r.upserted_id, "s")
        self.assertEqual(self.c.find_one(), {"_id": "s", "owner": "me", "n": 1})
        self.c.update_one({"_id": "s"}, [{"$set": {"n": {"$add": ["$n", 1]}}}])
        self.assertEqual(self.c.find_one()["n"], 2)

    def test_a_missing_lease_is_inserted_with_the_epoch_above_the_floor(self):
        doc = take(self.c, "s", "a", floor=6)
        self.assertEqual(list(doc), ["_id", "owner", "epoch", "renewedAt", "expiresAt"])
        self.assertEqual((doc["_id"], doc["owner"], doc["epoch"]), ("s", "a", 7))
        self.assertIsInstance(doc["epoch"], Int64)
        self.assertEqual(doc["expiresAt"] - doc["renewedAt"], datetime.timedelta(seconds=10))

    def test_a_held_lease_comes_back_unchanged_and_is_not_written(self):
        held = take(self.c, "s", "a")
        with self.c.watch() as cs:
            got = take(self.c, "s", "b")
            self.assertEqual(got, held)  # the loser learns who holds it, and the epoch
            self.c.insert_one({"_id": "marker"})
            ev = cs.next()
        # No write for the losing take: the first event after it is the marker's.
        self.assertEqual((ev["operationType"], ev["documentKey"]["_id"]), ("insert", "marker"))
        self.assertEqual(self.c.find_one({"_id": "s"}), held)
        # Its own lease: taken again, with the next epoch.
        self.assertEqual(take(self.c, "s", "a")["epoch"], 2)

    def test_a_released_lease_is_free(self):
        take(self.c, "s", "a")
        self.c.update_one({"_id": "s", "owner": "a"}, [{"$set": {"owner": None,
                                                                 "expiresAt": "$$NOW"}}])
        doc = take(self.c, "s", "b")
        self.assertEqual((doc["owner"], doc["epoch"]), ("b", 2))

    def test_an_owner_id_is_never_read_as_a_field_path(self):
        self.c.insert_one({"_id": "s", "owner": "x", "epoch": Int64(1),
                           "expiresAt": datetime.datetime(2999, 1, 1)})
        doc = take(self.c, "s", "$owner")
        self.assertEqual(doc["owner"], "x")

    def test_an_expired_lease_is_taken_by_the_servers_clock(self):
        past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
        self.c.insert_one({"_id": "s", "owner": "a", "epoch": Int64(7), "expiresAt": past})
        doc = take(self.c, "s", "b")
        self.assertEqual((doc["owner"], doc["epoch"]), ("b", 8))
        self.assertIsInstance(doc["epoch"], Int64)
        self.assertEqual(doc["expiresAt"] - doc["renewedAt"], datetime.timedelta(seconds=10))

    def test_a_malformed_lease_counts_as_expired_and_its_epoch_restarts_from_the_floor(self):
        self.c.insert_one({"_id": "s", "owner": 12, "epoch": "x", "expiresAt": "soon"})
        doc = take(self.c, "s", "b", floor=41)
        self.assertEqual((doc["owner"], doc["epoch"]), ("b", 42))

    def test_conditional_renewal_matches_only_owner_and_epoch(self):
        take(self.c, "s", "a")
        renew = [{"$set": {"renewedAt": "$$NOW", "expiresAt": {"$add": ["$$NOW", LEASE_MS]}}}]
        self.assertEqual(self.c.update_one({"_id": "s", "owner": "a", "epoch": 2}, renew)
                         .matched_count, 0)
        self.assertEqual(self.c.update_one({"_id": "s", "owner": "a", "epoch": 1}, renew)
                         .matched_count, 1)

    def test_stages_not_allowed_in_an_update(self):
        self.c.insert_one({"_id": 1})
        with self.assertRaises(WriteError) as cm:
            self.c.update_one({"_id": 1}, [{"$match": {"_id": 1}}])
        self.assertEqual(cm.exception.code, 72)
        self.assertEqual(cm.exception.details["errmsg"],
                         "$match is not allowed to be used within an update")
        with self.assertRaises(OperationFailure) as cm:
            self.c.find_one_and_update({"_id": 1}, [{"$sort": {"a": 1}}])
        self.assertEqual(cm.exception.code, 72)

    def test_id_is_kept_when_a_stage_drops_it_and_may_not_change(self):
        self.c.insert_one({"_id": 1, "a": 1})
        self.c.update_one({"_id": 1}, [{"$project": {"b": "$a"}}])
        self.assertEqual(self.c.find_one(), {"_id": 1, "b": 1})
        with self.assertRaises(WriteError) as cm:
            self.c.update_one({"_id": 1}, [{"$set": {"_id": 2}}])
        self.assertEqual(cm.exception.code, 66)

    def test_the_change_event_is_an_update_with_the_delta(self):
        self.c.insert_one({"_id": 1, "a": 1, "sub": {"x": 1, "y": 1}, "gone": True})
        with self.c.watch() as cs:
            self.c.update_one({"_id": 1}, [{"$set": {"a": 2, "sub.y": 2, "new": "$a"}},
                                           {"$unset": "gone"}])
            ev = cs.next()
        self.assertEqual(ev["operationType"], "update")
        self.assertEqual(ev["updateDescription"]["updatedFields"],
                         {"a": 2, "sub.y": 2, "new": 1})
        self.assertEqual(ev["updateDescription"]["removedFields"], ["gone"])

    def test_expr_now_in_a_filter(self):
        past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
        future = past + datetime.timedelta(seconds=60)
        self.c.insert_many([{"_id": 1, "t": past}, {"_id": 2, "t": future}])
        got = [d["_id"] for d in self.c.find({"$expr": {"$lte": ["$t", "$$NOW"]}})]
        self.assertEqual(got, [1])


class ExprInUpsertQueryTest(unittest.TestCase):
    """MongoDB parses an upsert's query without the $expr feature, at any depth, and rewords
    the refusal: parsed_update.cpp (5.0, 6.x), parsed_update_base.cpp (7.0),
    canonical_update.cpp (8.x); the matcher's own refusal is parseExpr in
    matcher/expression_parser.cpp, which first refuses $expr below the top-level document."""

    def setUp(self):
        self.c = CLIENT.lease[self._testMethodName]
        self.c.insert_one({"_id": "s", "owner": None})

    QUERIES = [
        expr_filter("s", "a"),
        {"$expr": {"$eq": ["$_id", "s"]}},
        {"_id": "s", "$and": [{"$nor": [{"$expr": {"$eq": ["$owner", 1]}}]}]},
    ]

    def test_find_and_modify_upsert_is_refused(self):
        for q in self.QUERIES:
            with self.subTest(q=q):
                with self.assertRaises(OperationFailure) as cm:
                    self.c.find_one_and_update(q, take_update("a"), upsert=True)
                self.assertEqual(cm.exception.code, 224)
                self.assertEqual(cm.exception.details["codeName"], "QueryFeatureNotAllowed")
                self.assertEqual(cm.exception.details["errmsg"], EXPR_UPSERT_MSG)
        self.assertEqual(self.c.find_one(), {"_id": "s", "owner": None})

    def test_update_upsert_is_refused_as_a_write_error(self):
        for q in self.QUERIES:
            with self.subTest(q=q):
                with self.assertRaises(WriteError) as cm:
                    self.c.update_one(q, {"$set": {"owner": "a"}}, upsert=True)
                self.assertEqual(cm.exception.code, 224)
                self.assertEqual(cm.exception.details["errmsg"], EXPR_UPSERT_MSG)
        with self.assertRaises(WriteError) as cm:
            self.c.replace_one({"$expr": {"$eq": ["$_id", "t"]}}, {"a": 1}, upsert=True)
        self.assertEqual(cm.exception.code, 224)
        self.assertEqual(self.c.count_documents({}), 1)

    def test_without_upsert_expr_is_allowed(self):
        q = expr_filter("s", "a")
        self.assertEqual(self.c.update_one(q, {"$set": {"owner": "a"}}).matched_count, 1)
        doc = self.c.find_one_and_update({"$expr": {"$eq": ["$owner", "a"]}},
                                         {"$set": {"owner": "b"}},
                                         return_document=ReturnDocument.AFTER)
        self.assertEqual(doc["owner"], "b")

    def test_expr_below_the_top_level_document_is_a_bad_value(self):
        self.c.insert_one({"_id": "arr", "a": [{"b": 1}]})
        with self.assertRaises(OperationFailure) as cm:
            list(self.c.find({"a": {"$elemMatch": {"$expr": {"$eq": ["$b", 1]}}}}))
        self.assertEqual(cm.exception.code, 2)
        self.assertEqual(cm.exception.details["errmsg"],
                         "$expr can only be applied to the top-level document")


class BlockedRenewalTest(unittest.TestCase):
    """A renewal that hangs: blockConnection without errorCode delays the command, then runs it,
    and only for the client whose appname the fail point names."""

    def tearDown(self):
        CLIENT.admin.command("configureFailPoint", "failCommand", mode="off")

    def test_block_connection_filters_by_app_name_and_then_runs_the_command(self):
        lease = pymongo.MongoClient(S.uri, appname="flowwarden-lease")
        other = pymongo.MongoClient(S.uri, appname="flowwarden")
        try:
            lease.lease.blk.insert_one({"_id": 0})  # connect before the fail point
            other.lease.blk.insert_one({"_id": 1})
            CLIENT.admin.command("configureFailPoint", "failCommand", mode="alwaysOn",
                                 data={"failCommands": ["update", "findAndModify"],
                                       "appName": "flowwarden-lease", "blockConnection": True,
                                       "blockTimeMS": 2000})
            done = []
            th = threading.Thread(target=lambda: done.append(
                lease.lease.blk.update_one({"_id": 0}, {"$set": {"a": 1}}).modified_count))
            t0 = time.monotonic()
            th.start()
            # The other client's update, sent once the lease's is on its way, is answered
            # before it: not held (an order, not a wall-clock bound a loaded machine can break).
            other.lease.blk.update_one({"_id": 1}, {"$set": {"a": 1}})
            self.assertEqual(done, [], "the other client's update waited for the held one")
            th.join(10)
            self.assertGreaterEqual(time.monotonic() - t0, 1.95)
            self.assertEqual(done, [1])
        finally:
            lease.close()
            other.close()

    def test_app_name_filter_with_an_error_code_fails_only_that_client(self):
        lease = pymongo.MongoClient(S.uri, appname="flowwarden-lease", retryWrites=False)
        try:
            CLIENT.admin.command("configureFailPoint", "failCommand", mode={"times": 2},
                                 data={"failCommands": ["update"], "errorCode": 96,
                                       "appName": "flowwarden-lease"})
            CLIENT.lease.app.update_one({"_id": 1}, {"$set": {"a": 1}}, upsert=True)
            with self.assertRaises(OperationFailure) as cm:
                lease.lease.app.update_one({"_id": 1}, {"$set": {"a": 2}})
            self.assertEqual(cm.exception.code, 96)
            self.assertEqual(CLIENT.lease.app.find_one()["a"], 1)
        finally:
            lease.close()


if __name__ == "__main__":
    unittest.main()
