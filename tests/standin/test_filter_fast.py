"""A checkpoint write's update ({_id: <literal>} and predicates on top-level fields, $set of
scalars and documents) through the stand-in's fast path (filter_fast, update_fast.plan_filtered)
gives what the general path gives.

Run: cd tests/standin && /usr/bin/python3 -m unittest test_filter_fast -v

* filter_fast.match against query.matches on a grid of filters and documents: matching, not
  matching, missing fields, values of other types (type bracketing); None (the general path)
  for arrays and documents;
* update commands of checkpoint writes (flowwarden's checkpoint_store.c: the writer's
  generation `$not $gt`, `$or` of the writer's id `$ne` and its seq `$lt`), run with the fast
  path and with it off: the same replies (n, nModified, upserted, write errors), documents and
  change events, for writes that match, do not match, find fields missing, upsert, and one
  whose stored value is an array.
"""

import datetime
import struct
import unittest
import uuid

import bson
from bson.binary import Binary
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId

from fwstandin import bsonutil, commands, filter_fast, update_fast, wire
from fwstandin.query import matches
from fwstandin.server import Server

W1, W2 = ObjectId("650000000000000000000001"), ObjectId("650000000000000000000002")
DAY = datetime.datetime(2026, 1, 1)

FILTERS = [
    {"writerGen": {"$not": {"$gt": Int64(3)}}},
    {"writerGen": {"$not": {"$gt": Int64(3)}},
     "$or": [{"writerId": {"$ne": W1}}, {"writerSeq": {"$lt": Int64(5)}}]},
    {"epoch": Int64(2)}, {"epoch": 2.0}, {"epoch": {"$eq": 2}}, {"epoch": {"$ne": 2}},
    {"epoch": {"$gte": 2, "$lt": 3}}, {"epoch": {"$lte": 1.5}}, {"epoch": {"$gt": 1}},
    {"name": "x"}, {"name": {"$gt": "a"}}, {"name": {"$lt": "é"}},
    {"at": {"$lt": DAY}}, {"at": {"$gte": DAY}},
    {"writerId": W2}, {"writerId": {"$gt": W1}},
    {"$and": [{"epoch": {"$gt": 0}}, {"writerSeq": {"$lt": 9}}]},
    {"$or": [{"epoch": 5}, {"$or": [{"name": "x"}, {"name": "y"}]}]},
    {"writerGen": {"$not": {"$gte": 1, "$lte": 3}}},
    {"writerGen": {"$not": {"$ne": 3}}},
]

DOCS = [
    {"_id": "s"},
    {"_id": "s", "writerGen": Int64(3), "writerId": W1, "writerSeq": Int64(4), "epoch": 2},
    {"_id": "s", "writerGen": Int64(4), "writerId": W1, "writerSeq": Int64(5), "epoch": 2.5},
    {"_id": "s", "writerGen": 3.0, "writerId": W2, "writerSeq": Int64(9), "epoch": Int64(2)},
    {"_id": "s", "writerGen": "3", "writerId": "w", "writerSeq": None, "epoch": True,
     "name": "y", "at": DAY},
    {"_id": "s", "writerGen": None, "epoch": 0, "name": "x", "at": DAY.replace(year=2025)},
    {"_id": "s", "writerGen": float("-inf"), "epoch": -7, "name": "é", "writerSeq": 8},
]


class FilterTest(unittest.TestCase):
    def test_match_is_query_matches(self):
        answered = 0
        for rest in FILTERS:
            flt = dict({"_id": "s"}, **rest)
            got = filter_fast.parse(flt)
            self.assertIsNotNone(got, flt)
            self.assertEqual(got[0], "s")
            for doc in DOCS:
                m = filter_fast.match(doc, got[1])
                self.assertEqual(m, matches(doc, flt), (flt, doc))
                answered += 1
        self.assertEqual(answered, len(FILTERS) * len(DOCS))

    def test_arrays_documents_and_nan_go_the_general_way(self):
        preds = filter_fast.parse({"_id": 1, "a": {"$lt": 5}})[1]
        for v in ([1, 9], [], {"x": 1}, float("nan"), Decimal128("1"), Binary(b"x", 0)):
            self.assertIsNone(filter_fast.match({"_id": 1, "a": v}, preds), v)
        # Decided before the value it cannot compare is read: the same answer either way.
        preds = filter_fast.parse({"_id": 1, "b": 1, "a": {"$lt": 5}})[1]
        self.assertIs(filter_fast.match({"_id": 1, "b": 2, "a": [1]}, preds), False)
        self.assertEqual(matches({"_id": 1, "b": 2, "a": [1]}, {"_id": 1, "b": 1,
                                                                "a": {"$lt": 5}}), False)

    def test_other_shapes_are_not_parsed(self):
        for flt in ({"_id": 1}, {"a": 1, "b": 2}, {"_id": 1, "a.b": 1}, {"_id": 1, "a": None},
                    {"_id": 1, "a": [1]}, {"_id": 1, "a": {"x": 1}}, {"_id": 1, "a": {}},
                    {"_id": 1, "a": {"$in": [1]}}, {"_id": 1, "a": {"$exists": False}},
                    {"_id": 1, "a": {"$not": {}}}, {"_id": 1, "a": {"$lt": float("nan")}},
                    {"_id": 1, "a": True}, {"_id": 1, "$or": []}, {"_id": 1, "$nor": [{"a": 1}]},
                    {"_id": 1, "$or": [{"_id": 2}]}, {"_id": 1, "a": {"$gt": 1, "b": 2}},
                    {"_id": 1, "$expr": {"$eq": ["$a", 1]}}, {"_id": 1, "a": {"$lt": None}}):
            self.assertIsNone(filter_fast.parse(flt), flt)


def _update_msg(request_id, body, raws):
    seq = b"".join(raws)
    payload = (b"\x00\x00\x00\x00\x00" + bson.encode(body) + b"\x01"
               + struct.pack("<i", 12 + len(seq)) + b"updates\x00" + seq)
    return (16 + len(payload), request_id, 0, wire.OP_MSG), payload


def _save(stream, writer, gen, seq, upsert=True, epoch=None, token=None):
    """A checkpoint write as checkpoint_store.c's save_checkpoint sends it."""
    q = {"_id": stream}
    if epoch is not None:
        q["epoch"] = Int64(epoch)
    q["writerGen"] = {"$not": {"$gt": Int64(gen)}}
    q["$or"] = [{"writerId": {"$ne": writer}}, {"writerSeq": {"$lt": Int64(seq)}}]
    tok = {"_data": token or "82%08X" % seq}
    return bson.encode({"q": q, "u": {"$set": {
        "lastProcessedToken": tok, "lastSeenToken": tok, "scriptVersion": "v1",
        "updatedAt": DAY + datetime.timedelta(milliseconds=seq), "writerGen": Int64(gen),
        "writerId": writer, "writerSeq": Int64(seq)}}, "upsert": upsert})


class CheckpointWriteTest(unittest.TestCase):
    def _run(self, cmds, fast):
        """Replies (without times), documents and change events of cmds on a new server."""
        saved = update_fast.plan_filtered
        calls = []

        def counted(st):
            calls.append(st)
            return saved(st)

        update_fast.plan_filtered = counted if fast else (lambda st: None)
        try:
            server = Server()
            server.load()
            server.store.create_collection("db", "_fw_checkpoints",
                                           {"changeStreamPreAndPostImages": {"enabled": True}})
            server.store.insert(server.store.coll("db", "_fw_checkpoints"),
                                {"_id": "arr", "writerGen": [1, 9], "writerSeq": 1})
            server.store.insert(server.store.coll("db", "_fw_checkpoints"),
                                {"_id": "old", "lastProcessedToken": {"_data": "00"}})
            conn = commands.Connection(1, ("127.0.0.1", 0))
            replies = []
            for n, (body, raws) in enumerate(cmds):
                reply = commands.execute(server, conn, wire.parse_message(*_update_msg(
                    n + 1, {"update": "_fw_checkpoints", **body, "$db": "db"}, raws)))
                reply = bsonutil.decode(reply[21:])
                for k in ("$clusterTime", "operationTime"):
                    reply.pop(k)
                for e in reply.get("writeErrors", []):
                    e.pop("errmsg", None)   # names the time of the duplicate's request
                replies.append(reply)
            c = server.store.coll("db", "_fw_checkpoints")
            docs = [bsonutil.encode(c.docs[k]) for k in c.docs]
            for k, raw in zip(c.docs, docs):
                # The size an update kept instead of the bytes (update_fast.new_size).
                self.assertIn(c.stored_size(k, c.docs[k]), (None, len(raw)), k)
            self.sized = sum(k in c.sizes for k in c.docs)
            events = []
            for e in server.store.oplog.iter_live():
                if e.coll == "_fw_checkpoints":
                    ev = bsonutil.decode(e.raw)
                    for k in ("_id", "clusterTime", "wallTime"):
                        ev.pop(k)
                    events.append((bsonutil.encode(ev), e.pre, e.post))
            self.planned = len(calls)
            return replies, docs, events
        finally:
            update_fast.plan_filtered = saved

    def test_fast_path_gives_the_general_paths_results(self):
        lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
        cmds = [
            ({}, [_save("s", W1, 3, 1)]),                       # upsert: creates it
            ({}, [_save("s", W1, 3, 2)]),                       # matches: modified
            ({}, [_save("s", W1, 3, 2)]),                       # seq not above: no match,
                                                                # upsert: duplicate key
            ({}, [_save("s", W1, 3, 2, upsert=False)]),         # no match, n 0
            ({}, [_save("s", W1, 2, 3, upsert=False)]),         # an older generation
            ({}, [_save("s", W2, 3, 1)]),                       # another writer: matches
            ({}, [_save("old", W1, 3, 1, upsert=False)]),       # no stamps: missing fields
            ({}, [_save("t", W1, 3, 1, upsert=False)]),         # no document: n 0
            ({}, [_save("arr", W1, 3, 4, upsert=False)]),       # an array: general path
            ({}, [_save("s", W1, 4, 9, epoch=2, upsert=False)]),  # epoch missing: no match
            ({"ordered": False}, [_save("u", W1, 3, 1), _save("u", W1, 3, 2),
                                  _save("u", W1, 3, 2), _save("u", W2, 5, 1, upsert=False)]),
            ({"lsid": lsid, "txnNumber": Int64(1)}, [_save("s", W1, 6, 1)]),
            ({"lsid": lsid, "txnNumber": Int64(1)}, [_save("s", W1, 6, 1)]),  # a retry
        ]
        want = self._run(cmds, fast=False)
        got = self._run(cmds, fast=True)
        self.assertGreaterEqual(self.planned, 10)
        self.assertGreater(self.sized, 0)   # sizes kept, not bytes, and checked above
        self.assertEqual(got[0], want[0])
        self.assertEqual(got[1], want[1])
        self.assertEqual(got[2], want[2])
        r = got[0]
        self.assertEqual(r[0]["upserted"][0]["_id"], "s")
        self.assertEqual((r[1]["n"], r[1]["nModified"]), (1, 1))
        self.assertEqual(r[2]["writeErrors"][0]["code"], 11000)
        self.assertEqual((r[3]["n"], r[3]["nModified"]), (0, 0))
        self.assertEqual((r[4]["n"], r[5]["n"], r[7]["n"], r[8]["n"], r[9]["n"]), (0, 1, 0, 0, 0))
        self.assertEqual((r[6]["n"], r[6]["nModified"]), (1, 1))
        # the fourth: a later generation from another writer goes through (3 not > 5).
        self.assertEqual((r[10]["n"], r[10]["nModified"], len(r[10]["writeErrors"])), (3, 2, 1))
        self.assertEqual(r[11]["nModified"], 1)
        self.assertEqual(r[12]["nModified"], 1)     # the first's result, not a second run
        kinds = [bson.decode(e[0])["operationType"] for e in got[2]]
        self.assertEqual(kinds.count("update"), 6)
        self.assertEqual(kinds.count("insert"), 4)  # 2 here, the upserts of s and u


if __name__ == "__main__":
    unittest.main()
