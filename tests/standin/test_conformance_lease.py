"""Stand-in conformance: what flowwarden's leases (issue 17) ask of the server, checked with
pymongo as MongoDB answers it: update pipelines with $$NOW, conditional findAndModify and
upserts that lose to a held lease with a duplicate key, and failCommand's appName filter with
blockConnection (a renewal that hangs for one client only)."""

import datetime
import os
import sys
import threading
import time
import unittest

import pymongo
from bson.int64 import Int64
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError

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


def acquire_filter(stream, owner):
    """Free, held by owner, or expired by the server's clock (a non-date counts as expired)."""
    return {"_id": stream, "$or": [
        {"owner": None}, {"owner": owner},
        {"$expr": {"$or": [{"$ne": [{"$type": "$expiresAt"}, "date"]},
                           {"$lte": ["$expiresAt", "$$NOW"]}]}}]}


def acquire_update(owner, floor=0):
    return [{"$set": {
        "owner": owner,
        "epoch": {"$add": [{"$max": [{"$cond": [{"$in": [{"$type": "$epoch"}, ["int", "long"]]},
                                                "$epoch", Int64(0)]}, Int64(floor)]}, 1]},
        "renewedAt": "$$NOW",
        "expiresAt": {"$add": ["$$NOW", LEASE_MS]}}}]


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

    def test_a_held_lease_makes_the_upsert_fail_with_a_duplicate_key(self):
        self.c.update_one(acquire_filter("s", "a"), acquire_update("a"), upsert=True)
        with self.assertRaises(DuplicateKeyError):
            self.c.update_one(acquire_filter("s", "b"), acquire_update("b"), upsert=True)
        doc = self.c.find_one()
        self.assertEqual((doc["owner"], doc["epoch"]), ("a", 1))
        # Its own lease: taken again, with the next epoch.
        self.c.update_one(acquire_filter("s", "a"), acquire_update("a"), upsert=True)
        self.assertEqual(self.c.find_one()["epoch"], 2)

    def test_an_expired_lease_is_taken_by_the_servers_clock(self):
        past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
        self.c.insert_one({"_id": "s", "owner": "a", "epoch": Int64(7), "expiresAt": past})
        doc = self.c.find_one_and_update(acquire_filter("s", "b"), acquire_update("b"),
                                         upsert=True, return_document=ReturnDocument.AFTER)
        self.assertEqual((doc["owner"], doc["epoch"]), ("b", 8))
        self.assertIsInstance(doc["epoch"], Int64)
        self.assertEqual(doc["expiresAt"] - doc["renewedAt"], datetime.timedelta(seconds=10))

    def test_a_malformed_lease_counts_as_expired_and_its_epoch_restarts_from_the_floor(self):
        self.c.insert_one({"_id": "s", "owner": 12, "epoch": "x", "expiresAt": "soon"})
        doc = self.c.find_one_and_update(acquire_filter("s", "b"), acquire_update("b", floor=41),
                                         upsert=True, return_document=ReturnDocument.AFTER)
        self.assertEqual((doc["owner"], doc["epoch"]), ("b", 42))

    def test_conditional_renewal_matches_only_owner_and_epoch(self):
        self.c.update_one(acquire_filter("s", "a"), acquire_update("a"), upsert=True)
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
                                       "blockTimeMS": 600})
            t0 = time.monotonic()
            other.lease.blk.update_one({"_id": 1}, {"$set": {"a": 1}})
            self.assertLess(time.monotonic() - t0, 0.4)
            done = []
            th = threading.Thread(target=lambda: done.append(
                lease.lease.blk.update_one({"_id": 0}, {"$set": {"a": 1}}).modified_count))
            t0 = time.monotonic()
            th.start()
            th.join(5)
            self.assertGreaterEqual(time.monotonic() - t0, 0.55)
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
