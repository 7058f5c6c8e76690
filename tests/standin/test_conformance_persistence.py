"""Stand-in conformance: durability with --data-dir (kill -9 and restart), resume tokens that
stay valid across restarts, and journal compaction."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import pymongo
from pymongo.errors import DuplicateKeyError, OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import PYTHON, SCRIPT, StandIn, next_event  # noqa: E402


class KillNineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="standin-data-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_acknowledged_writes_survive_kill_9(self):
        s = StandIn(["--data-dir", self.dir])
        s.start()
        c = pymongo.MongoClient(s.uri)
        db = c.dur
        start = c.admin.command("ping")["operationTime"]
        cs = db.watch(max_await_time_ms=100)
        db.a.insert_many([{"_id": i, "v": i} for i in range(50)])
        db.a.create_index("email", unique=True, sparse=True)
        db.a.update_one({"_id": 1}, {"$set": {"email": "x@y"}})
        db.a.replace_one({"_id": 2}, {"r": True})
        db.a.delete_one({"_id": 3})
        db.command("create", "img", changeStreamPreAndPostImages={"enabled": True})
        db.img.insert_one({"_id": 1, "n": 1})
        db.img.update_one({"_id": 1}, {"$inc": {"n": 1}})
        db.tmp.insert_one({})
        db.tmp.rename("renamed")
        db.gone.insert_one({})
        db.gone.drop()
        before = [next_event(cs) for _ in range(50 + 3 + 2 + 1 + 1 + 1 + 1)]
        cs.close()
        c.close()
        s.kill9()

        s = StandIn(["--data-dir", self.dir])
        s.start()
        c = pymongo.MongoClient(s.uri)
        db = c.dur
        self.assertEqual(db.a.count_documents({}), 49)
        self.assertEqual(db.a.find_one({"_id": 1}), {"_id": 1, "v": 1, "email": "x@y"})
        self.assertEqual(db.a.find_one({"_id": 2}), {"_id": 2, "r": True})
        self.assertEqual(sorted(db.list_collection_names()), ["a", "img", "renamed"])
        self.assertIn("email_1", [ix["name"] for ix in db.a.list_indexes()])
        with self.assertRaises(DuplicateKeyError):
            db.a.insert_one({"email": "x@y"})
        info = next(db.list_collections(filter={"name": "img"}))
        self.assertEqual(info["options"]["changeStreamPreAndPostImages"], {"enabled": True})

        # The same events, byte for byte the same tokens, replayed from the journal.
        with db.watch(start_at_operation_time=start, max_await_time_ms=100) as cs:
            after = [next_event(cs) for _ in range(len(before))]
        self.assertEqual(after, before)
        with db.watch(resume_after=before[10]["_id"], max_await_time_ms=100) as cs:
            self.assertEqual(next_event(cs), before[11])
        # New events sort after everything issued before the crash.
        with db.watch(max_await_time_ms=100) as cs:
            db.a.insert_one({"_id": "new"})
            ev = next_event(cs)
        self.assertGreater(ev["_id"]["_data"], before[-1]["_id"]["_data"])
        self.assertGreater(ev["clusterTime"], before[-1]["clusterTime"])
        c.close()
        self.assertEqual(s.stop(), 0)

        # A clean stop followed by a restart works the same way.
        s = StandIn(["--data-dir", self.dir])
        s.start()
        c = pymongo.MongoClient(s.uri)
        self.assertEqual(c.dur.a.count_documents({}), 50)
        c.close()
        s.stop()

    def test_torn_journal_tail_is_ignored(self):
        s = StandIn(["--data-dir", self.dir])
        s.start()
        c = pymongo.MongoClient(s.uri)
        c.t.c.insert_many([{"_id": i} for i in range(10)])
        c.close()
        s.kill9()
        with open(os.path.join(self.dir, "journal.bson"), "ab") as f:
            f.write(b"\x50\x00\x00\x00\x02o\x00partial")
        s = StandIn(["--data-dir", self.dir])
        s.start()
        c = pymongo.MongoClient(s.uri)
        self.assertEqual(c.t.c.count_documents({}), 10)
        c.t.c.insert_one({"_id": 10})
        c.close()
        s.kill9()
        s.start()
        c = pymongo.MongoClient(s.uri)
        self.assertEqual(c.t.c.count_documents({}), 11)
        c.close()
        s.stop()

    def test_history_lost_survives_restart(self):
        s = StandIn(["--data-dir", self.dir, "--oplog-max-entries", "3"])
        s.start()
        c = pymongo.MongoClient(s.uri)
        with c.h.c.watch(max_await_time_ms=100) as cs:
            c.h.c.insert_one({"_id": 0})
            first = next_event(cs)
        c.h.c.insert_many([{"_id": i} for i in range(1, 6)])
        c.close()
        s.kill9()
        s.start()
        c = pymongo.MongoClient(s.uri)
        with self.assertRaises(OperationFailure) as cm:
            c.h.c.watch(resume_after=first["_id"])
        self.assertEqual(cm.exception.code, 286)
        c.close()
        s.stop()

    def test_data_dir_in_use_is_refused(self):
        s = StandIn(["--data-dir", self.dir])
        s.start()
        r = subprocess.run([PYTHON, SCRIPT, "--port", "0", "--data-dir", self.dir],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("in use", r.stderr)
        s.stop()


class CompactionTest(unittest.TestCase):
    """The journal rewrite (normally only past 1 GiB) must rebuild the exact same state."""

    def test_snapshot_replay_rebuilds_identical_state(self):
        from fwstandin.journal import Journal
        from fwstandin.storage import Store
        d = tempfile.mkdtemp(prefix="standin-compact-")
        try:
            j = Journal(d)
            j.open_for_append()
            st = Store(4, j)
            with st.lock:
                c = st.get_or_create("db", "c")
                for i in range(6):
                    st.insert(c, {"_id": i, "v": i})
                st.set_pre_post(c, True)
                st.update(c, c.docs[5], {"_id": 5, "v": 50}, {"updatedFields": {"v": 50}})
                st.create_index(c, {"v": 2, "key": {"v": 1}, "name": "v_1", "unique": True})
                st.commit()
                j.rewrite(st.snapshot_records())
                st.delete(c, c.docs[0])
                st.commit()
            j.close()
            j2 = Journal(d)
            st2 = Store(4, j2)
            for rec in j2.load():
                st2.apply_record(rec)
            j2.close()
            self.assertEqual([e.raw for e in st2.oplog.iter_live()],
                             [e.raw for e in st.oplog.iter_live()])
            self.assertEqual(st2.oplog.last_dropped_tsv, st.oplog.last_dropped_tsv)
            c2 = st2.coll("db", "c")
            self.assertEqual(c2.docs, st.coll("db", "c").docs)
            self.assertTrue(c2.pre_post)
            self.assertEqual(set(c2.indexes), {"_id_", "v_1"})
            self.assertEqual([e.pre for e in st2.oplog.iter_live()],
                             [e.pre for e in st.oplog.iter_live()])
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
