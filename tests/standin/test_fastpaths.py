"""The stand-in's fast paths give what the general ones give, byte for byte.

Run: cd tests/standin && /usr/bin/python3 -m unittest test_fastpaths -v

* bsonutil.encode (its own encoder for the common types) against bson.encode;
* update_fast (update by _id with $inc/$set on top-level fields) against update.apply_update,
  and the statements it must leave to the general path;
* update commands whose statements are read by their shape (update_fast.by_id_shape, not
  decoded when a statement of the same shape was) against the same commands all decoded:
  replies, documents, change events;
* through the wire (pymongo): a bulk write's per-statement results, write errors and change
  events, find's bytes after inserts, updates and deletes (the stored encodings).
"""

import datetime
import random
import struct
import unittest
import uuid

import bson
import pymongo
from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.errors import InvalidDocument
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from bson.regex import Regex
from bson.son import SON
from bson.timestamp import Timestamp
from pymongo import UpdateOne

from fwstandin import bsonutil, commands, idindex, oplog, update_fast, wire
from fwstandin.server import Server
from fwstandin.query import matches
from fwstandin.update import apply_update
from standin_process import StandIn

UTC = datetime.timezone.utc


def _reference(doc):
    return bson.encode(doc, codec_options=bsonutil.CODEC)


def _random_value(rnd, depth=0):
    kinds = ["int", "int64", "float", "str", "bool", "none", "oid", "date", "ts", "bin"]
    if depth < 3:
        kinds += ["doc", "list"]
    k = rnd.choice(kinds)
    if k == "int":
        return rnd.choice([0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1,
                           -2 ** 63, rnd.randint(-10 ** 6, 10 ** 6)])
    if k == "int64":
        return Int64(rnd.choice([0, 5, -2 ** 63, 2 ** 63 - 1]))
    if k == "float":
        return rnd.choice([0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), 1e308])
    if k == "str":
        return rnd.choice(["", "a", "é€😀", "x" * 300, "nul\x00inside"])
    if k == "bool":
        return rnd.choice([True, False])
    if k == "none":
        return None
    if k == "oid":
        return ObjectId()
    if k == "date":
        return rnd.choice([datetime.datetime(2024, 1, 15, 12, 0, 0, 999999),
                           datetime.datetime(1969, 12, 31, 23, 59, 59, 500),
                           datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31),
                           datetime.datetime(2020, 5, 1, 3, tzinfo=UTC),
                           datetime.datetime(2020, 5, 1, 3, tzinfo=datetime.timezone(
                               datetime.timedelta(hours=-7, minutes=-30)))])
    if k == "ts":
        return Timestamp(rnd.randint(0, 2 ** 32 - 1), rnd.randint(0, 2 ** 32 - 1))
    if k == "bin":
        return Binary(bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 20))),
                      rnd.choice([0, 3, 4, 5, 128]))
    if k == "doc":
        return {rnd.choice(["a", "b", "é", "_id", "$x", "a.b", str(i)]) + str(i):
                _random_value(rnd, depth + 1) for i in range(rnd.randint(0, 4))}
    return [_random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]


class EncodeTest(unittest.TestCase):
    def assertSameBytes(self, doc):
        self.assertEqual(bsonutil.encode(doc), _reference(doc), doc)

    def test_random_documents_match_bson_encode(self):
        rnd = random.Random(41)
        for _ in range(3000):
            doc = {"f%d" % i: _random_value(rnd) for i in range(rnd.randint(0, 6))}
            if rnd.random() < 0.5:
                doc = dict(_id=_random_value(rnd, 3), **doc)
            self.assertSameBytes(doc)

    def test_edge_values(self):
        for v in (2 ** 31 - 1, 2 ** 31, -2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1, -2 ** 63,
                  Int64(1), True, False, -0.0, float("nan"), "", "\u0000", [], {}, [[[]]],
                  list(range(1500)), Binary(b"", 0), Binary(b"\x01" * 16, 4),
                  uuid.UUID(int=7).bytes):
            self.assertSameBytes({"_id": 1, "v": v})

    def test_id_moves_first_at_the_top_level_only(self):
        self.assertSameBytes({"a": 1, "_id": 2})
        self.assertSameBytes({"a": {"b": 1, "_id": 2}, "_id": 3})
        self.assertEqual(bsonutil.encode({"a": 1, "_id": 2})[4:9], b"\x10_id\x00")

    def test_other_types_are_bson_encodes(self):
        for v in (Decimal128("1.5"), Regex("^a", "i"), Code("x"), SON([("a", 1)]),
                  Binary(b"ab", 2), (1, 2), b"raw", uuid.uuid4(),
                  RawBSONDocument(bson.encode({"x": 1}))):
            try:
                expected = _reference({"v": v})
            except Exception as e:  # noqa: BLE001 - the same error either way
                with self.assertRaises(type(e)):
                    bsonutil.encode({"v": v})
                continue
            self.assertEqual(bsonutil.encode({"v": v}), expected, v)

    def test_errors_are_bson_encodes(self):
        for doc in ({"a\x00b": 1}, {"v": 2 ** 64}, {1: 2}, {"v": "\ud800"}):
            with self.assertRaises(Exception) as want:
                _reference(doc)
            with self.assertRaises(type(want.exception)):
                bsonutil.encode(doc)
        with self.assertRaises(InvalidDocument):
            bsonutil.encode({"a\x00b": 1})


class UpdateFastTest(unittest.TestCase):
    """update_fast.apply against the general update path on the same statement."""

    DOCS = [
        {"_id": "g1", "n": 5},
        {"_id": "g2", "n": 2 ** 31 - 1, "m": Int64(3), "x": 1.5, "s": "str"},
        {"_id": "g3"},
        {"_id": "g4", "n": Int64(2 ** 63 - 1)},
        {"_id": "g5", "n": float("nan"), "z": -0.0, "a": [1], "d": {"k": 1}},
        {"_id": "g6", "n": "text", "t": True, "nil": None},
        {"_id": "g7", "n": Decimal128("2.5")},
    ]
    UPDATES = [
        {"$inc": {"n": 1}}, {"$inc": {"n": 0}}, {"$inc": {"n": -1.5}}, {"$inc": {"n": Int64(1)}},
        {"$inc": {"m": 1, "n": 1}}, {"$inc": {"new": 4}}, {"$inc": {"z": 0.0}},
        {"$set": {"s": "str"}}, {"$set": {"s": "other", "b": 1}}, {"$set": {"n": 5}},
        {"$set": {"n": 5.0}}, {"$set": {"z": 0.0}}, {"$set": {"t": 1}}, {"$set": {"nil": None}},
        {"$set": {"10": 1, "9": 2, "b": 3, "B": 4}}, {"$inc": {"n": 1}, "$set": {"a2": 1}},
        {"$set": {"when": datetime.datetime(2024, 1, 1)}}, {"$set": {"o": ObjectId()}},
    ]

    def test_matches_the_general_path(self):
        checked = 0
        for doc in self.DOCS:
            for u in self.UPDATES:
                st = {"q": {"_id": doc["_id"]}, "u": u, "upsert": True, "multi": False}
                plan = update_fast.plan(st)
                self.assertIsNotNone(plan, st)
                got = update_fast.apply(doc, plan[1])
                try:
                    want = apply_update(doc, u)
                except Exception:   # noqa: BLE001 - the general path reports its error
                    self.assertIsNone(got, (doc, u))
                    continue
                if got is None:     # left to the general path (a Decimal128)
                    self.assertIsInstance(doc.get("n"), Decimal128)
                    continue
                new, ud = got
                self.assertEqual(bsonutil.encode(new), bsonutil.encode(want[0]), (doc, u))
                if want[1]["updatedFields"] or want[1]["removedFields"]:
                    self.assertEqual(bsonutil.encode(ud), bsonutil.encode(want[1]), (doc, u))
                else:
                    self.assertEqual(ud, {}, (doc, u))
                checked += 1
        self.assertGreater(checked, 80)

    def test_new_size_is_the_encoded_size(self):
        # The size an update keeps instead of the new document's bytes (Store.update's size).
        docs = self.DOCS + [{"_id": "g8", "n": 2 ** 40, "s": "é€😀", "o": ObjectId()}]
        updates = self.UPDATES + [{"$set": {"s": "é€😀x", "n": 2 ** 62}},
                                  {"$inc": {"n": 2 ** 31}}, {"$set": {"é": "ü", "o": None}},
                                  {"$set": {"d": 1, "a": 2}}]
        checked = 0
        for doc in docs:
            for u in updates:
                plan = update_fast.plan({"q": {"_id": doc["_id"]}, "u": u})
                got = update_fast.apply(doc, plan[1]) if plan else None
                if not got or not got[1]:
                    continue
                size = update_fast.new_size(len(bsonutil.encode(doc)), doc,
                                            got[1]["updatedFields"])
                if size is None:    # an old value of a type not sized here: encoded
                    self.assertTrue(any(type(doc.get(f)) in (list, dict, Decimal128)
                                        for f in got[1]["updatedFields"]), (doc, u))
                    continue
                self.assertEqual(size, len(bsonutil.encode(got[0])), (doc, u))
                checked += 1
        self.assertGreater(checked, 80)

    def test_apply_sized_is_apply_and_new_size(self):
        docs = self.DOCS + [{"_id": "c1", "n": -2 ** 31, "s": "é"}, {"_id": "c2", "n": True},
                            {"_id": "c3", "n": 0}]
        updates = self.UPDATES + [{"$inc": {"n": -1}}, {"$inc": {"n": 2 ** 31 - 1}},
                                  {"$inc": {"n": -2 ** 31}}, {"$inc": {"n": 2 ** 31}},
                                  {"$inc": {"n": True}}]
        checked = 0
        for doc in docs:
            size = len(bsonutil.encode(doc))
            for u in updates:
                plan = update_fast.plan({"q": {"_id": doc["_id"]}, "u": u})
                if plan is None:
                    continue
                want = update_fast.apply(doc, plan[1])
                for known in (size, None):
                    got = update_fast.apply_sized(doc, plan[1], known)
                    if want is None:
                        self.assertIsNone(got, (doc, u))
                        continue
                    self.assertEqual(bsonutil.encode(got[0]), bsonutil.encode(want[0]), (doc, u))
                    self.assertEqual(got[1], want[1], (doc, u))
                    if not want[1] or known is None:
                        self.assertEqual(got[2], known, (doc, u))
                    else:
                        self.assertEqual(got[2], update_fast.new_size(
                            known, doc, want[1]["updatedFields"]), (doc, u))
                        if got[2] is not None:
                            self.assertEqual(got[2], len(bsonutil.encode(got[0])), (doc, u))
                    checked += 1
        self.assertGreater(checked, 150)

    def test_update_entry_is_the_entry(self):
        make = (len, (b"x",))
        for images, pre, post in ((False, None, None), (True, {"_id": 1}, {"_id": 1, "n": 2})):
            want = oplog.Entry(5, 6, "u", "db", "c", None, 1, images, pre, post, make=make)
            got = oplog.update_entry(5, 6, "db", "c", "db.c", 1, images, pre, post, make)
            self.assertEqual({k: getattr(got, k) for k in oplog.Entry.__slots__},
                             {k: getattr(want, k) for k in oplog.Entry.__slots__})
            self.assertEqual(got.raw, 1)

    def test_other_shapes_take_the_general_path(self):
        base = {"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}
        for change in ({"q": {"_id": {"$gt": 1}}}, {"q": {"_id": 1, "a": 1}}, {"q": {}},
                       {"q": {"_id": True}}, {"q": {"_id": None}}, {"q": {"_id": 1.5}},
                       {"u": {"$inc": {"a.b": 1}}}, {"u": {"$inc": {"$a": 1}}},
                       {"u": {"$inc": {"": 1}}}, {"u": {"$inc": {"_id": 1}}},
                       {"u": {"$inc": {"n": "x"}}}, {"u": {"$inc": {"n": Decimal128("1")}}},
                       {"u": {"$set": {"n": {"a": 1}}}}, {"u": {"$set": {"n": [1]}}},
                       {"u": {"$unset": {"n": ""}}}, {"u": {"$inc": {}}}, {"u": {}},
                       {"u": {"n": 1}}, {"u": [{"$set": {"n": 1}}]},
                       {"u": {"$inc": {"n": 1}, "$set": {"n": 2}}}, {"multi": True},
                       {"hint": {"_id": 1}}, {"collation": {"locale": "simple"}},
                       {"arrayFilters": []}):
            st = dict(base, **change)
            self.assertIsNone(update_fast.plan(st), change)


def _update_msg(request_id, body, raws):
    """The (header, payload) of an OP_MSG `update` command with the raw statements in a
    document sequence, as drivers send a bulk write."""
    seq = b"".join(raws)
    payload = (b"\x00\x00\x00\x00\x00" + bson.encode(body) + b"\x01"
               + struct.pack("<i", 12 + len(seq)) + b"updates\x00" + seq)
    return (16 + len(payload), request_id, 0, wire.OP_MSG), payload


def _raw_with_string_id(raw_id):
    """A statement {q: {_id: <the string of bytes raw_id>}, u: {$inc: {n: 1}}} built by hand
    (bson.encode refuses a string that is not UTF-8)."""
    q = (b"\x02_id\x00" + struct.pack("<i", len(raw_id) + 1) + raw_id + b"\x00")
    q = struct.pack("<i", len(q) + 5) + q + b"\x00"
    body = b"\x03q\x00" + q + bson.encode({"u": {"$inc": {"n": 1}}})[4:]
    return struct.pack("<i", len(body) + 4) + body


class ShapeTest(unittest.TestCase):
    """update commands through update_fast.by_id_shape against the same commands with every
    statement decoded (the shape reader off): the same replies, documents and events."""

    def test_by_id_shape_reads_the_id_and_the_rest(self):
        rest = bson.encode({"u": {"$inc": {"n": 1}}, "upsert": True})[4:]
        for _id in ("g1", "", "é€😀", "nul\x00in", 7, -2 ** 31, Int64(2 ** 40), Int64(-1),
                    ObjectId()):
            raw = bson.encode({"q": {"_id": _id}, "u": {"$inc": {"n": 1}}, "upsert": True})
            got = update_fast.by_id_shape(raw)
            self.assertEqual(got, (_id, rest), _id)
            self.assertIs(type(got[0]), type(_id))
        for st in ({"q": {"_id": 1.0}}, {"q": {"_id": True}}, {"q": {"_id": None}},
                   {"q": {"_id": {"a": 1}}}, {"q": {"_id": [1]}}, {"q": {"_id": 1, "a": 1}},
                   {"q": {"a": 1}}, {"q": {}}, {"u": {"$inc": {"n": 1}}, "q": {"_id": 1}},
                   {"qq": {"_id": 1}}, {"q": {"_id": Int64(1)}, "u": 1}):
            raw = bson.encode(st)
            if st.get("u") == 1:    # an int64 _id cut short: q's length no longer fits
                raw = raw[:7] + struct.pack("<i", 19) + raw[11:]
            self.assertIsNone(update_fast.by_id_shape(raw), st)
        self.assertIsNone(update_fast.by_id_shape(b"\x05\x00\x00\x00\x00"))
        # q and its string _id claiming more bytes than the statement has (lengths agreeing).
        raw = bytearray(bson.encode({"q": {"_id": "abc"}, "u": {"$inc": {"n": 1}}}))
        raw[7:11] = struct.pack("<i", 14 + 100)
        raw[16:20] = struct.pack("<i", 100)
        self.assertIsNone(update_fast.by_id_shape(bytes(raw)))
        self.assertIsNone(update_fast.by_id_shape(_raw_with_string_id(b"\xff\xfe")))
        self.assertEqual(update_fast.by_id_shape(_raw_with_string_id(b"ok"))[0], "ok")

    def _run(self, commands_list, shapes):
        """Replies (without times), documents and events of the commands on a new server,
        by shape or with every statement decoded."""
        saved = update_fast.by_id_shape
        update_fast.SHAPES.clear()
        if not shapes:
            update_fast.by_id_shape = lambda raw: None
        try:
            server = Server()
            server.load()
            server.store.create_collection("db", "c", {"changeStreamPreAndPostImages":
                                                       {"enabled": True}})
            conn = commands.Connection(1, ("127.0.0.1", 0))
            replies = []
            for n, (body, raws) in enumerate(commands_list):
                reply = commands.execute(server, conn, wire.parse_message(
                    *_update_msg(n + 1, {"update": "c", **body, "$db": "db"}, raws)))
                reply = bsonutil.decode(reply[21:])
                for k in ("$clusterTime", "operationTime"):
                    reply.pop(k)
                replies.append(reply)
            c = server.store.coll("db", "c")
            docs = [bsonutil.encode(c.docs[k]) for k in c.docs]
            events = []
            for e in server.store.oplog.iter_live():
                if e.coll == "c":
                    ev = bsonutil.decode(e.raw)
                    for k in ("_id", "clusterTime", "wallTime"):
                        ev.pop(k)
                    events.append((bsonutil.encode(ev), e.pre, e.post))
            self.shapes_known = len(update_fast.SHAPES)
            return replies, docs, events
        finally:
            update_fast.by_id_shape = saved
            update_fast.SHAPES.clear()

    def test_shapes_give_what_decoding_gives(self):
        def st(_id, u=None, **kw):
            return bson.encode(dict({"q": {"_id": _id}, "u": u or {"$inc": {"n": 1}}}, **kw))

        lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
        oid = ObjectId()
        # q twice: the decoded statement's q is the second one, by_id_shape's the first.
        dup = (bson.encode({"q": {"_id": "a"}, "u": {"$inc": {"n": 1}}, "upsert": True})[4:-1]
               + bson.encode({"q": {"_id": "b"}})[4:-1])
        dup = struct.pack("<i", len(dup) + 5) + dup + b"\x00"
        bulk = [st("a", upsert=True), st(1, upsert=True), st(Int64(2), upsert=True),
                st(oid, upsert=True), st("s", {"$set": {"n": "text"}}, upsert=True)]
        again = ([st("a", upsert=True), st(1, upsert=True), st(Int64(2), upsert=True),
                  st(oid, upsert=True), st("s", upsert=True),    # $inc on a string: 14
                  st("missing", upsert=True), st("gone"), st(1), st(2.0, upsert=True),
                  st("a", multi=False), st("a", {"$set": {"n": 1}}), st("a", multi=True,
                                                                         upsert=False),
                  st("a", hint={"_id": 1}), st("b", {"$set": {"m": 2, "n": 3}}, upsert=True),
                  _raw_with_string_id(b"ok")])
        cmds = [({"ordered": False}, bulk),
                ({"ordered": False}, again[:-1]),
                ({"ordered": True}, again[:5] + again[4:]),   # stops at the first error
                ({"ordered": False}, again),
                ({"ordered": False}, bulk + [bson.encode({"q": {"_id": "a"},
                                                          "u": {"$inc": {"n": 1}},
                                                          "sort": {"a": 1}})]),   # 40415
                ({"ordered": False}, [st("a", upsert=True), dup]),
                ({"ordered": False}, [dup]),    # a shape is known from the commands before
                ({"ordered": False, "lsid": lsid, "txnNumber": Int64(1)}, bulk[:2]),
                ({"ordered": False, "lsid": lsid, "txnNumber": Int64(1)}, bulk[:3])]
        want = self._run(cmds, shapes=False)
        got = self._run(cmds, shapes=True)
        self.assertGreaterEqual(self.shapes_known, 3)   # the shapes were read, not decoded
        self.assertEqual(got[0], want[0])
        self.assertEqual(got[1], want[1])
        self.assertEqual(got[2], want[2])
        replies = got[0]
        # 4: $inc on a string (14); 5 and 13 upserted; 6 matched nothing.
        self.assertEqual((replies[1]["n"], replies[1]["nModified"]), (12, 10))
        self.assertEqual([(e["index"], e["code"]) for e in replies[1]["writeErrors"]], [(4, 14)])
        self.assertEqual([u["index"] for u in replies[1]["upserted"]], [5, 13])
        self.assertEqual((replies[2]["n"], [e["index"] for e in replies[2]["writeErrors"]]),
                         (4, [4]))
        self.assertEqual((replies[3]["n"], len(replies[3]["writeErrors"])), (12, 1))
        self.assertEqual(replies[4]["code"], 40415)     # nothing of it ran
        self.assertEqual(replies[7]["nModified"], 2)
        self.assertEqual(replies[8]["nModified"], 3)    # a retry: only the third ran
        self.assertGreater(len(got[2]), 20)


class IdRangeTest(unittest.TestCase):
    """idindex.exact_range's index ranges against the filter's own match."""

    def test_ranges_match_the_filter(self):
        rnd = random.Random(7)
        ids = [ObjectId(bytes(rnd.randrange(4) for _ in range(12))) for _ in range(60)]
        ids += ["", "a", "ab", "b", "é", "z", "Z", "10", "9", "a\x00"]
        ids += [1, 2.5, Int64(3), None, True, datetime.datetime(2020, 1, 1), {"a": 1}]
        ids = list({bsonutil.value_key(i): i for i in ids}.values())
        ix = idindex.IdIndex()
        docs = {}
        for _id in ids:
            k = bsonutil.value_key(_id)
            docs[k] = {"_id": _id}
            ix.add(_id, k)
        bounds = [i for i in ids if isinstance(i, (ObjectId, str))]
        ops = ("$gt", "$gte", "$lt", "$lte")
        checked = 0
        for _ in range(1500):
            clauses = [{rnd.choice(ops): rnd.choice(bounds)} for _ in range(rnd.randint(1, 2))]
            if len(clauses) == 2 and rnd.random() < 0.5:
                clauses = [dict(clauses[0], **clauses[1])]
            flt = {"_id": clauses[0]} if len(clauses) == 1 and rnd.random() < 0.5 else \
                {"$and": [{"_id": c} for c in clauses]}
            exact = idindex.exact_range(flt)
            types = {type(v) for c in clauses for v in c.values()}
            if len(types) > 1:
                self.assertIsNone(exact, flt)
                continue
            self.assertIsNotNone(exact, flt)
            want = [k for k in ix.vks if matches(docs[k], flt)]
            self.assertEqual(ix.between(*exact), want, flt)
            self.assertEqual(ix.between(*exact, want=3), want[:3], flt)
            checked += 1
        self.assertGreater(checked, 500)

    def test_other_filters_are_not_exact(self):
        for flt in ({}, {"_id": 1}, {"_id": {"$gt": 1}}, {"_id": {"$in": ["a"]}},
                    {"_id": {"$gt": "a"}, "x": 1}, {"$and": [{"_id": {"$gt": "a"}}, {"x": 1}]},
                    {"_id": {"$gt": "a", "$ne": "b"}}, {"_id": "a"}, {"$and": []},
                    {"_id": {"$gt": "a", "$lt": ObjectId()}}):
            self.assertIsNone(idindex.exact_range(flt), flt)


class WireTest(unittest.TestCase):
    """The fast paths seen from a driver."""

    @classmethod
    def setUpClass(cls):
        cls.standin = StandIn()
        cls.standin.start()
        cls.client = pymongo.MongoClient(cls.standin.uri)
        cls.db = cls.client.fastpaths

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.standin.stop()

    def test_bulk_upserts_results_errors_and_events(self):
        coll = self.db.bulk
        coll.insert_one({"_id": "s", "n": "text"})
        with coll.watch() as stream:
            ops = [UpdateOne({"_id": "g%d" % (i % 3)}, {"$inc": {"n": 1}}, upsert=True)
                   for i in range(7)]
            ops.insert(3, UpdateOne({"_id": "s"}, {"$inc": {"n": 1}}, upsert=True))
            with self.assertRaises(pymongo.errors.BulkWriteError) as ctx:
                coll.bulk_write(ops, ordered=False)
            res = ctx.exception.details
            self.assertEqual([e["index"] for e in res["writeErrors"]], [3])
            self.assertEqual(res["writeErrors"][0]["code"], 14)   # TypeMismatch
            self.assertEqual(res["nUpserted"], 3)
            self.assertEqual(res["nMatched"], 4)
            self.assertEqual(res["nModified"], 4)
            self.assertEqual(sorted(d["_id"] for d in coll.find({"n": {"$type": "int"}})),
                             ["g0", "g1", "g2"])
            self.assertEqual({d["_id"]: d["n"] for d in coll.find()},
                             {"s": "text", "g0": 3, "g1": 2, "g2": 2})
            events = [stream.next() for _ in range(7)]
        self.assertEqual([e["operationType"] for e in events], ["insert"] * 3 + ["update"] * 4)
        self.assertEqual([e["documentKey"]["_id"] for e in events],
                         ["g0", "g1", "g2", "g0", "g1", "g2", "g0"])
        for e, n in zip(events[3:], (2, 2, 2, 3)):
            self.assertEqual(e["updateDescription"],
                             {"updatedFields": {"n": n}, "removedFields": [],
                              "truncatedArrays": []})
            self.assertEqual(list(e), ["_id", "operationType", "clusterTime", "wallTime", "ns",
                                       "documentKey", "updateDescription"])
        times = [e["clusterTime"] for e in events]
        self.assertEqual(times, sorted(times))
        self.assertEqual(len(set(times)), len(times))

    def test_update_by_an_equal_id_of_another_type(self):
        # 1, 1.0 and NumberLong(1) are one _id in MongoDB: the fast path finds the stored
        # document by an int, and the document and its event keep the stored _id's type.
        coll = self.db.idtypes
        coll.insert_many([{"_id": 1.0, "n": 1}, {"_id": Int64(2), "n": 1}])
        with coll.watch() as stream:
            coll.bulk_write([UpdateOne({"_id": 1}, {"$inc": {"n": 1}}),
                             UpdateOne({"_id": 2}, {"$inc": {"n": 1}})], ordered=False)
            events = [stream.next() for _ in range(2)]
        self.assertEqual([type(e["documentKey"]["_id"]) for e in events], [float, Int64])
        self.assertEqual(coll.count_documents({"_id": {"$type": "double"}, "n": 2}), 1)
        self.assertEqual(coll.count_documents({"_id": {"$type": "long"}, "n": 2}), 1)
        coll.drop()

    def test_update_past_16_mib_fails_as_before(self):
        # The fast path's new size (not its bytes) is checked against the limit.
        coll = self.db.big
        coll.insert_one({"_id": 1, "s": "x" * (16 * 1024 * 1024 - 100), "n": 1})
        coll.update_one({"_id": 1}, {"$inc": {"n": 1}})
        with self.assertRaises(pymongo.errors.WriteError) as ctx:
            coll.update_one({"_id": 1}, {"$set": {"t": "y" * 200}})
        self.assertEqual(ctx.exception.code, 17419)
        self.assertEqual(coll.find_one({"_id": 1}, {"s": 0}), {"_id": 1, "n": 2})
        # The same in a bulk write (a document sequence: update_fast's shape reader): the
        # error at its index, the others applied.
        with self.assertRaises(pymongo.errors.BulkWriteError) as ctx:
            coll.bulk_write([UpdateOne({"_id": 1}, {"$inc": {"n": 1}}),
                             UpdateOne({"_id": 1}, {"$set": {"t": "y" * 200}}),
                             UpdateOne({"_id": 1}, {"$inc": {"n": 1}})], ordered=False)
        self.assertEqual([(e["index"], e["code"]) for e in ctx.exception.details["writeErrors"]],
                         [(1, 17419)])
        self.assertEqual(coll.find_one({"_id": 1}, {"s": 0}), {"_id": 1, "n": 4})
        coll.drop()

    def test_noop_set_is_not_modified_and_makes_no_event(self):
        coll = self.db.noop
        coll.insert_one({"_id": 1, "a": 5})
        with coll.watch() as stream:
            res = coll.update_one({"_id": 1}, {"$set": {"a": 5}})
            self.assertEqual((res.matched_count, res.modified_count), (1, 0))
            coll.update_one({"_id": 1}, {"$set": {"a": 5.0}})   # another BSON type: a change
            ev = stream.next()
        self.assertEqual(ev["updateDescription"]["updatedFields"], {"a": 5.0})

    def test_bulk_by_id_with_images_a_unique_index_and_a_retry(self):
        # The by-_id write keeps what the general one does: pre- and post-images, a unique
        # index's check and entries, and a retried command's executed statements not run
        # again (the session's record of each statement).
        self.db.create_collection("imgs", changeStreamPreAndPostImages={"enabled": True})
        coll = self.db.imgs
        coll.create_index("u", unique=True)
        coll.insert_many([{"_id": "a", "n": 1, "u": 1}, {"_id": "b", "n": 1, "u": 2}])
        start = self.db.command("aggregate", "imgs", pipeline=[{"$changeStream": {
            "fullDocument": "required", "fullDocumentBeforeChange": "required"}}],
            cursor={"batchSize": 0})["cursor"]["id"]
        with self.assertRaises(pymongo.errors.BulkWriteError) as ctx:
            coll.bulk_write([UpdateOne({"_id": "a"}, {"$inc": {"n": 1}}),
                             UpdateOne({"_id": "b"}, {"$set": {"u": 1}}),   # a has u 1
                             UpdateOne({"_id": "b"}, {"$set": {"u": 3}})], ordered=False)
        self.assertEqual([(e["index"], e["code"]) for e in ctx.exception.details["writeErrors"]],
                         [(1, 11000)])
        coll.update_one({"_id": "a"}, {"$set": {"u": 2}})   # 2 is free again
        events = self.db.command("getMore", start, collection="imgs",
                                 batchSize=10)["cursor"]["nextBatch"]
        self.db.command("killCursors", "imgs", cursors=[start])
        self.assertEqual([(e["fullDocumentBeforeChange"], e["fullDocument"]) for e in events],
                         [({"_id": "a", "n": 1, "u": 1}, {"_id": "a", "n": 2, "u": 1}),
                          ({"_id": "b", "n": 1, "u": 2}, {"_id": "b", "n": 1, "u": 3}),
                          ({"_id": "a", "n": 2, "u": 1}, {"_id": "a", "n": 2, "u": 2})])
        with self.assertRaises(pymongo.errors.DuplicateKeyError):
            coll.update_one({"_id": "b"}, {"$set": {"u": 2}})
        # A retry: the same lsid and txnNumber again; the statements ran, so n stays 3.
        cmd = {"update": "imgs", "updates": [{"q": {"_id": "a"}, "u": {"$inc": {"n": 1}}}] * 2,
               "ordered": False, "txnNumber": Int64(7)}
        client = pymongo.MongoClient(self.standin.uri)     # its own session pool
        try:
            with client.start_session() as s:
                first = client.fastpaths.command(dict(cmd), session=s)
                again = client.fastpaths.command(dict(cmd), session=s)
        finally:
            client.close()
        self.assertEqual((first["n"], first["nModified"]), (2, 2))
        self.assertEqual((again["n"], again["nModified"]), (2, 2))
        self.assertEqual(coll.find_one({"_id": "a"})["n"], 4)
        self.assertEqual(sorted(d["u"] for d in coll.find()), [2, 3])
        self.assertEqual(coll.count_documents({"u": 2}), 1)
        coll.drop()

    def test_find_returns_the_stored_bytes(self):
        coll = self.db.get_collection("raw", codec_options=bson.CodecOptions(
            document_class=RawBSONDocument))
        plain = self.db.raw
        docs = [{"_id": i, "v": "x" * i, "d": {"k": [i, {"z": None}]}} for i in range(50)]
        plain.insert_many(docs)
        plain.insert_one(SON([("a", 1), ("_id", 99)]))          # _id not first: moved first
        plain.update_one({"_id": 3}, {"$inc": {"n": 1}})    # stored without its bytes
        plain.update_one({"_id": 3}, {"$inc": {"n": 1}})    # from the size kept
        plain.update_one({"_id": 4}, {"$set": {"d.k": 1}})
        plain.replace_one({"_id": 5}, {"r": True})
        plain.delete_one({"_id": 6})
        got = {d["_id"]: d.raw for d in coll.find({}, sort=[("_id", 1)], batch_size=7)}
        want = {d["_id"]: bsonutil.encode(d) for d in plain.find({})}
        self.assertEqual(got, want)
        self.assertNotIn(6, got)
        self.assertEqual(bson.decode(got[99]), {"_id": 99, "a": 1})
        self.assertEqual(bson.decode(got[3])["n"], 2)
        self.assertEqual(bson.decode(got[5]), {"_id": 5, "r": True})
        ranged = [d["_id"] for d in coll.find({"_id": {"$gt": 10, "$lte": 20}},
                                              sort=[("_id", 1)], limit=5)]
        self.assertEqual(ranged, [11, 12, 13, 14, 15])


if __name__ == "__main__":
    unittest.main()
