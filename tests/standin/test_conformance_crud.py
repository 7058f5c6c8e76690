"""Stand-in conformance: CRUD, cursors, aggregate, indexes and namespace commands (pymongo)."""

import datetime
import os
import sys
import unittest

import pymongo
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo import ASCENDING, DESCENDING, ReturnDocument, UpdateOne
from pymongo.errors import (BulkWriteError, DuplicateKeyError, OperationFailure)

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


class CrudTest(unittest.TestCase):
    def setUp(self):
        self.db = CLIENT.crud
        self.c = self.db[self._testMethodName]

    def seed(self):
        self.c.insert_many([{"_id": i, "x": i % 3, "name": "n%d" % i, "tags": ["t%d" % (i % 2)]}
                            for i in range(10)])

    def test_insert_returns_n_and_ids_are_generated(self):
        r = self.c.insert_many([{"a": 1}, {"a": 2}])
        self.assertEqual(len(r.inserted_ids), 2)
        doc = self.c.find_one({"a": 2})
        self.assertEqual(list(doc), ["_id", "a"])

    def test_id_moved_first_and_numeric_ids_compare_equal(self):
        self.c.insert_one({"a": 1, "_id": 5})
        self.assertEqual(list(self.c.find_one()), ["_id", "a"])
        with self.assertRaises(DuplicateKeyError) as cm:
            self.c.insert_one({"_id": 5.0})
        self.assertEqual(cm.exception.details["errmsg"],
                         "E11000 duplicate key error collection: crud.%s index: _id_ dup key: "
                         "{ _id: 5.0 }" % self._testMethodName)
        with self.assertRaises(DuplicateKeyError):
            self.c.insert_one({"_id": Int64(5)})

    def test_ordered_and_unordered_bulk_insert_errors(self):
        with self.assertRaises(BulkWriteError) as cm:
            self.c.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}])
        self.assertEqual(cm.exception.details["nInserted"], 1)
        self.assertEqual(cm.exception.details["writeErrors"][0]["index"], 1)
        with self.assertRaises(BulkWriteError) as cm:
            self.c.insert_many([{"_id": 3}, {"_id": 1}, {"_id": 4}], ordered=False)
        self.assertEqual(cm.exception.details["nInserted"], 2)
        self.assertEqual(self.c.count_documents({}), 3)

    def test_find_filter_sort_projection_skip_limit(self):
        self.seed()
        docs = list(self.c.find({"x": {"$in": [1, 2]}}, {"name": 1, "_id": 0})
                    .sort([("x", DESCENDING), ("_id", ASCENDING)]).skip(1).limit(3))
        self.assertEqual(docs, [{"name": "n5"}, {"name": "n8"}, {"name": "n1"}])
        self.assertEqual(self.c.find_one({"tags": "t1", "x": 0})["_id"], 3)
        self.assertEqual([d["_id"] for d in self.c.find({"$or": [{"_id": 1}, {"x": 2, "_id": {
            "$gt": 5}}]}).sort("_id", 1)], [1, 8])

    def test_cross_type_sort_order(self):
        self.c.insert_many([{"_id": 1, "v": "a"}, {"_id": 2, "v": 3}, {"_id": 3, "v": None},
                            {"_id": 4, "v": {"a": 1}}, {"_id": 5}, {"_id": 6, "v": 1.5}])
        order = [d["_id"] for d in self.c.find().sort([("v", 1), ("_id", 1)])]
        self.assertEqual(order, [3, 5, 6, 2, 1, 4])

    def test_nan_compares_false_to_decimals_and_every_other_number(self):
        # mongod: NaN equals NaN, sorts before every number, and otherwise compares false
        # with $gt/$gte/$lt/$lte (src/mongo/db/matcher/expression_leaf.cpp,
        # ComparisonMatchExpression::matchesSingleElement; jstests/core/nan.js).
        from bson.decimal128 import Decimal128
        self.c.insert_many([{"_id": float("nan")}, {"_id": float("-inf")},
                            {"_id": Decimal128("-0.5")}, {"_id": 1}, {"_id": float("inf")}])
        ids = lambda q: [repr(d["_id"]) for d in self.c.find(q).sort("_id", ASCENDING)]
        self.assertEqual(ids({}), ["nan", "-inf", "Decimal128('-0.5')", "1", "inf"])
        self.assertEqual(ids({"_id": {"$gt": Decimal128("-0.5")}}), ["1", "inf"])
        self.assertEqual(ids({"_id": {"$lt": Decimal128("-0.5")}}), ["-inf"])
        self.assertEqual(ids({"_id": {"$gt": float("nan")}}), [])
        self.assertEqual(ids({"_id": {"$gte": float("nan")}}), ["nan"])
        self.assertEqual(ids({"_id": {"$gte": float("-inf")}}),
                         ["-inf", "Decimal128('-0.5')", "1", "inf"])

    def test_sort_and_ranges_on_id_across_types(self):
        # The _id index (idindex.py): MongoDB's order of BSON types (numbers, strings,
        # objects, ObjectIds, booleans, dates: the manual's "Comparison/Sort Order"), ranges
        # within the bound's type ("type bracketing"), limits, descending, and deletes.
        oid = ObjectId("64b000000000000000000001")
        day = datetime.datetime(2024, 1, 2)
        ids = [day, "b", 7, True, oid, 2.5, {"k": 1}, "a", Int64(-3), 10]
        self.c.insert_many([{"_id": v, "n": i} for i, v in enumerate(ids)])
        self.c.delete_one({"_id": 10})
        asc = [d["_id"] for d in self.c.find().sort("_id", 1)]
        self.assertEqual(asc, [-3, 2.5, 7, "a", "b", {"k": 1}, oid, True, day])
        self.assertEqual([d["_id"] for d in self.c.find().sort("_id", -1)], asc[::-1])
        self.assertEqual([d["_id"] for d in self.c.find({"_id": {"$gt": 2.5}}).sort("_id", 1)],
                         [7])
        self.assertEqual([d["_id"] for d in self.c.find(
            {"$and": [{"_id": {"$gte": "a", "$lte": "b"}}, {"n": {"$gte": 0}}]})
            .sort("_id", -1).limit(1)], ["b"])
        self.assertEqual([d["_id"] for d in self.c.find({"_id": {"$lt": 100}})
                          .sort("_id", 1).skip(1).limit(1)], [2.5])
        self.assertEqual(self.c.find_one({}, sort=[("_id", -1)])["_id"], day)
        self.c.insert_one({"_id": 8})
        self.assertEqual([d["_id"] for d in self.c.find({"_id": {"$gt": 7}}).sort("_id", 1)],
                         [8])

    def test_batch_size_and_get_more_and_kill_cursors(self):
        self.c.insert_many([{"_id": i} for i in range(250)])
        cur = self.c.find().batch_size(100)
        self.assertEqual(len(list(cur)), 250)
        r = self.db.command("find", self.c.name, batchSize=2)
        cid = r["cursor"]["id"]
        self.assertEqual(len(r["cursor"]["firstBatch"]), 2)
        self.assertEqual(r["cursor"]["ns"], "crud." + self.c.name)
        more = self.db.command("getMore", cid, collection=self.c.name, batchSize=3)
        self.assertEqual([d["_id"] for d in more["cursor"]["nextBatch"]], [2, 3, 4])
        k = self.db.command("killCursors", self.c.name, cursors=[cid, Int64(12345)])
        self.assertEqual(k["cursorsKilled"], [cid])
        self.assertEqual(k["cursorsNotFound"], [12345])
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("getMore", cid, collection=self.c.name)
        self.assertEqual((cm.exception.code, cm.exception.details["codeName"]),
                         (43, "CursorNotFound"))
        self.assertEqual(cm.exception.details["errmsg"], "cursor id %d not found" % cid)

    def test_update_operators(self):
        now = datetime.datetime(2024, 1, 1)
        self.c.insert_one({"_id": 1, "a": 1, "n": 5, "arr": [1, 2, 3], "s": [1], "old": 1,
                           "lo": 5, "hi": 5})
        self.c.update_one({"_id": 1}, {
            "$set": {"b.c": 2}, "$unset": {"a": ""}, "$inc": {"n": 2}, "$push": {"arr": 4},
            "$pull": {"s": 1}, "$addToSet": {"tags": "x"}, "$min": {"lo": 3},
            "$max": {"hi": 9}, "$rename": {"old": "new"}, "$currentDate": {"when": True}})
        d = self.c.find_one({"_id": 1})
        self.assertEqual(d["b"], {"c": 2})
        self.assertNotIn("a", d)
        self.assertEqual((d["n"], d["arr"], d["s"], d["tags"], d["lo"], d["hi"], d["new"]),
                         (7, [1, 2, 3, 4], [], ["x"], 3, 9, 1))
        self.assertIsInstance(d["when"], datetime.datetime)
        self.assertGreater(d["when"], now)

    def test_update_many_upsert_and_set_on_insert(self):
        self.seed()
        r = self.c.update_many({"x": 1}, {"$set": {"y": 1}})
        self.assertEqual((r.matched_count, r.modified_count), (3, 3))
        r = self.c.update_many({"x": 1}, {"$set": {"y": 1}})
        self.assertEqual((r.matched_count, r.modified_count), (3, 0))
        r = self.c.update_one({"k": "new"}, {"$set": {"v": 1}, "$setOnInsert": {"c": 1}},
                              upsert=True)
        self.assertIsNotNone(r.upserted_id)
        self.assertEqual(self.c.find_one({"k": "new"}, {"_id": 0}), {"k": "new", "v": 1, "c": 1})
        self.c.update_one({"k": "new"}, {"$set": {"v": 2}, "$setOnInsert": {"c": 9}},
                          upsert=True)
        self.assertEqual(self.c.find_one({"k": "new"})["c"], 1)

    def test_bulk_upserts_by_id_and_binary_no_ops(self):
        # The stand-in's fast paths (an _id point lookup is the match; an operator update's
        # description tells a change from a binary no-op) keep mongod's counts: $set of the
        # same int32 is a no-op, of the same value as a double or an int64 is a change.
        ops = [UpdateOne({"_id": "g%d" % (i % 3)}, {"$inc": {"n": 1}}, upsert=True)
               for i in range(9)]
        r = self.c.bulk_write(ops, ordered=False)
        self.assertEqual((r.upserted_count, r.matched_count, r.modified_count), (3, 6, 6))
        self.assertEqual(sorted((d["_id"], d["n"]) for d in self.c.find()),
                         [("g0", 3), ("g1", 3), ("g2", 3)])
        r = self.c.bulk_write([UpdateOne({"_id": "g0"}, {"$set": {"n": 3}}),
                               UpdateOne({"_id": "g1"}, {"$set": {"n": 3.0}}),
                               UpdateOne({"_id": "g2"}, {"$set": {"n": Int64(3)}}),
                               UpdateOne({"_id": "none"}, {"$set": {"n": 1}})])
        self.assertEqual((r.matched_count, r.modified_count), (3, 2))
        self.assertIsInstance(self.c.find_one({"_id": "g1"})["n"], float)
        self.assertIsInstance(self.c.find_one({"_id": "g2"})["n"], Int64)

    def test_replace_and_immutable_id(self):
        self.c.insert_one({"_id": 1, "a": 1})
        r = self.c.replace_one({"_id": 1}, {"b": 2})
        self.assertEqual(r.modified_count, 1)
        self.assertEqual(self.c.find_one(), {"_id": 1, "b": 2})
        with self.assertRaises(OperationFailure) as cm:
            self.c.update_one({"_id": 1}, {"$set": {"_id": 2}})
        self.assertEqual(cm.exception.code, 66)
        r = self.c.replace_one({"_id": 7}, {"z": 1}, upsert=True)
        self.assertEqual(r.upserted_id, 7)

    def test_delete_one_and_many(self):
        self.seed()
        self.assertEqual(self.c.delete_one({"x": 0}).deleted_count, 1)
        self.assertEqual(self.c.delete_many({"x": 0}).deleted_count, 3)
        self.assertEqual(self.c.count_documents({}), 6)

    def test_find_and_modify(self):
        self.seed()
        d = self.c.find_one_and_update({"x": 2}, {"$inc": {"x": 10}}, sort=[("_id", -1)],
                                       return_document=ReturnDocument.AFTER)
        self.assertEqual((d["_id"], d["x"]), (8, 12))
        d = self.c.find_one_and_replace({"_id": 0}, {"r": 1}, projection={"_id": 0, "x": 1})
        self.assertEqual(d, {"x": 0})
        d = self.c.find_one_and_delete({"_id": 1})
        self.assertEqual(d["_id"], 1)
        self.assertIsNone(self.c.find_one({"_id": 1}))
        d = self.c.find_one_and_update({"_id": 99}, {"$set": {"u": 1}}, upsert=True,
                                       return_document=ReturnDocument.AFTER)
        self.assertEqual(d, {"_id": 99, "u": 1})
        r = self.db.command("findAndModify", self.c.name, query={"_id": 1000},
                            update={"$set": {"a": 1}})
        self.assertEqual(r["lastErrorObject"], {"n": 0, "updatedExisting": False})
        self.assertIsNone(r["value"])

    def test_count_and_distinct(self):
        self.seed()
        self.assertEqual(self.db.command("count", self.c.name, query={"x": 1})["n"], 3)
        self.assertEqual(self.db.command("count", self.c.name, skip=2, limit=5)["n"], 5)
        self.assertEqual(sorted(self.c.distinct("x")), [0, 1, 2])
        self.assertEqual(sorted(self.c.distinct("tags", {"x": 1})), ["t0", "t1"])

    def test_aggregate_stages(self):
        self.seed()
        out = list(self.c.aggregate([
            {"$match": {"_id": {"$lt": 9}}}, {"$unwind": "$tags"},
            {"$group": {"_id": "$x", "n": {"$sum": 1}, "lo": {"$min": "$_id"},
                        "hi": {"$max": "$_id"}, "first": {"$first": "$name"},
                        "last": {"$last": "$name"}, "all": {"$push": "$_id"}}},
            {"$sort": {"_id": -1}}, {"$skip": 1}, {"$limit": 1},
            {"$addFields": {"k": "$n"}}, {"$project": {"all": 0}}]))
        self.assertEqual(out, [{"_id": 1, "n": 3, "lo": 1, "hi": 7, "first": "n1",
                                "last": "n7", "k": 3}])
        self.assertEqual(list(self.c.aggregate([{"$count": "total"}])), [{"total": 10}])

    def test_aggregate_errors(self):
        with self.assertRaises(OperationFailure):
            self.db.command("aggregate", self.c.name, pipeline=[{"$bogus": {}}], cursor={})
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("aggregate", self.c.name, pipeline=[])
        self.assertIn("'cursor' option is required", str(cm.exception))


class IndexTest(unittest.TestCase):
    def setUp(self):
        self.db = CLIENT.idx
        self.c = self.db[self._testMethodName]

    def test_unique_index_errors_have_mongod_shape(self):
        self.c.create_index([("email", 1)], unique=True)
        self.c.insert_one({"email": "a@x", "n": 1})
        with self.assertRaises(DuplicateKeyError) as cm:
            self.c.insert_one({"email": "a@x"})
        d = cm.exception.details
        self.assertEqual(d["keyPattern"], {"email": 1})
        self.assertEqual(d["keyValue"], {"email": "a@x"})
        self.assertEqual(d["errmsg"], 'E11000 duplicate key error collection: idx.%s index: '
                         'email_1 dup key: { email: "a@x" }' % self._testMethodName)
        self.c.insert_one({"other": 1})
        with self.assertRaises(DuplicateKeyError) as cm:
            self.c.insert_one({"other": 2})
        self.assertIn("dup key: { email: null }", str(cm.exception))
        self.c.insert_one({"email": "b@x"})
        with self.assertRaises(DuplicateKeyError):
            self.c.update_one({"email": "b@x"}, {"$set": {"email": "a@x"}})

    def test_compound_unique_and_creation_over_duplicates(self):
        self.c.insert_many([{"a": 1, "b": 1}, {"a": 1, "b": 2}])
        self.c.create_index([("a", 1), ("b", 1)], unique=True)
        with self.assertRaises(DuplicateKeyError) as cm:
            self.c.insert_one({"a": 1, "b": 2})
        self.assertIn("index: a_1_b_1 dup key: { a: 1, b: 2 }", str(cm.exception))
        with self.assertRaises(OperationFailure) as cm:
            self.c.create_index("a", unique=True)
        self.assertEqual(cm.exception.code, 11000)

    def test_dlq_upsert_keyed_on_two_fields_with_partial_unique_index(self):
        # What flowwarden's DLQ store does (src/runtime/dlq/dlq_store.c): a
        # partial unique index on (streamName, eventId), refused with 11000
        # over duplicates; an upsert that inserts with $setOnInsert (its _id
        # included) and later only $set/$inc/$push ... $slice.
        spec = [{"key": {"streamName": 1, "eventId": 1}, "name": "fw_stream_event_unique",
                 "unique": True, "partialFilterExpression": {"eventId": {"$exists": True}}}]
        self.c.insert_many([{"_id": 1, "streamName": "s", "eventId": "e"},
                            {"_id": 2, "streamName": "s", "eventId": "e"},
                            {"_id": 3, "streamName": "s"}, {"_id": 4, "streamName": "s"}])
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("createIndexes", self.c.name, indexes=spec)
        self.assertEqual(cm.exception.code, 11000)
        self.assertNotIn("fw_stream_event_unique", [i["name"] for i in self.c.list_indexes()])
        groups = list(self.c.aggregate([
            {"$match": {"eventId": {"$exists": True}}},
            {"$group": {"_id": {"s": "$streamName", "e": "$eventId"}, "n": {"$sum": 1}}},
            {"$match": {"n": {"$gt": 1}}}, {"$count": "groups"}]))
        self.assertEqual(groups, [{"groups": 1}])
        # Documents without eventId are outside the partial index.
        self.c.delete_one({"_id": 2})
        self.db.command("createIndexes", self.c.name, indexes=spec)
        with self.assertRaises(DuplicateKeyError):
            self.c.insert_one({"_id": 5, "streamName": "s", "eventId": "e"})

        def enqueue(n, at):
            return self.c.update_one(
                {"streamName": "s", "eventId": "new"},
                {"$setOnInsert": {"_id": "uuid", "operationType": "INSERT", "createdAt": at},
                 "$set": {"status": "PENDING", "lastTouched": at},
                 "$inc": {"attempts": 3},
                 "$push": {"history": {"$each": [{"at": at, "n": n}], "$slice": -2}}},
                upsert=True)
        t = [datetime.datetime(2026, 1, 1, 0, 0, i) for i in range(3)]
        self.assertEqual(enqueue(0, t[0]).upserted_id, "uuid")
        d = self.c.find_one({"_id": "uuid"})
        # mongod: _id first, then the query's equality fields sorted by path,
        # then the update's fields in lexicographic order.
        self.assertEqual(list(d), ["_id", "eventId", "streamName", "attempts", "createdAt",
                                   "history", "lastTouched", "operationType", "status"])
        r = enqueue(1, t[1])
        self.assertEqual((r.matched_count, r.modified_count, r.upserted_id), (1, 1, None))
        enqueue(2, t[2])
        d = self.c.find_one({"_id": "uuid"})
        self.assertEqual((d["attempts"], d["createdAt"], d["lastTouched"]), (9, t[0], t[2]))
        self.assertIs(type(d["attempts"]), int)
        self.assertEqual(d["history"], [{"at": t[1], "n": 1}, {"at": t[2], "n": 2}])
        self.assertEqual(self.c.count_documents({"eventId": "new"}), 1)

    def test_sparse_unique_skips_missing(self):
        self.c.create_index("s", unique=True, sparse=True)
        self.c.insert_many([{"x": 1}, {"x": 2}])
        self.assertEqual(self.c.count_documents({}), 2)

    def test_list_and_drop_indexes(self):
        self.c.create_index("a")
        self.c.create_index([("b", -1)], name="bee", expireAfterSeconds=60)
        r = self.db.command("createIndexes", self.c.name,
                            indexes=[{"key": {"a": 1}, "name": "a_1"}])
        self.assertEqual(r["note"], "all indexes already exist")
        specs = {ix["name"]: ix for ix in self.c.list_indexes()}
        self.assertEqual(set(specs), {"_id_", "a_1", "bee"})
        self.assertEqual(specs["bee"]["expireAfterSeconds"], 60)
        self.assertEqual(dict(specs["_id_"]["key"]), {"_id": 1})
        self.c.drop_index("a_1")
        with self.assertRaises(OperationFailure) as cm:
            self.c.drop_index("a_1")
        self.assertEqual(cm.exception.code, 27)
        with self.assertRaises(OperationFailure) as cm:
            self.c.drop_index("_id_")
        self.assertEqual(cm.exception.code, 72)
        self.c.drop_indexes()
        self.assertEqual([ix["name"] for ix in self.c.list_indexes()], ["_id_"])
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("listIndexes", "nothere")
        self.assertEqual(cm.exception.code, 26)


class NamespaceTest(unittest.TestCase):
    def test_create_list_drop(self):
        db = CLIENT.ns1
        db.create_collection("a")
        with self.assertRaises(OperationFailure) as cm:
            db.command("create", "a")
        self.assertEqual((cm.exception.code, cm.exception.details["errmsg"]),
                         (48, "Collection already exists. NS: ns1.a"))
        db.b.insert_one({})
        self.assertEqual(sorted(db.list_collection_names()), ["a", "b"])
        info = list(db.list_collections(filter={"name": "a"}))
        self.assertEqual(info[0]["type"], "collection")
        self.assertIn("uuid", info[0]["info"])
        self.assertIn("ns1", CLIENT.list_database_names())
        r = db.command("drop", "a")
        self.assertEqual(r["ns"], "ns1.a")
        with self.assertRaises(OperationFailure) as cm:
            db.command("drop", "a")
        self.assertEqual((cm.exception.code, cm.exception.details["errmsg"]),
                         (26, "ns not found"))
        CLIENT.drop_database("ns1")
        self.assertNotIn("ns1", CLIENT.list_database_names())

    def test_list_databases_shape(self):
        CLIENT.ns2.c.insert_one({})
        r = CLIENT.admin.command("listDatabases")
        names = [d["name"] for d in r["databases"]]
        self.assertIn("admin", names)
        self.assertIn("ns2", names)
        self.assertIn("totalSize", r)
        self.assertEqual(CLIENT.admin.command("listDatabases", nameOnly=True)["databases"][0],
                         {"name": "admin"})

    def test_rename_collection(self):
        db = CLIENT.ns3
        db.src.insert_one({"_id": 1})
        db.src.create_index("a")
        db.src.rename("dst")
        self.assertEqual(db.dst.find_one(), {"_id": 1})
        self.assertIn("a_1", [ix["name"] for ix in db.dst.list_indexes()])
        self.assertNotIn("src", db.list_collection_names())
        db.other.insert_one({})
        with self.assertRaises(OperationFailure) as cm:
            db.dst.rename("other")
        self.assertEqual(cm.exception.code, 48)
        db.dst.rename("other", dropTarget=True)
        self.assertEqual(db.other.find_one(), {"_id": 1})
        with self.assertRaises(OperationFailure) as cm:
            db.missing.rename("x")
        self.assertEqual(cm.exception.code, 26)
        with self.assertRaises(OperationFailure) as cm:
            db.command("renameCollection", "ns3.other", to="ns3.y")
        self.assertEqual(cm.exception.code, 13)

    def test_coll_mod_and_create_with_pre_post_images(self):
        db = CLIENT.ns4
        db.create_collection("a", changeStreamPreAndPostImages={"enabled": True})
        info = next(db.list_collections(filter={"name": "a"}))
        self.assertEqual(info["options"], {"changeStreamPreAndPostImages": {"enabled": True}})
        db.command("collMod", "a", changeStreamPreAndPostImages={"enabled": False})
        info = next(db.list_collections(filter={"name": "a"}))
        self.assertEqual(info["options"], {})
        with self.assertRaises(OperationFailure) as cm:
            db.command("collMod", "nothere", changeStreamPreAndPostImages={"enabled": True})
        self.assertEqual(cm.exception.code, 26)
        with self.assertRaises(OperationFailure) as cm:
            db.command("create", "capped", capped=True, size=100)
        self.assertIn("not supported", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
