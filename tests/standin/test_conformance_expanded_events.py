"""Stand-in conformance: change streams with showExpandedEvents (MongoDB 6.0+), and the same DDL
unseen by every stream opened without it.

What mongod does, from its source (src/mongo/db/pipeline/):
- change_stream_filter_helpers.cpp: the oplog entries of create, createIndexes (and
  commitIndexBuild), dropIndexes and collMod, and the writes to <db>.system.views that make a
  view's create/drop, are in a stream's filter only with showExpandedEvents.
- change_stream_event_transform.cpp: with it every event with a collection UUID carries
  collectionUUID (after clusterTime); DDL events carry operationDescription: create, the
  entry's `o` less `create` (options, idIndex); createIndexes/dropIndexes, {indexes: [spec]};
  modify, the collMod command less collMod, with stateBeforeChange {collectionOptions,
  indexOptions}; rename, {to: {db, coll}, dropTarget: <UUID>} (dropTarget only when a target was
  dropped); a view's create (from system.views) has {viewOn, pipeline} and no collectionUUID.
- change_stream_document_diff_parser.cpp: updateDescription.disambiguatedPaths, {} unless a
  path holds a numeric field name (not first) or a dotted one; array indices come as ints.
mongod's own jstests/change_streams/ check the same shapes: ddl_create_event.js (create, explicit
and implicit by an insert: {idIndex: {v: 2, key: {_id: 1}, name: "_id_"}}), ddl_coll_mod_event.js
(modify: operationDescription {index: {...}}, stateBeforeChange {collectionOptions: {uuid},
indexOptions}), ddl_create_drop_index_events.js, ddl_view_events.js (views' events, none on a
collection's stream) and expanded_update_description.js (disambiguatedPaths).
The drivers' unified spec tests change-streams-showExpandedEvents.json and
change-streams-disambiguatedPaths.json check the same (spec_unified.py runs them); these tests
check the exact shapes, the streams that must not see any of it, restart and local.oplog.rs.
"""

import os
import shutil
import sys
import tempfile
import time
import unittest
import uuid

import pymongo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn  # noqa: E402
from fwstandin import bsonutil, storage  # noqa: E402

ID_INDEX = {"v": 2, "key": {"_id": 1}, "name": "_id_"}


class Stream:
    """A change stream driven by raw aggregate/getMore commands (pymongo 3.11's watch() has no
    showExpandedEvents)."""

    def __init__(self, db, coll, **spec):
        reply = db.command("aggregate", coll if coll else 1,
                           pipeline=[{"$changeStream": spec}], cursor={})
        self.db = db
        self.coll = coll if coll else "$cmd.aggregate"
        self.id = reply["cursor"]["id"]
        self.buf = list(reply["cursor"]["firstBatch"])

    def take(self, n, timeout=10.0):
        """The next n events; fails when they do not come within timeout."""
        deadline = time.monotonic() + timeout
        while len(self.buf) < n and time.monotonic() < deadline:
            reply = self.db.command("getMore", self.id, collection=self.coll, maxTimeMS=100)
            self.buf.extend(reply["cursor"]["nextBatch"])
        if len(self.buf) < n:
            raise AssertionError("%d events of %d within %.0f s: %r"
                                 % (len(self.buf), n, timeout, self.buf))
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def drain(self):
        """Every event there is now (one getMore past the last write)."""
        reply = self.db.command("getMore", self.id, collection=self.coll, maxTimeMS=100)
        out = self.buf + list(reply["cursor"]["nextBatch"])
        self.buf = []
        return out


def coll_uuid(db, name):
    info = list(db.list_collections(filter={"name": name}))[0]
    return info["info"]["uuid"]


def ddl_script(db):
    """One of each DDL change, then an insert that marks the end."""
    db.command("create", "c", changeStreamPreAndPostImages={"enabled": True})
    db.c.create_index([("x", 1)], name="x_1", expireAfterSeconds=60)
    db.command("collMod", "c", index={"name": "x_1", "expireAfterSeconds": 30})
    db.c.drop_index("x_1")
    db.command("create", "v", viewOn="c", pipeline=[{"$match": {"a": 1}}])
    db.command("drop", "v")
    db.command("create", "t")
    db.client.admin.command("renameCollection", db.name + ".c", to=db.name + ".t",
                            dropTarget=True)
    db.end.insert_one({"_id": "end"})


class Expanded(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = StandIn()
        cls.s.start()
        cls.client = pymongo.MongoClient(cls.s.uri)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.s.stop()

    def test_streams_without_the_option_see_no_ddl(self):
        db = self.client.plain
        coll_stream = Stream(db, "c")
        db_stream = Stream(db, None)
        ddl_script(db)
        # The target's drop, the rename, the end marker's insert: none of the DDL before,
        # nor the view's create/drop, nor the end collection's implicit create.
        got = db_stream.take(3)
        ops = [(e["operationType"], e["ns"].get("coll")) for e in got]
        self.assertEqual(ops, [("drop", "t"), ("rename", "c"), ("insert", "end")], got)
        self.assertEqual(db_stream.drain(), [])
        for e in got:
            self.assertNotIn("collectionUUID", e)
            self.assertNotIn("operationDescription", e)
        # The collection's stream: the rename and its invalidate, nothing of the DDL before.
        got = coll_stream.take(2)
        self.assertEqual([e["operationType"] for e in got], ["rename", "invalidate"], got)
        self.assertEqual(set(got[0]), {"_id", "operationType", "clusterTime", "wallTime", "ns",
                                       "to"})

    def test_ddl_events_as_mongod_makes_them(self):
        db = self.client.exp
        stream = Stream(db, None, showExpandedEvents=True)
        ddl_script(db)
        got = stream.take(11)
        ops = [(e["operationType"], e["ns"]["coll"]) for e in got]
        self.assertEqual(ops, [("create", "c"), ("createIndexes", "c"), ("modify", "c"),
                               ("dropIndexes", "c"), ("create", "v"), ("drop", "v"),
                               ("create", "t"), ("drop", "t"), ("rename", "c"),
                               ("create", "end"), ("insert", "end")])
        create, cix, mod, dix, vcreate, vdrop, tcreate, tdrop, ren, ecreate, ins = got
        uuid_c = create["collectionUUID"]
        # BinData subtype 4 (pymongo 3.11 reads it as a uuid.UUID).
        self.assertIsInstance(uuid_c, uuid.UUID)
        self.assertEqual(list(create), ["_id", "operationType", "clusterTime", "collectionUUID",
                                        "wallTime", "ns", "operationDescription"])
        self.assertEqual(create["operationDescription"],
                         {"changeStreamPreAndPostImages": {"enabled": True},
                          "idIndex": ID_INDEX})
        self.assertEqual(tcreate["operationDescription"], {"idIndex": ID_INDEX})
        self.assertEqual(cix["collectionUUID"], uuid_c)
        self.assertEqual(cix["operationDescription"], {"indexes": [
            {"v": 2, "key": {"x": 1}, "name": "x_1", "expireAfterSeconds": 60}]})
        self.assertEqual(mod["operationDescription"],
                         {"index": {"name": "x_1", "expireAfterSeconds": 30}})
        self.assertEqual(mod["stateBeforeChange"], {
            "collectionOptions": {"uuid": uuid_c,
                                  "changeStreamPreAndPostImages": {"enabled": True}},
            "indexOptions": {"expireAfterSeconds": 60}})
        self.assertEqual(dix["operationDescription"], {"indexes": [
            {"v": 2, "key": {"x": 1}, "name": "x_1", "expireAfterSeconds": 30}]})
        # A view's events come from system.views: no collectionUUID.
        self.assertNotIn("collectionUUID", vcreate)
        self.assertEqual(vcreate["operationDescription"],
                         {"viewOn": "c", "pipeline": [{"$match": {"a": 1}}]})
        self.assertNotIn("collectionUUID", vdrop)
        uuid_t = tcreate["collectionUUID"]
        self.assertEqual(tdrop["collectionUUID"], uuid_t)
        self.assertEqual(ren["collectionUUID"], uuid_c)
        self.assertEqual(ren["to"], {"db": "exp", "coll": "t"})
        self.assertEqual(ren["operationDescription"],
                         {"to": {"db": "exp", "coll": "t"}, "dropTarget": uuid_t})
        self.assertEqual(ins["collectionUUID"], ecreate["collectionUUID"])
        self.assertEqual(ins["collectionUUID"], coll_uuid(db, "end"))
        self.assertNotIn("operationDescription", ins)
        self.assertEqual(stream.drain(), [])

    def test_collection_stream_sees_its_own_ddl_only(self):
        db = self.client.own
        db.command("create", "a")
        db.command("create", "b")
        stream = Stream(db, "a", showExpandedEvents=True)
        db.b.create_index("y")
        db.a.create_index("x")
        db.command("create", "v", viewOn="a", pipeline=[])   # system.views: not "a"
        db.a.insert_one({"_id": 1})
        got = stream.take(2)
        self.assertEqual([e["operationType"] for e in got], ["createIndexes", "insert"])
        self.assertEqual(stream.drain(), [])

    def test_rename_without_a_target_has_no_drop_target(self):
        db = self.client.ren
        db.command("create", "a")
        stream = Stream(db, "a", showExpandedEvents=True)
        self.client.admin.command("renameCollection", "ren.a", to="ren.b")
        got = stream.take(2)
        self.assertEqual(got[0]["operationDescription"], {"to": {"db": "ren", "coll": "b"}})
        self.assertEqual(got[1]["operationType"], "invalidate")

    def test_disambiguated_paths(self):
        db = self.client.dis
        db.d.insert_many([{"_id": 1, "a": {"1": 1}, "arr": [{"1": 1}, 5], "p": {"q": 1}}])
        stream = Stream(db, "d", showExpandedEvents=True)
        plain = Stream(db, "d")
        db.d.update_one({"_id": 1}, {"$set": {"a.1": 2, "arr.0.1": 3, "p.q": 2, "arr.1": 6}})
        db.d.update_one({"_id": 1}, {"$unset": {"a.1": ""}})
        db.d.update_one({"_id": 1}, {"$set": {"p.q": 3}})
        first, second, third = stream.take(3)
        self.assertEqual(first["updateDescription"]["disambiguatedPaths"],
                         {"a.1": ["a", "1"], "arr.0.1": ["arr", 0, "1"]})
        self.assertIsInstance(first["updateDescription"]["disambiguatedPaths"]["arr.0.1"][1],
                              int)
        self.assertEqual(second["updateDescription"]["removedFields"], ["a.1"])
        self.assertEqual(second["updateDescription"]["disambiguatedPaths"], {"a.1": ["a", "1"]})
        # No ambiguous path: the field is there, empty.
        self.assertEqual(third["updateDescription"]["disambiguatedPaths"], {})
        for e in plain.take(3):
            self.assertNotIn("disambiguatedPaths", e["updateDescription"])

    def test_oplog_shows_ddl_entries_as_mongod_writes_them(self):
        db = self.client.ol
        db.command("create", "k")
        uuid_k = coll_uuid(db, "k")
        db.k.create_index("x", name="x_1")
        db.command("create", "v", viewOn="k", pipeline=[])
        last = list(self.client.local["oplog.rs"].find().sort("$natural", -1).limit(3))
        view, cix, create = last
        self.assertEqual((create["op"], create["ns"], create["ui"]), ("c", "ol.$cmd", uuid_k))
        self.assertEqual(create["o"], {"create": "k", "idIndex": ID_INDEX})
        self.assertEqual((cix["op"], cix["ns"]), ("c", "ol.$cmd"))
        self.assertEqual(cix["o"], {"commitIndexBuild": "k", "indexes": [
            {"v": 2, "key": {"x": 1}, "name": "x_1"}]})
        self.assertEqual((view["op"], view["ns"]), ("i", "ol.system.views"))
        self.assertEqual(view["o"], {"_id": "ol.v", "viewOn": "k", "pipeline": []})

    def test_views_are_listed_and_dropped(self):
        db = self.client.vw
        db.command("create", "v", viewOn="src", pipeline=[{"$match": {"a": 1}}])
        info = list(db.list_collections(filter={"name": "v"}))
        self.assertEqual(info[0]["type"], "view")
        self.assertEqual(info[0]["options"], {"viewOn": "src", "pipeline": [{"$match": {"a": 1}}]})
        with self.assertRaises(pymongo.errors.OperationFailure) as cm:
            db.command("create", "v")
        self.assertEqual(cm.exception.code, 48)
        db.command("drop", "v")
        self.assertEqual(list(db.list_collections(filter={"name": "v"})), [])


class ExpandedAfterRestart(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="standin-data-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def events(self, s, start):
        with pymongo.MongoClient(s.uri) as c:
            stream = Stream(c.rs, None, showExpandedEvents=True, startAtOperationTime=start)
            got = stream.take(12)
            self.assertEqual(stream.drain(), [])
            return got

    def test_ddl_events_replay_byte_for_byte(self):
        s = StandIn(["--data-dir", self.dir])
        s.start()
        with pymongo.MongoClient(s.uri) as c:
            start = c.admin.command("ping")["operationTime"]
            ddl_script(c.rs)
            c.rs.end.update_one({"_id": "end"}, {"$set": {"m.1": 1}})
        before = self.events(s, start)
        s.kill9()
        s = StandIn(["--data-dir", self.dir])
        s.start()
        try:
            self.assertEqual(self.events(s, start), before)
            self.assertEqual(before[-1]["updateDescription"]["disambiguatedPaths"], {})
        finally:
            s.stop()


class ExpandedAfterCompaction(unittest.TestCase):
    """A compacted journal (snapshot_records) rebuilds the DDL entries, views and
    descriptions exactly: the state a restart after compaction starts from."""

    def test_snapshot_records_rebuild_every_entry(self):
        s = storage.Store(1000)
        c = s.create_collection("d", "a", {})
        spec = {"v": 2, "key": {"x": 1}, "name": "x_1"}
        s.create_index(c, spec)
        s.index_events(c, [spec])
        s.create_view("d", "v", "a", [{"$match": {"x": 1}}])
        s.insert(c, {"_id": 1, "a": {"1": 1}})
        s.update(c, next(iter(c.docs.values())), {"_id": 1, "a": {"1": 2}},
                 {"updatedFields": {"a.1": 2}})
        t = s.create_collection("d", "t", {})
        s.drop_collection("d", "t")
        s.rename_collection("d", "a", "d", "t", t.uuid)
        s.create_view("d", "w", "t", [])
        s.drop_index(s.coll("d", "t"), "x_1")
        s.drop_view("d", "v")
        again = storage.Store(1000)
        for rec in s.snapshot_records():
            again.apply_record(bsonutil.decode(rec))

        def entries(store):
            return [(e.tsv, e.op, e.ns, e.raw, e.desc and bsonutil.encode(e.desc), e.view,
                     e.expanded) for e in store.oplog.iter_live()]
        self.assertEqual(entries(again), entries(s))
        self.assertEqual([e[1] for e in entries(s)], [
            "create", "createIndexes", "create", "i", "u", "create", "drop", "rename",
            "create", "dropIndexes", "drop"])
        self.assertEqual(again.views, {"d": {"w": {"viewOn": "t", "pipeline": []}}})


if __name__ == "__main__":
    unittest.main()
