"""Stand-in conformance: $toHashedIndexKey as mongod computes it (issue 31), and the stand-in
playing MongoDB 7.0 (--server-version 7.0), the first version whose manual has the expression.

Expected values, each from MongoDB itself:
- the manual's example: { $toHashedIndexKey: "string to hash" } = Long("763543691661428748")
  (reference/operator/aggregation/toHashedIndexKey);
- src/mongo/db/hasher.cpp's startup self-test: BSONElementHasher::hash64 of { check: 42 } with
  seed 0 = -944302157085130861;
- numbers hash by their long value (recursiveHash squashes every number to
  safeNumberLongForHash), so 42, NumberLong(42) and 42.0 (and 42.9, truncated) hash alike;
- a missing value hashes as null (ExpressionToHashedIndexKey turns missing into null).
The ObjectId and nested values are derived by the same rule (canonical type 35 + its 12 bytes;
an object's elements with their names, ending with the end-of-object marker).
"""

import hashlib
import os
import struct
import sys
import unittest

import pymongo
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fwstandin.compare import MISSING  # noqa: E402
from fwstandin.hashing import hashed_index_key  # noqa: E402
from standin_process import StandIn, next_event  # noqa: E402

S70 = None
S60 = None
C70 = None
C60 = None


def setUpModule():
    global S70, S60, C70, C60
    S70 = StandIn(["--server-version", "7.0"])
    S70.start()
    S60 = StandIn()
    S60.start()
    C70 = pymongo.MongoClient(S70.uri)
    C60 = pymongo.MongoClient(S60.uri)


def tearDownModule():
    C70.close()
    C60.close()
    assert S70.stop() == 0
    assert S60.stop() == 0


class HashValuesTest(unittest.TestCase):
    def test_the_manuals_string(self):
        self.assertEqual(hashed_index_key("string to hash"), 763543691661428748)

    def test_hasher_self_test_value(self):
        self.assertEqual(hashed_index_key(42), -944302157085130861)

    def test_numbers_hash_by_their_long_value(self):
        for v in (42, Int64(42), 42.0, 42.9):
            self.assertEqual(hashed_index_key(v), -944302157085130861, repr(v))
        self.assertNotEqual(hashed_index_key(43), hashed_index_key(42))
        self.assertEqual(hashed_index_key(float("nan")), hashed_index_key(0))
        self.assertEqual(hashed_index_key(2.0 ** 63), hashed_index_key(Int64(-(1 << 63))))

    def test_object_id_is_md5_of_its_canonical_type_and_bytes(self):
        oid = ObjectId("5ab9c3da31c2ab715d421285")
        digest = hashlib.md5(struct.pack("<ii", 0, 35) + oid.binary).digest()
        self.assertEqual(hashed_index_key(oid), struct.unpack("<q", digest[:8])[0])
        self.assertNotEqual(hashed_index_key(oid), hashed_index_key(str(oid)))

    def test_missing_hashes_as_null_and_strings_differ_from_numbers(self):
        self.assertEqual(hashed_index_key(MISSING), hashed_index_key(None))
        self.assertNotEqual(hashed_index_key("42"), hashed_index_key(42))

    def test_documents_hash_their_elements_and_names(self):
        self.assertEqual(hashed_index_key({"a": 1}), hashed_index_key({"a": 1.0}))
        self.assertNotEqual(hashed_index_key({"a": 1}), hashed_index_key({"b": 1}))
        self.assertNotEqual(hashed_index_key([1]), hashed_index_key({"0": 1}))


class OverTheWireTest(unittest.TestCase):
    def setUp(self):
        self.coll = C70.hashing[self.id().rsplit(".", 1)[-1]]

    def test_seven_says_so(self):
        self.assertEqual(C70.admin.command("hello")["maxWireVersion"], 21)
        self.assertEqual(C70.admin.command("buildInfo")["version"], "7.0.0")

    def test_add_fields_returns_a_long(self):
        self.coll.insert_many([{"_id": 1, "val": "string to hash"}, {"_id": 2}])
        got = list(self.coll.aggregate([
            {"$addFields": {"h": {"$toHashedIndexKey": "$val"}}}, {"$sort": {"_id": 1}}]))
        self.assertEqual(got[0]["h"], 763543691661428748)
        self.assertIsInstance(got[0]["h"], Int64)
        self.assertEqual(got[1]["h"], hashed_index_key(None))

    def test_partition_match_in_a_change_stream(self):
        """The $match flowwarden's partitions use: each key in exactly one of N partitions."""
        n = 3
        streams = [self.coll.watch([{"$match": {"$expr": {"$eq": [
            {"$abs": {"$mod": [{"$toHashedIndexKey": "$documentKey._id"}, n]}}, k]}}}])
            for k in range(n)]
        keys = list(range(12)) + ["a", "b", ObjectId()]
        for key in keys:
            self.coll.insert_one({"_id": key})
        seen = {}
        for k, cs in enumerate(streams):
            # $mod truncates (the sign follows the dividend): |h mod n| is |h| % n.
            want = [key for key in keys if abs(hashed_index_key(key)) % n == k]
            for key in want:
                ev = next_event(cs)
                self.assertEqual(ev["documentKey"]["_id"], key)
                seen[repr(key)] = k
            cs.close()
        self.assertEqual(len(seen), len(keys))

    def test_six_does_not_know_it(self):
        with self.assertRaises(OperationFailure) as ctx:
            list(C60.hashing.x.aggregate([{"$addFields": {"h": {"$toHashedIndexKey": "$a"}}}]))
        self.assertEqual(ctx.exception.code, 168)
        self.assertIn("Unrecognized expression '$toHashedIndexKey'", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
