"""Stand-in conformance: multi-document transactions (issue 39), checked with pymongo's
sessions as the independent client, against what MongoDB documents and its server does
(transaction_participant.cpp for the txnNumber rules and codes, error_labels.cpp for the
TransientTransactionError label, document_source_change_stream_unwind_transaction.cpp for the
change events of a transaction, kill_sessions_command.cpp for killSessions; manual "Transactions", "In-progress Transactions and Write
Conflicts", transactionLifetimeLimitSeconds)."""

import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import pymongo
from bson.binary import Binary
from bson.int64 import Int64
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn, next_event, wait_until  # noqa: E402

LIFETIME_S = 2      # the stand-in's transactionLifetimeLimitSeconds in this module
S = None
CLIENT = None
LOG = None


def setUpModule():
    global S, CLIENT, LOG
    LOG = tempfile.NamedTemporaryFile(prefix="fw-txn-log-", suffix=".jsonl", delete=False).name
    S = StandIn(["--transaction-lifetime-limit-seconds", str(LIFETIME_S), "--log", LOG])
    S.start()
    CLIENT = pymongo.MongoClient(S.uri)


def tearDownModule():
    CLIENT.close()
    assert S.stop() == 0
    os.unlink(LOG)


def fresh(name):
    coll = CLIENT.txn[name]
    coll.drop()
    return coll


def raw(session, cmd, db="txn"):
    """One command with the session's lsid and exactly the transaction fields given (the
    session comes from `own_session`: a client of its own, so that the numbers used here never
    meet the sessions pymongo pools for the other tests)."""
    return session.client[db].command(cmd, session=session)


def own_session(test):
    client = pymongo.MongoClient(S.uri)
    test.addCleanup(client.close)
    return client.start_session()


def lsid_bytes(lsid):
    ident = lsid["id"]
    return ident.bytes if hasattr(ident, "bytes") else bytes(ident)


def failure(fn):
    try:
        fn()
    except OperationFailure as e:
        return e
    raise AssertionError("no error")


class Visibility(unittest.TestCase):
    def test_reader_never_sees_part_of_a_50_insert_transaction(self):
        coll = fresh("atomic")
        seen = []
        done = threading.Event()
        reader = pymongo.MongoClient(S.uri)

        def poll():
            while not done.is_set():
                seen.append(reader.txn.atomic.count_documents({}))
            seen.append(reader.txn.atomic.count_documents({}))

        t = threading.Thread(target=poll)
        t.start()
        with CLIENT.start_session() as ses:
            def body(s):
                for i in range(50):
                    coll.insert_one({"_id": i}, session=s)
            ses.with_transaction(body)
        done.set()
        t.join(30)
        reader.close()
        self.assertEqual(seen[-1], 50)
        self.assertEqual(set(seen) - {0, 50}, set(), "a reader saw part of the transaction")

    def test_snapshot_and_own_writes(self):
        coll = fresh("snap")
        coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
        with CLIENT.start_session() as ses, ses.start_transaction():
            self.assertEqual(coll.find_one({"_id": 1}, session=ses)["v"], 1)
            coll.update_one({"_id": 1}, {"$set": {"v": 10}}, session=ses)
            coll.insert_one({"_id": 3, "v": 3}, session=ses)
            # Others change a document the transaction did not write: it keeps its snapshot.
            coll.update_one({"_id": 2}, {"$set": {"v": 20}})
            coll.insert_one({"_id": 4, "v": 4})
            self.assertEqual(sorted((d["_id"], d["v"]) for d in coll.find({}, session=ses)),
                             [(1, 10), (2, 2), (3, 3)])
            self.assertEqual(coll.distinct("v", session=ses), [10, 2, 3])
            self.assertEqual(list(coll.aggregate([{"$match": {"_id": {"$gte": 2}}},
                                                  {"$sort": {"_id": 1}}], session=ses)),
                             [{"_id": 2, "v": 2}, {"_id": 3, "v": 3}])
            # ... and nobody sees its writes before it commits.
            self.assertEqual(coll.find_one({"_id": 1})["v"], 1)
            self.assertIsNone(coll.find_one({"_id": 3}))
            # A document changed since the snapshot cannot be written: 112.
            e = failure(lambda: coll.update_one({"_id": 2}, {"$inc": {"v": 1}}, session=ses))
            self.assertEqual(e.code, 112)
            self.assertIn("TransientTransactionError", e.details.get("errorLabels", []))
            ses.abort_transaction()
        self.assertEqual(coll.find_one({"_id": 1})["v"], 1)

    def test_sorted_on_id_inside_a_transaction(self):
        # A find sorted on _id (served outside transactions by the stand-in's _id index) sees
        # the transaction's snapshot and own writes, as any other read in it does.
        coll = fresh("snap_sorted")
        coll.insert_many([{"_id": i} for i in range(1, 6)])
        with CLIENT.start_session() as ses, ses.start_transaction():
            coll.delete_one({"_id": 2}, session=ses)
            coll.insert_one({"_id": 7}, session=ses)
            coll.insert_one({"_id": 6})  # after the snapshot: not seen
            ids = lambda q, d: [x["_id"] for x in coll.find(q, session=ses).sort("_id", d)]
            self.assertEqual(ids({}, 1), [1, 3, 4, 5, 7])
            self.assertEqual(ids({"_id": {"$gt": 3}}, -1), [7, 5, 4])
            self.assertEqual([x["_id"] for x in coll.find({}, session=ses).sort("_id", 1)
                              .limit(2)], [1, 3])
            ses.abort_transaction()

    def test_operations_inside_a_transaction(self):
        coll = fresh("ops")
        coll.insert_many([{"_id": i, "n": i} for i in range(5)])
        with CLIENT.start_session() as ses:
            with ses.start_transaction():
                coll.update_one({"_id": 9}, {"$set": {"n": 9}}, upsert=True, session=ses)
                coll.delete_one({"_id": 0}, session=ses)
                coll.update_many({"n": {"$lt": 3}}, {"$inc": {"n": 100}}, session=ses)
                got = coll.find_one_and_update({"_id": 4}, {"$set": {"n": 40}},
                                               return_document=True, session=ses)
                self.assertEqual(got, {"_id": 4, "n": 40})
                coll.bulk_write([pymongo.InsertOne({"_id": 10}),
                                 pymongo.DeleteOne({"_id": 3})], session=ses)
                cur = coll.find({}, batch_size=2, session=ses)     # getMore in the txn
                self.assertEqual(sorted(d["_id"] for d in cur), [1, 2, 4, 9, 10])
                e = failure(lambda: CLIENT.txn.command("count", "ops", session=ses))
                self.assertEqual(e.code, 263)
                ses.abort_transaction()
        self.assertEqual(sorted(d["_id"] for d in coll.find()), [0, 1, 2, 3, 4])
        with CLIENT.start_session() as ses:
            with ses.start_transaction():
                coll.update_one({"_id": 9}, {"$set": {"n": 9}}, upsert=True, session=ses)
                coll.delete_one({"_id": 0}, session=ses)
        self.assertEqual(sorted(d["_id"] for d in coll.find()), [1, 2, 3, 4, 9])


class Outcomes(unittest.TestCase):
    def test_abort_discards(self):
        coll = fresh("abort")
        with CLIENT.start_session() as ses:
            ses.start_transaction()
            coll.insert_one({"_id": 1}, session=ses)
            ses.abort_transaction()
        self.assertIsNone(coll.find_one({"_id": 1}))

    def test_write_conflict_between_transactions(self):
        coll = fresh("conflict")
        coll.insert_one({"_id": 1, "v": 0})
        s1, s2 = CLIENT.start_session(), CLIENT.start_session()
        s1.start_transaction()
        s2.start_transaction()
        coll.update_one({"_id": 1}, {"$inc": {"v": 1}}, session=s1)
        e = failure(lambda: coll.update_one({"_id": 1}, {"$inc": {"v": 5}}, session=s2))
        self.assertEqual((e.code, e.details["codeName"]), (112, "WriteConflict"))
        self.assertIn("TransientTransactionError", e.details["errorLabels"])
        s1.commit_transaction()
        # The conflict aborted s2: its commit finds no transaction (251, transient).
        e = failure(s2.commit_transaction)
        self.assertEqual(e.code, 251)
        self.assertIn("TransientTransactionError", e.details["errorLabels"])
        self.assertEqual(coll.find_one({"_id": 1})["v"], 1)
        s1.end_session()
        s2.end_session()

    def test_write_outside_waits_for_the_transaction(self):
        coll = fresh("waits")
        coll.insert_one({"_id": 1, "v": 0})
        with CLIENT.start_session() as ses:
            ses.start_transaction()
            coll.update_one({"_id": 1}, {"$set": {"v": 10}}, session=ses)
            with open(LOG) as f:
                before = len(f.readlines())
            outside = threading.Thread(
                target=lambda: coll.update_one({"_id": 1}, {"$inc": {"v": 1}}))
            outside.start()

            def arrived():
                with open(LOG) as f:
                    lines = f.readlines()[before:]
                return any('"cmd": "update"' in line for line in lines)
            wait_until(arrived, message="the outside update reached the stand-in")
            ses.commit_transaction()
            outside.join(30)
        # Had the outside $inc not waited, the commit would have overwritten it (10).
        self.assertEqual(coll.find_one({"_id": 1})["v"], 11)

    def test_commit_retried_after_success_answers_ok(self):
        coll = fresh("retry")
        with CLIENT.start_session() as ses:
            ses.start_transaction()
            coll.insert_one({"_id": 1}, session=ses)
            ses.commit_transaction()
            ses.commit_transaction()     # pymongo re-sends commitTransaction
            n = ses._server_session.transaction_id
            reply = CLIENT.admin.command({"commitTransaction": 1, "txnNumber": Int64(n),
                              "autocommit": False}, session=ses)
            self.assertEqual(reply["ok"], 1.0)
            e = failure(lambda: CLIENT.admin.command({"abortTransaction": 1,
                                                      "txnNumber": Int64(n),
                                                      "autocommit": False}, session=ses))
            self.assertEqual((e.code, e.details["codeName"]), (256, "TransactionCommitted"))
        self.assertEqual(coll.count_documents({}), 1)

    def test_txn_number_rules_and_refusals(self):
        fresh("rules")
        ses = own_session(self)
        start = {"insert": "rules", "documents": [{"_id": 1}], "txnNumber": Int64(5),
                 "startTransaction": True, "autocommit": False}
        # continuing a transaction never started: 251, transient
        e = failure(lambda: raw(ses, {"find": "rules", "txnNumber": Int64(4),
                                      "autocommit": False}))
        self.assertEqual(e.code, 251)
        self.assertIn("TransientTransactionError", e.details["errorLabels"])
        raw(ses, start)
        e = failure(lambda: raw(ses, dict(start, documents=[{"_id": 2}])))
        self.assertEqual(e.code, 117)       # startTransaction at the active number
        e = failure(lambda: raw(ses, {"insert": "rules", "documents": [{"_id": 3}],
                                      "txnNumber": Int64(5), "autocommit": False,
                                      "writeConcern": {"w": 1}}))
        self.assertEqual(e.code, 72)
        raw(ses, dict(start, txnNumber=Int64(6)))
        e = failure(lambda: raw(ses, {"find": "rules", "txnNumber": Int64(6),
                                      "autocommit": False, "readConcern": {"level": "local"}}))
        self.assertEqual(e.code, 72)       # readConcern only on the first statement
        # A failed statement aborts the transaction: its statements now get 251.
        reply = raw(ses, {"insert": "rules", "documents": [{"_id": 1}], "txnNumber": Int64(6),
                          "autocommit": False})
        self.assertEqual(reply["writeErrors"][0]["code"], 11000)
        e = failure(lambda: raw(ses, {"find": "rules", "txnNumber": Int64(6),
                                      "autocommit": False}))
        self.assertEqual(e.code, 251)
        e = failure(lambda: raw(ses, dict(start, txnNumber=Int64(5))))
        self.assertEqual(e.code, 225)      # an older txnNumber
        e = failure(lambda: raw(ses, {"insert": "rules", "documents": [{"_id": 4}],
                                      "txnNumber": Int64(6)}))
        self.assertEqual(e.code, 217)      # a retryable write at a transaction's number
        raw(ses, {"insert": "rules", "documents": [{"_id": 5}], "txnNumber": Int64(7)})
        e = failure(lambda: raw(ses, dict(start, txnNumber=Int64(7))))
        self.assertEqual(e.code, 117)      # a transaction at a retryable write's number
        e = failure(lambda: raw(ses, dict(start, insert="system.views", txnNumber=Int64(8))))
        self.assertEqual(e.code, 50791)
        e = failure(lambda: raw(ses, dict(start, txnNumber=Int64(9)), db="config"))
        self.assertEqual(e.code, 263)
        e = failure(lambda: raw(ses, {"aggregate": "rules", "cursor": {},
                                      "pipeline": [{"$changeStream": {}}],
                                      "txnNumber": Int64(10), "startTransaction": True,
                                      "autocommit": False}))
        self.assertEqual(e.code, 263)
        ses.end_session()
        self.assertEqual(sorted(d["_id"] for d in CLIENT.txn.rules.find()), [5])

    def test_new_txn_number_aborts_the_open_transaction(self):
        coll = fresh("renumber")
        ses = own_session(self)
        raw(ses, {"insert": "renumber", "documents": [{"_id": 1}], "txnNumber": Int64(1),
                  "startTransaction": True, "autocommit": False})
        raw(ses, {"insert": "renumber", "documents": [{"_id": 2}], "txnNumber": Int64(2)})
        e = failure(lambda: raw(ses, {"commitTransaction": 1, "txnNumber": Int64(1),
                                      "autocommit": False}, db="admin"))
        self.assertEqual(e.code, 225)
        self.assertEqual([d["_id"] for d in coll.find()], [2])
        ses.end_session()


class Lifetime(unittest.TestCase):
    def _expired(self, ses, n):
        try:
            raw(ses, {"find": "life", "txnNumber": Int64(n), "autocommit": False})
            return False
        except OperationFailure as e:
            self.assertEqual(e.code, 251)
            return True

    def test_transaction_expires_after_the_lifetime_limit(self):
        coll = fresh("life")
        ses = own_session(self)
        started = time.monotonic()
        raw(ses, {"insert": "life", "documents": [{"_id": 1}], "txnNumber": Int64(1),
                  "startTransaction": True, "autocommit": False})
        wait_until(lambda: self._expired(ses, 1), timeout=LIFETIME_S + 20, interval=0.1,
                   message="the transaction expired")
        self.assertGreaterEqual(time.monotonic() - started, LIFETIME_S - 0.5)
        self.assertIsNone(coll.find_one({"_id": 1}))
        ses.end_session()

    def test_killed_client_transaction_never_applied(self):
        coll = fresh("killed")
        coll.insert_one({"_id": 1, "v": 0})
        script = (
            "import os, pymongo\n"
            "c = pymongo.MongoClient(%r)\n"
            "s = c.start_session(); s.start_transaction()\n"
            "c.txn.killed.update_one({'_id': 1}, {'$set': {'v': 99}}, session=s)\n"
            "c.txn.killed.insert_one({'_id': 2}, session=s)\n"
            "print('written', flush=True)\n"
            "os.kill(os.getpid(), 9)\n" % S.uri)
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.stdout.strip(), "written")
        self.assertEqual(proc.returncode, -9)
        self.assertEqual(list(coll.find()), [{"_id": 1, "v": 0}])
        # The document it wrote is free again once its transaction expires: this write waits
        # for that, then applies.
        coll.update_one({"_id": 1}, {"$inc": {"v": 1}})
        self.assertEqual(list(coll.find()), [{"_id": 1, "v": 1}])


    def test_get_parameter_reports_the_lifetime_limit(self):
        # server_parameters_commands.cpp, CmdGet: admin only; a named parameter it does not
        # have: "no option found to get".
        self.assertEqual(CLIENT.admin.command({"getParameter": 1,
                                               "transactionLifetimeLimitSeconds": 1})
                         ["transactionLifetimeLimitSeconds"], LIFETIME_S)
        self.assertIn("transactionLifetimeLimitSeconds",
                      CLIENT.admin.command({"getParameter": "*"}))
        e = failure(lambda: CLIENT.admin.command({"getParameter": 1, "noSuchParameter": 1}))
        self.assertEqual(e.details["errmsg"], "no option found to get")
        e = failure(lambda: CLIENT.txn.command({"getParameter": 1,
                                                "transactionLifetimeLimitSeconds": 1}))
        self.assertEqual(e.code, 13)


class KillSessions(unittest.TestCase):
    """killSessions (manual "killSessions"; server kill_sessions_command.cpp: not admin-only,
    any user may kill its own sessions, the reply is {ok: 1}): the killed sessions' open
    transactions are aborted at once, well before the lifetime limit."""

    def _reply_is_ok(self, reply):
        self.assertEqual(reply["ok"], 1.0)
        self.assertEqual(set(reply) - {"ok", "$clusterTime", "operationTime"}, set())

    def test_kill_aborts_the_open_transaction_and_frees_its_documents(self):
        coll = fresh("kill")
        coll.insert_one({"_id": 1, "v": 0})
        ses = own_session(self)
        raw(ses, {"update": "kill", "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 99}}}],
                  "txnNumber": Int64(1), "startTransaction": True, "autocommit": False})
        other = own_session(self)
        e = failure(lambda: raw(other, {
            "update": "kill", "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 5}}}],
            "txnNumber": Int64(1), "startTransaction": True, "autocommit": False}))
        self.assertEqual(e.code, 112)  # WriteConflict (which aborts that transaction)
        started = time.monotonic()
        self._reply_is_ok(CLIENT.admin.command({"killSessions": [{"id": ses.session_id["id"]}]}))
        # At once: another transaction writes the document, the killed one is gone.
        raw(other, {"update": "kill", "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 5}}}],
                    "txnNumber": Int64(2), "startTransaction": True, "autocommit": False})
        raw(other, {"commitTransaction": 1, "txnNumber": Int64(2), "autocommit": False},
            db="admin")
        self.assertLess(time.monotonic() - started, LIFETIME_S)
        e = failure(lambda: raw(ses, {"commitTransaction": 1, "txnNumber": Int64(1),
                                      "autocommit": False}, db="admin"))
        self.assertEqual(e.code, 251)  # NoSuchTransaction: it was aborted
        self.assertEqual(list(coll.find()), [{"_id": 1, "v": 5}])

    def test_unknown_session_is_no_error_and_any_database_takes_it(self):
        self._reply_is_ok(CLIENT.txn.command({"killSessions": [{"id": Binary(os.urandom(16), 4)}]}))

    def test_bad_arguments(self):
        self.assertEqual(failure(lambda: CLIENT.admin.command({"killSessions": "x"})).code, 14)
        self.assertEqual(failure(lambda: CLIENT.admin.command({"killSessions": [{}]})).code,
                         40414)


class ChangeEvents(unittest.TestCase):
    def test_events_of_a_transaction(self):
        coll = fresh("events")
        coll.insert_one({"_id": 0})
        with coll.watch() as cs:
            coll.insert_one({"_id": "before"})
            with CLIENT.start_session() as ses:
                with ses.start_transaction():
                    coll.insert_one({"_id": 1}, session=ses)
                    coll.insert_one({"_id": 2}, session=ses)
                    coll.insert_one({"_id": "outside"})     # commits first
                    coll.update_one({"_id": 0}, {"$set": {"x": 1}}, session=ses)
                    coll.delete_one({"_id": 2}, session=ses)
                lsid, number = ses.session_id, ses._server_session.transaction_id
            coll.insert_one({"_id": "after"})
            events = [next_event(cs) for _ in range(7)]
        keys = [(e["operationType"], e["documentKey"]["_id"]) for e in events]
        self.assertEqual(keys, [("insert", "before"), ("insert", "outside"), ("insert", 1),
                                ("insert", 2), ("update", 0), ("delete", 2),
                                ("insert", "after")])
        txn_events = events[2:6]
        self.assertEqual(len({e["clusterTime"] for e in txn_events}), 1)
        for e in txn_events:
            self.assertEqual(lsid_bytes(e["lsid"]), lsid_bytes(lsid))
            self.assertEqual(e["txnNumber"], number)
            # a long, as the change-event schema has it (and flowwarden's parser checks)
            self.assertIsInstance(e["txnNumber"], Int64)
        for e in (events[0], events[1], events[6]):
            self.assertNotIn("lsid", e)
            self.assertNotIn("txnNumber", e)
        tokens = [e["_id"]["_data"] for e in events]
        self.assertEqual(tokens, sorted(tokens))
        self.assertLess(events[1]["clusterTime"], txn_events[0]["clusterTime"])
        self.assertLess(txn_events[0]["clusterTime"], events[6]["clusterTime"])
        # Resuming in the middle of the transaction's events goes on with the next one.
        with coll.watch(resume_after=events[3]["_id"]) as cs:
            got = [next_event(cs) for _ in range(3)]
        self.assertEqual([e["_id"] for e in got], [e["_id"] for e in events[4:7]])
        with coll.watch(start_after=events[2]["_id"]) as cs:
            self.assertEqual(next_event(cs)["_id"], events[3]["_id"])


class Persistence(unittest.TestCase):
    def test_committed_survives_kill9_uncommitted_never_applied(self):
        with tempfile.TemporaryDirectory(prefix="fw-txn-data-") as data:
            with StandIn(["--data-dir", data]) as s:
                c = pymongo.MongoClient(s.uri)
                coll = c.txn.persist
                with c.start_session() as ses, ses.start_transaction():
                    coll.insert_many([{"_id": i} for i in range(10)], session=ses)
                ses = c.start_session()
                ses.start_transaction()
                coll.insert_one({"_id": "uncommitted"}, session=ses)
                coll.delete_one({"_id": 0}, session=ses)
                s.kill9()
                c.close()
            with StandIn(["--data-dir", data]) as s:
                c = pymongo.MongoClient(s.uri)
                coll = c.txn.persist
                self.assertEqual(sorted(d["_id"] for d in coll.find()), list(range(10)))
                with coll.watch(start_at_operation_time=Timestamp(1, 0)) as cs:
                    events = [next_event(cs) for _ in range(10)]
                self.assertEqual(len({e["clusterTime"] for e in events}), 1)
                self.assertTrue(all("lsid" in e and "txnNumber" in e for e in events))
                tokens = [e["_id"]["_data"] for e in events]
                self.assertEqual(len(set(tokens)), 10)
                self.assertEqual(tokens, sorted(tokens))
                c.close()


class Standalone(unittest.TestCase):
    def test_standalone_refuses_transactions(self):
        with StandIn(["--standalone"]) as s:
            c = pymongo.MongoClient("mongodb://%s/?directConnection=true" % s.host)
            with c.start_session() as ses:
                ses.start_transaction()
                e = failure(lambda: c.txn.x.insert_one({"_id": 1}, session=ses))
                self.assertEqual((e.code, e.details["codeName"]), (20, "IllegalOperation"))
            self.assertIsNone(c.txn.x.find_one())
            c.close()


if __name__ == "__main__":
    unittest.main()
