"""Stand-in conformance: change streams - events, modes, resume options, limits (pymongo)."""

import datetime
import os
import sys
import threading
import time
import unittest

import pymongo
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn, next_event  # noqa: E402

S = None
CLIENT = None


def setUpModule():
    global S, CLIENT
    S = StandIn(["--ttl-interval", "1"])
    S.start()
    CLIENT = pymongo.MongoClient(S.uri)


def tearDownModule():
    CLIENT.close()
    assert S.stop() == 0


def drain(cs, n, timeout=10.0):
    return [next_event(cs, timeout) for _ in range(n)]


class RawStream:
    """A change stream driven by explicit aggregate/getMore commands.

    pymongo 3.11 predates fullDocumentBeforeChange, so those tests speak the commands.
    """

    def __init__(self, db, coll, spec, pipeline=()):
        self.db, self.coll = db, coll
        r = db.command("aggregate", coll, pipeline=[{"$changeStream": spec}] + list(pipeline),
                       cursor={})
        self.id = r["cursor"]["id"]
        self.buffer = list(r["cursor"]["firstBatch"])

    def next(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not self.buffer:
            if time.monotonic() > deadline:
                raise AssertionError("no change event within %.0f s" % timeout)
            r = self.db.command("getMore", self.id, collection=self.coll, maxTimeMS=200)
            self.buffer.extend(r["cursor"]["nextBatch"])
        return self.buffer.pop(0)

    def close(self):
        try:
            self.db.command("killCursors", self.coll, cursors=[self.id])
        except OperationFailure:
            pass


def token(ev):
    return ev["_id"]["_data"]


class EventShapeTest(unittest.TestCase):
    def setUp(self):
        self.db = CLIENT.cs_shape
        self.c = self.db[self._testMethodName]

    def test_insert_event_fields_and_order(self):
        with self.c.watch(max_await_time_ms=200) as cs:
            self.c.insert_one({"_id": 1, "a": "x"})
            ev = next_event(cs)
        self.assertEqual(list(ev), ["_id", "operationType", "clusterTime", "wallTime",
                                    "fullDocument", "ns", "documentKey"])
        self.assertEqual(ev["operationType"], "insert")
        self.assertIsInstance(ev["clusterTime"], Timestamp)
        self.assertIsInstance(ev["wallTime"], datetime.datetime)
        self.assertEqual(ev["fullDocument"], {"_id": 1, "a": "x"})
        self.assertEqual(ev["ns"], {"db": "cs_shape", "coll": self.c.name})
        self.assertEqual(ev["documentKey"], {"_id": 1})
        self.assertEqual(list(ev["_id"]), ["_data"])
        self.assertNotIn("lsid", ev)
        self.assertNotIn("txnNumber", ev)

    def test_update_replace_delete_events(self):
        self.c.insert_one({"_id": 1, "a": 1, "b": 2, "arr": [1, 2, 3]})
        with self.c.watch(max_await_time_ms=200) as cs:
            self.c.update_one({"_id": 1}, {"$set": {"a": 5, "n.x": 1}, "$unset": {"b": 1},
                                           "$pop": {"arr": 1}})
            self.c.replace_one({"_id": 1}, {"z": 1})
            self.c.delete_one({"_id": 1})
            up, rep, dele = drain(cs, 3)
        self.assertEqual(list(up), ["_id", "operationType", "clusterTime", "wallTime", "ns",
                                    "documentKey", "updateDescription"])
        ud = up["updateDescription"]
        self.assertEqual(list(ud), ["updatedFields", "removedFields", "truncatedArrays"])
        self.assertEqual(ud["updatedFields"]["a"], 5)
        self.assertEqual(ud["removedFields"], ["b"])
        self.assertEqual(rep["operationType"], "replace")
        self.assertEqual(rep["fullDocument"], {"_id": 1, "z": 1})
        self.assertEqual(list(dele), ["_id", "operationType", "clusterTime", "wallTime", "ns",
                                      "documentKey"])

    def test_drop_then_invalidate_closes_collection_stream(self):
        self.c.insert_one({})
        cs = self.c.watch(max_await_time_ms=200)
        self.c.drop()
        drop, inval = drain(cs, 2)
        self.assertEqual(list(drop), ["_id", "operationType", "clusterTime", "wallTime", "ns"])
        self.assertEqual(drop["operationType"], "drop")
        self.assertEqual(list(inval), ["_id", "operationType", "clusterTime", "wallTime"])
        self.assertEqual(inval["operationType"], "invalidate")
        self.assertEqual(inval["clusterTime"], drop["clusterTime"])
        self.assertGreater(token(inval), token(drop))
        self.assertFalse(cs.alive)

    def test_rename_event_has_to_and_invalidates(self):
        self.c.insert_one({})
        cs = self.c.watch(max_await_time_ms=200)
        self.c.rename(self.c.name + "_new")
        ren, inval = drain(cs, 2)
        self.assertEqual(ren["operationType"], "rename")
        self.assertEqual(ren["ns"], {"db": "cs_shape", "coll": self.c.name})
        self.assertEqual(ren["to"], {"db": "cs_shape", "coll": self.c.name + "_new"})
        self.assertEqual(inval["operationType"], "invalidate")

    def test_database_stream_and_drop_database(self):
        db = CLIENT.cs_dbwatch
        db.a.insert_one({"_id": 0})
        r = db.command("aggregate", 1, pipeline=[{"$changeStream": {}}], cursor={})
        self.assertEqual(r["cursor"]["ns"], "cs_dbwatch.$cmd.aggregate")
        cs = db.watch(max_await_time_ms=200)
        db.a.insert_one({"_id": 1})
        db.b.insert_one({"_id": 2})
        db.a.drop()
        CLIENT.drop_database("cs_dbwatch")
        evs = drain(cs, 6)
        self.assertEqual([e["operationType"] for e in evs],
                         ["insert", "insert", "drop", "drop", "dropDatabase", "invalidate"])
        self.assertEqual([e.get("ns") for e in evs[2:5]],
                         [{"db": "cs_dbwatch", "coll": "a"}, {"db": "cs_dbwatch", "coll": "b"},
                          {"db": "cs_dbwatch"}])
        self.assertFalse(cs.alive)

    def test_cluster_stream_sees_all_databases_and_survives_drop_database(self):
        cs = CLIENT.watch(max_await_time_ms=200)
        CLIENT.cs_c1.x.insert_one({"_id": 1})
        CLIENT.cs_c2.y.insert_one({"_id": 2})
        CLIENT.drop_database("cs_c1")
        CLIENT.cs_c2.y.insert_one({"_id": 3})
        evs = drain(cs, 5)
        self.assertEqual([e["operationType"] for e in evs],
                         ["insert", "insert", "drop", "dropDatabase", "insert"])
        self.assertTrue(cs.alive)
        cs.close()
        r = CLIENT.admin.command("aggregate", 1, pipeline=[
            {"$changeStream": {"allChangesForCluster": True}}], cursor={})
        self.assertEqual(r["cursor"]["ns"], "admin.$cmd.aggregate")
        with self.assertRaises(OperationFailure) as cm:
            CLIENT.admin.command("aggregate", 1, pipeline=[{"$changeStream": {}}], cursor={})
        self.assertEqual(cm.exception.code, 73)


class FullDocumentTest(unittest.TestCase):
    def setUp(self):
        self.db = CLIENT.cs_full
        self.c = self.db[self._testMethodName]

    def test_update_lookup_returns_current_document_or_null(self):
        self.c.insert_one({"_id": 1, "v": 0})
        with self.c.watch(full_document="updateLookup", max_await_time_ms=200) as cs:
            self.c.update_one({"_id": 1}, {"$set": {"v": 1}})
            ev = next_event(cs)
            self.assertEqual(list(ev)[:6], ["_id", "operationType", "clusterTime", "wallTime",
                                            "fullDocument", "ns"])
            self.assertEqual(ev["fullDocument"], {"_id": 1, "v": 1})
            self.c.update_one({"_id": 1}, {"$set": {"v": 2}})
            self.c.delete_one({"_id": 1})
            upd, dele = drain(cs, 2)
            self.assertIsNone(upd["fullDocument"])
            self.assertNotIn("fullDocument", dele)

    def test_post_images_need_collmod(self):
        self.c.insert_one({"_id": 1, "v": 0})
        with self.c.watch(full_document="whenAvailable", max_await_time_ms=200) as cs:
            self.c.update_one({"_id": 1}, {"$set": {"v": 1}})
            self.assertIsNone(next_event(cs)["fullDocument"])
        with self.c.watch(full_document="required", max_await_time_ms=200) as cs:
            self.c.update_one({"_id": 1}, {"$set": {"v": 2}})
            with self.assertRaises(OperationFailure) as cm:
                next_event(cs)
            self.assertEqual(cm.exception.code, 47)
            self.assertIn("Change stream was configured to require a post-image for all "
                          "update events, but the post-image was not found for event: ",
                          str(cm.exception))

    def test_pre_and_post_images_when_enabled(self):
        self.db.command("create", self.c.name,
                        changeStreamPreAndPostImages={"enabled": True})
        self.c.insert_one({"_id": 1, "v": 0})
        cs = RawStream(self.db, self.c.name, {"fullDocument": "required",
                                              "fullDocumentBeforeChange": "required"})
        self.c.update_one({"_id": 1}, {"$inc": {"v": 1}})
        self.c.replace_one({"_id": 1}, {"w": 1})
        self.c.delete_one({"_id": 1})
        self.c.insert_one({"_id": 2})
        up, rep, dele, ins = [cs.next() for _ in range(4)]
        cs.close()
        self.assertEqual(list(up), ["_id", "operationType", "clusterTime", "wallTime",
                                    "fullDocument", "ns", "documentKey", "updateDescription",
                                    "fullDocumentBeforeChange"])
        self.assertEqual(up["fullDocument"], {"_id": 1, "v": 1})
        self.assertEqual(up["fullDocumentBeforeChange"], {"_id": 1, "v": 0})
        self.assertEqual(rep["fullDocumentBeforeChange"], {"_id": 1, "v": 1})
        self.assertEqual(dele["fullDocumentBeforeChange"], {"_id": 1, "w": 1})
        self.assertNotIn("fullDocumentBeforeChange", ins)

    def test_pre_images_off_or_unavailable(self):
        self.c.insert_one({"_id": 1})
        cs = RawStream(self.db, self.c.name, {"fullDocumentBeforeChange": "whenAvailable"})
        self.c.update_one({"_id": 1}, {"$set": {"a": 1}})
        # whenAvailable without an image: the field is there, null (the drivers' spec test
        # change-streams-pre_and_post_images, run against real servers).
        self.assertIsNone(cs.next()["fullDocumentBeforeChange"])
        cs.close()
        cs = RawStream(self.db, self.c.name, {"fullDocumentBeforeChange": "required"})
        self.c.delete_one({"_id": 1})
        with self.assertRaises(OperationFailure) as cm:
            cs.next()
        self.assertEqual(cm.exception.code, 51770)
        self.assertIn("Change stream was configured to require a pre-image for all update, "
                      "delete and replace events, but pre-image id was not available for event: "
                      "{operationType: \"delete\", ns: {db: \"cs_full\", coll: \"%s\"}, "
                      "clusterTime: Timestamp(" % self.c.name, str(cm.exception))
        cs = RawStream(self.db, self.c.name, {"fullDocumentBeforeChange": "off"})
        self.c.insert_one({"_id": 3})
        self.assertNotIn("fullDocumentBeforeChange", cs.next())
        cs.close()

    def test_invalid_modes_and_options(self):
        cases = [({"fullDocument": "bogus"}, 2), ({"fullDocumentBeforeChange": "x"}, 2),
                 ({"bogus": 1}, 40415),
                 ({"startAtOperationTime": Timestamp(1, 1), "resumeAfter": {"_data": "x"}},
                  40674)]
        for spec, code in cases:
            with self.assertRaises(OperationFailure) as cm:
                self.db.command("aggregate", "c", pipeline=[{"$changeStream": spec}], cursor={})
            self.assertEqual(cm.exception.code, code, spec)
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("aggregate", "c", pipeline=[{"$match": {}}, {"$changeStream": {}}],
                            cursor={})
        self.assertEqual(cm.exception.code, 40602)


class UserStagesTest(unittest.TestCase):
    def setUp(self):
        self.c = CLIENT.cs_stages[self._testMethodName]

    def test_match_project_add_fields(self):
        pipeline = [{"$match": {"operationType": "insert", "fullDocument.keep": True}},
                    {"$project": {"fullDocument": 1, "operationType": 1}},
                    {"$addFields": {"extra": "$fullDocument.n"}}]
        with self.c.watch(pipeline, max_await_time_ms=200) as cs:
            self.c.insert_many([{"n": 1, "keep": False}, {"n": 2, "keep": True}])
            ev = next_event(cs)
        self.assertEqual(ev["fullDocument"]["n"], 2)
        self.assertEqual(ev["extra"], 2)
        self.assertEqual(sorted(ev), ["_id", "extra", "fullDocument", "operationType"])

    def test_modifying_id_fails_with_280(self):
        for stage in ({"$project": {"_id": 0}}, {"$addFields": {"_id": "x"}}):
            with self.c.watch([stage], max_await_time_ms=200) as cs:
                self.c.insert_one({})
                with self.assertRaises(OperationFailure) as cm:
                    next_event(cs)
                self.assertEqual(cm.exception.code, 280, stage)
                self.assertIn("NonResumableChangeStreamError",
                              cm.exception.details.get("errorLabels", []))

    def test_disallowed_stage_is_rejected(self):
        with self.assertRaises(OperationFailure):
            self.c.watch([{"$group": {"_id": None}}])


class ResumeTest(unittest.TestCase):
    def setUp(self):
        self.db = CLIENT.cs_resume
        self.c = self.db[self._testMethodName]

    def test_resume_after_start_after_and_start_at_operation_time(self):
        with self.c.watch(max_await_time_ms=200) as cs:
            self.c.insert_many([{"_id": i} for i in range(4)])
            evs = drain(cs, 4)
        with self.c.watch(resume_after=evs[1]["_id"], max_await_time_ms=200) as cs:
            self.assertEqual([e["documentKey"]["_id"] for e in drain(cs, 2)], [2, 3])
        with self.c.watch(start_after=evs[2]["_id"], max_await_time_ms=200) as cs:
            self.assertEqual(next_event(cs)["documentKey"]["_id"], 3)
        with self.c.watch(start_at_operation_time=evs[1]["clusterTime"],
                          max_await_time_ms=200) as cs:
            self.assertEqual([e["documentKey"]["_id"] for e in drain(cs, 3)], [1, 2, 3])

    def test_invalidate_token_resume_after_260_start_after_works(self):
        self.c.insert_one({"_id": 1})
        cs = self.c.watch(max_await_time_ms=200)
        self.c.drop()
        _drop, inval = drain(cs, 2)
        with self.assertRaises(OperationFailure) as cm:
            self.c.watch(resume_after=inval["_id"])
        self.assertEqual(cm.exception.code, 260)
        self.assertEqual(cm.exception.details["codeName"], "InvalidResumeToken")
        self.assertEqual(cm.exception.details["errmsg"],
                         "Attempting to resume a change stream using 'resumeAfter' is not "
                         "allowed from an invalidate notification.")
        with self.c.watch(start_after=inval["_id"], max_await_time_ms=200) as cs2:
            self.c.insert_one({"_id": 2})
            self.assertEqual(next_event(cs2)["documentKey"], {"_id": 2})

    def test_a_filtered_out_invalidate_still_closes_the_cursor_at_its_token(self):
        # MongoDB's check-invalidate stage runs before the user's stages: it
        # queues the invalidate, then throws ChangeStreamInvalidated with the
        # invalidate's token, which getmore_cmd.cpp turns into a closed cursor
        # (id 0) with that token as postBatchResumeToken, whether or not a
        # user $match let the event through
        # (document_source_change_stream_check_invalidate.cpp, getmore_cmd.cpp).
        self.c.insert_one({"_id": 1})
        only = [{"$match": {"operationType": {"$in": ["insert", "update"]}}}]
        filtered = RawStream(self.db, self.c.name, {}, only)
        whole = RawStream(self.db, self.c.name, {})
        self.c.insert_one({"_id": 2})
        self.assertEqual(filtered.next()["documentKey"], {"_id": 2})
        self.c.drop()
        _ins, _drop, inval = whole.next(), whole.next(), whole.next()
        self.assertEqual(inval["operationType"], "invalidate")
        more = self.db.command("getMore", filtered.id, collection=self.c.name, maxTimeMS=200)
        self.assertEqual(more["cursor"]["nextBatch"], [])
        self.assertEqual(more["cursor"]["id"], 0)
        self.assertEqual(more["cursor"]["postBatchResumeToken"], inval["_id"])
        # The cursor is gone: a driver that asks again is told so (43), and
        # resuming from the token needs startAfter (260 with resumeAfter).
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("getMore", filtered.id, collection=self.c.name, maxTimeMS=50)
        self.assertEqual(cm.exception.code, 43)
        with self.assertRaises(OperationFailure) as cm:
            self.c.watch(only, resume_after=inval["_id"])
        self.assertEqual(cm.exception.code, 260)
        with self.c.watch(only, start_after=inval["_id"], max_await_time_ms=200) as cs:
            self.c.insert_one({"_id": 3})
            self.assertEqual(next_event(cs)["documentKey"], {"_id": 3})

    def test_tokens_are_totally_ordered_and_pbrt_never_regresses(self):
        cs = self.db.watch(max_await_time_ms=100)
        toks = []
        self.c.insert_many([{"_id": i} for i in range(5)])
        self.c.update_many({}, {"$set": {"x": 1}})
        self.db.other.insert_one({})
        self.c.drop()
        for ev in drain(cs, 12):
            toks.append(token(ev))
        self.assertEqual(toks, sorted(toks))
        self.assertEqual(len(set(toks)), len(toks))
        pbrt = cs.resume_token["_data"]
        self.assertGreaterEqual(pbrt, toks[-1])
        cs.try_next()
        self.assertGreaterEqual(cs.resume_token["_data"], pbrt)
        cs.close()

    def test_post_batch_resume_token_on_every_batch(self):
        r = self.db.command("aggregate", self.c.name, pipeline=[{"$changeStream": {}}],
                            cursor={})
        cur = r["cursor"]
        self.assertEqual(cur["firstBatch"], [])
        self.assertIn("_data", cur["postBatchResumeToken"])
        self.assertEqual(cur["ns"], "cs_resume." + self.c.name)
        self.assertNotEqual(cur["id"], 0)
        more = self.db.command("getMore", cur["id"], collection=self.c.name, maxTimeMS=50)
        self.assertEqual(more["cursor"]["nextBatch"], [])
        self.assertGreaterEqual(more["cursor"]["postBatchResumeToken"]["_data"],
                                cur["postBatchResumeToken"]["_data"])
        self.c.insert_one({"_id": 1})
        more = self.db.command("getMore", cur["id"], collection=self.c.name, maxTimeMS=50)
        ev = more["cursor"]["nextBatch"][0]
        self.assertEqual(more["cursor"]["postBatchResumeToken"], ev["_id"])

    def test_operation_time_lies_after_existing_entries(self):
        self.c.insert_one({"_id": "before"})
        last = self.c.database.command("ping")["operationTime"]
        r = self.db.command("aggregate", self.c.name, pipeline=[{"$changeStream": {}}],
                            cursor={})
        self.assertGreater(r["operationTime"], last)
        with self.c.watch(start_at_operation_time=r["operationTime"],
                          max_await_time_ms=100) as cs:
            self.assertIsNone(cs.try_next())
            self.c.insert_one({"_id": "after"})
            self.assertEqual(next_event(cs)["documentKey"]["_id"], "after")

    def test_get_more_waits_for_max_time_ms_and_wakes_on_write(self):
        r = self.db.command("aggregate", self.c.name, pipeline=[{"$changeStream": {}}],
                            cursor={})
        cid = r["cursor"]["id"]
        start = time.monotonic()
        self.db.command("getMore", cid, collection=self.c.name, maxTimeMS=300)
        self.assertGreaterEqual(time.monotonic() - start, 0.29)
        timer = threading.Timer(0.2, lambda: CLIENT.cs_resume[self.c.name].insert_one({}))
        timer.start()
        start = time.monotonic()
        more = self.db.command("getMore", cid, collection=self.c.name, maxTimeMS=20000)
        elapsed = time.monotonic() - start
        timer.join()
        self.assertEqual(len(more["cursor"]["nextBatch"]), 1)
        # Woken by the write, not at maxTimeMS (half of it: room for a loaded machine).
        self.assertLess(elapsed, 10)

    def test_unknown_resume_token_is_rejected(self):
        with self.assertRaises(OperationFailure):
            self.c.watch(resume_after={"_data": "nonsense"})


class LongTokenTest(unittest.TestCase):
    """resume_token.cpp: an event token is a hex KeyString of clusterTime, version, tokenType,
    txnOpIndex, fromInvalidate, the collection UUID and the event identifier (the documentKey,
    with operationType in v2 tokens), so a long _id makes a long token."""

    def test_a_2000_byte_string_id_gives_a_token_longer_than_the_id_and_resumes(self):
        c = CLIENT.cs_long.tokens
        cs = c.watch(max_await_time_ms=100)
        big = "k" * 2000
        c.insert_one({"_id": big})
        c.insert_one({"_id": "short"})
        first, second = drain(cs, 2)
        cs.close()
        self.assertEqual(first["documentKey"], {"_id": big})
        self.assertGreater(len(token(first)), 4000)
        self.assertRegex(token(first), r"^[0-9A-F]+$")
        self.assertLess(len(token(second)), 300)
        self.assertLess(token(first), token(second))
        for option in ("resume_after", "start_after"):
            again = c.watch(max_await_time_ms=100, **{option: first["_id"]})
            self.assertEqual(next_event(again)["documentKey"], {"_id": "short"})
            again.close()
        # The token is opaque: a changed identifier is not one this deployment issued.
        with self.assertRaises(OperationFailure):
            c.watch(resume_after={"_data": token(first)[:-8]}).try_next()


class HistoryLostTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = StandIn(["--oplog-max-entries", "5"])
        cls.s.start()
        cls.client = pymongo.MongoClient(cls.s.uri)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.s.stop()

    def test_resume_point_older_than_oplog_fails_286(self):
        c = self.client.hl.c
        t0 = self.client.admin.command("ping")["operationTime"]
        r = self.client.hl.command("aggregate", "c", pipeline=[{"$changeStream": {}}],
                                   cursor={})
        evs = []
        for i in range(20):
            c.insert_one({"_id": i})
            more = self.client.hl.command("getMore", r["cursor"]["id"], collection="c",
                                          maxTimeMS=10)
            evs.extend(more["cursor"]["nextBatch"])
        self.assertEqual(len(evs), 20)
        for kwargs in ({"resume_after": evs[0]["_id"]}, {"start_at_operation_time": t0},
                       {"resume_after": evs[14]["_id"]}):
            with self.assertRaises(OperationFailure) as cm:
                c.watch(**kwargs)
            d = cm.exception.details
            self.assertEqual((d["code"], d["codeName"]), (286, "ChangeStreamHistoryLost"))
            self.assertIn("NonResumableChangeStreamError", d["errorLabels"])
            self.assertEqual(d["errmsg"], "Resume of change stream was not possible, as the "
                             "resume point may no longer be in the oplog.")
        # The newest five entries are retained: resuming after the 16th event still works.
        with c.watch(resume_after=evs[15]["_id"], max_await_time_ms=100) as cs:
            self.assertEqual([e["documentKey"]["_id"] for e in drain(cs, 4)], [16, 17, 18, 19])

    def test_cursor_that_falls_behind_the_cap_loses_its_position(self):
        db = self.client.hl2
        r = db.command("aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={})
        db.c.insert_many([{"_id": i} for i in range(10)])
        with self.assertRaises(OperationFailure) as cm:
            db.command("getMore", r["cursor"]["id"], collection="c", maxTimeMS=10)
        self.assertEqual(cm.exception.code, 136)


MIB = 1024 * 1024


class SplitLargeEventTest(unittest.TestCase):
    """Events over 16 MiB: error 10334, or fragments with $changeStreamSplitLargeEvent."""

    def setUp(self):
        self.db = CLIENT.cs_split
        self.c = self.db[self._testMethodName]
        self.c.insert_one({"_id": 0})
        self.c.delete_one({"_id": 0})

    def make_big_update(self):
        """A 9 MiB document updated: with updateLookup and its pre-image, the event is ~18 MiB."""
        self.db.command("collMod", self.c.name, changeStreamPreAndPostImages={"enabled": True})
        self.c.insert_one({"_id": 1, "big": "a" * (9 * MIB)})
        self.c.update_one({"_id": 1}, {"$set": {"big": "b" * (9 * MIB), "n": 1}})
        self.c.insert_one({"_id": 2, "small": True})

    def open(self, stages=(), **extra):
        spec = {"fullDocument": "updateLookup", "fullDocumentBeforeChange": "whenAvailable"}
        spec.update(extra)
        return RawStream(self.db, self.c.name, spec, list(stages))

    def test_event_over_16_mib_fails_with_10334(self):
        start = self.c.watch(max_await_time_ms=100)
        start.try_next()
        tok = start.resume_token
        start.close()
        self.make_big_update()
        with self.assertRaises(OperationFailure) as cm:
            rs = self.open(resumeAfter=tok)
            for _ in range(3):
                rs.next(timeout=5)
        self.assertEqual(cm.exception.code, 10334)
        self.assertIn("BSONObjectTooLarge", str(cm.exception.details))

    def test_split_stage_cuts_the_event_into_fragments_by_top_level_field(self):
        rs = self.open([{"$changeStreamSplitLargeEvent": {}}])
        self.make_big_update()
        self.assertEqual(rs.next()["operationType"], "insert")
        frags = [rs.next()]
        while frags[-1]["splitEvent"]["fragment"] < frags[-1]["splitEvent"]["of"]:
            frags.append(rs.next())
        self.assertEqual([f["splitEvent"] for f in frags],
                         [{"fragment": i, "of": len(frags)} for i in range(1, len(frags) + 1)])
        self.assertGreaterEqual(len(frags), 2)
        self.assertEqual(len({token(f) for f in frags}), len(frags))
        merged = {}
        for f in frags:
            self.assertLessEqual(len(bson_encode(f)), 16 * MIB)
            for k, v in f.items():
                if k not in ("_id", "splitEvent"):
                    self.assertNotIn(k, merged)
                    merged[k] = v
        self.assertEqual(merged["operationType"], "update")
        self.assertEqual(merged["fullDocument"]["big"], "b" * (9 * MIB))
        self.assertEqual(merged["fullDocumentBeforeChange"]["big"], "a" * (9 * MIB))
        self.assertEqual(merged["documentKey"], {"_id": 1})
        nxt = rs.next()
        self.assertEqual((nxt["operationType"], nxt["documentKey"]), ("insert", {"_id": 2}))
        self.assertNotIn("splitEvent", nxt)
        # Resuming from a fragment's token goes on with the next fragment.
        rs.close()
        again = self.open([{"$changeStreamSplitLargeEvent": {}}], resumeAfter=frags[0]["_id"])
        self.assertEqual(again.next()["splitEvent"], {"fragment": 2, "of": len(frags)})
        again.close()
        last = self.open([{"$changeStreamSplitLargeEvent": {}}], resumeAfter=frags[-1]["_id"])
        self.assertEqual(last.next()["documentKey"], {"_id": 2})
        last.close()
        # Without the stage, a fragment's token cannot be resumed from.
        with self.assertRaises(OperationFailure) as cm:
            self.open(resumeAfter=frags[0]["_id"])
        self.assertEqual(cm.exception.code, 280)

    # MongoDB's change_stream_split_event_helpers.cpp (splitChangeEvent): the fields but _id,
    # ordered by BSON element size then name, fill fragment after fragment.
    def test_split_fragments_take_fields_by_size_not_in_the_event_order(self):
        rs = self.open([{"$changeStreamSplitLargeEvent": {}}])
        self.make_big_update()
        rs.next()
        frags = [rs.next()]
        while frags[-1]["splitEvent"]["fragment"] < frags[-1]["splitEvent"]["of"]:
            frags.append(rs.next())
        rs.close()
        keys = []
        merged = {}
        for f in frags:
            self.assertEqual(list(f)[:2], ["_id", "splitEvent"])
            keys += list(f)[2:]
            merged.update((k, f[k]) for k in list(f)[2:])
        by_size = sorted(keys, key=lambda k: (len(bson_encode({k: merged[k]})), k.encode()))
        self.assertEqual(keys, by_size)
        # The manual's order (change events page) is not what the fragments give back.
        self.assertNotEqual(keys, ["operationType", "clusterTime", "wallTime", "fullDocument",
                                   "ns", "documentKey", "updateDescription",
                                   "fullDocumentBeforeChange"])
        self.assertIn(keys[-1], ("fullDocument", "fullDocumentBeforeChange",
                                 "updateDescription"))
        # Each fragment has its own token; all resume after the event's earlier fragments.
        self.assertEqual(len({token(f) for f in frags}), len(frags))

    def event_size_with(self, stream, big, pad):
        """(size of the update event for a `big`-long field set on a document padded by
        `pad` characters, the stream's next event)."""
        self.c.delete_many({})
        self.c.insert_one({"_id": 1, "pad": "p" * pad, "big": "a"})
        self.c.update_one({"_id": 1}, {"$set": {"big": "b" * big}})
        stream.next()   # the delete of the previous round, or nothing
        ev = stream.next()
        while ev["operationType"] != "update" and "splitEvent" not in ev:
            ev = stream.next()
        return len(bson_encode(ev)), ev

    # document_source_change_stream_split_large_event.h: kBSONObjMaxChangeEventSize is
    # BSONObjMaxInternalSize (16 MiB + 16 KiB) - 8 KiB; 6.0.9/7.0 split only an event larger.
    def test_split_starts_above_16_mib_plus_8_kib(self):
        limit = 16 * MIB + 8 * 1024
        rs = self.open([{"$changeStreamSplitLargeEvent": {}}], fullDocumentBeforeChange="off")
        size, _ = self.event_size_with(rs, 1000, 100)
        fixed = size - 2 * 1000 - 100    # big is in fullDocument and updateDescription
        for target, split in ((limit, False), (limit + 1, True)):
            pad = 100 + (target - fixed - 100) % 2
            big = (target - fixed - pad) // 2
            size, ev = self.event_size_with(rs, big, pad)
            if split:
                self.assertIn("splitEvent", ev)
                while ev["splitEvent"]["fragment"] < ev["splitEvent"]["of"]:
                    ev = rs.next()
            else:
                self.assertEqual(size, target)
                self.assertNotIn("splitEvent", ev)
        rs.close()

    # change_stream_split_event_helpers.cpp: a fragment that one field alone makes too large
    # fails with 7182500 (not 10334 BSONObjectTooLarge).
    def test_a_field_too_large_for_a_fragment_fails_with_7182500(self):
        both = {"$addFields": {"both": ["$fullDocument", "$fullDocument"]}}
        rs = self.open([both, {"$changeStreamSplitLargeEvent": {}}])
        self.c.insert_one({"_id": 1})
        self.c.update_one({"_id": 1}, {"$set": {"big": "b" * (9 * MIB)}})
        first = rs.next()
        self.assertEqual(first["operationType"], "insert")
        with self.assertRaises(OperationFailure) as cm:
            rs.next()
        self.assertEqual(cm.exception.code, 7182500)
        # The limit is 16 MiB + 8 KiB less the event's token ({_data}); the update's token is
        # as long as the insert's (same key, operation names of the same length).
        limit = 16 * MIB + 8 * 1024 - len(bson_encode(first["_id"]))
        self.assertRegex(cm.exception.details["errmsg"],
                         r"^Splitting change event failed: fragment size \d+ is greater than "
                         r"maximum allowed fragment size %d$" % limit)
        self.assertNotIn("errorLabels", cm.exception.details)

    def test_split_stage_must_be_last_and_empty(self):
        with self.assertRaises(OperationFailure) as cm:
            self.open([{"$changeStreamSplitLargeEvent": {}}, {"$match": {}}])
        self.assertEqual(cm.exception.code, 7182802)
        with self.assertRaises(OperationFailure) as cm:
            self.open([{"$changeStreamSplitLargeEvent": {"x": 1}}])
        self.assertEqual(cm.exception.code, 7182800)

    # expression.cpp ExpressionBsonSize::evaluate: Document::toBson() with the default limit,
    # BSONObjMaxInternalSize (16 MiB + 16 KiB); above it BSONObjectTooLarge (10334).
    def test_bson_size_of_an_event_over_16_mib_plus_16_kib_fails_with_10334(self):
        size = {"$replaceRoot": {"newRoot": {"_id": "$_id",
                                             "size": {"$bsonSize": "$$ROOT"}}}}
        rs = self.open([size])
        self.db.command("collMod", self.c.name, changeStreamPreAndPostImages={"enabled": True})
        self.c.insert_one({"_id": 1, "big": "a" * (9 * MIB)})
        self.assertGreater(rs.next()["size"], 9 * MIB)     # the insert: 9 MiB, measured
        self.c.update_one({"_id": 1}, {"$set": {"big": "b" * (9 * MIB)}})
        with self.assertRaises(OperationFailure) as cm:
            rs.next()                                       # the update: ~18 MiB
        self.assertEqual(cm.exception.code, 10334)
        self.assertRegex(cm.exception.details["errmsg"],
                         r"^BSONObj size: \d+ \(0x[0-9A-F]+\) is invalid\. Size must be between "
                         r"0 and 16793600\(16MB\)$")
        rs.close()

    def test_bson_size_expression_lets_a_stage_shrink_large_events(self):
        stub = {"$replaceRoot": {"newRoot": {"$cond": {
            "if": {"$lte": [{"$bsonSize": "$$ROOT"}, 1000]}, "then": "$$ROOT",
            "else": {"_id": "$_id", "documentKey": "$documentKey",
                     "size": {"$bsonSize": "$$ROOT"}}}}}}
        rs = RawStream(self.db, self.c.name, {}, [stub])
        self.c.insert_one({"_id": 5, "pad": "x" * 5000})
        self.c.insert_one({"_id": 6})
        ev = rs.next()
        self.assertEqual(set(ev), {"_id", "documentKey", "size"})
        self.assertGreater(ev["size"], 5000)
        self.assertEqual(rs.next()["fullDocument"], {"_id": 6})
        rs.close()


def bson_encode(doc):
    import bson
    return bson.BSON.encode(doc)


class TtlTest(unittest.TestCase):
    def test_ttl_monitor_deletes_expired_documents_with_delete_events(self):
        c = CLIENT.cs_ttl.c
        c.create_index("at", expireAfterSeconds=5)
        now = datetime.datetime.utcnow()
        with c.watch(max_await_time_ms=200) as cs:
            c.insert_many([{"_id": "old", "at": now - datetime.timedelta(seconds=60)},
                           {"_id": "new", "at": now},
                           {"_id": "nodate", "at": "x"}])
            drain(cs, 3)
            ev = next_event(cs, timeout=15)
        self.assertEqual(ev["operationType"], "delete")
        self.assertEqual(ev["documentKey"], {"_id": "old"})
        self.assertEqual(sorted(d["_id"] for d in c.find()), ["new", "nodate"])


if __name__ == "__main__":
    unittest.main()
