"""What `flowwarden doctor` reads, answered as MongoDB answers it (fwstandin/cmd_doctor.py):

- connectionStatus {showPrivileges: true}: manual reference/command/connectionStatus; the
  privileges of the built-in roles read, readWrite and root: manual reference/built-in-roles.
- local.oplog.rs sorted by $natural: its first and last entries; a capped oplog's oldest entry
  moves (the stand-in's --oplog-max-entries).
- --clock-offset-ms: hello's localTime (a server's clock that far ahead).
- a standalone mongod: hello without setName; $changeStream refused with 40573
  (src/mongo/db/pipeline/document_source_change_stream.cpp).
"""

import datetime
import os
import sys
import unittest

import pymongo
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import StandIn  # noqa: E402


def uri_of(s, user, password, direct=False):
    return "mongodb://%s:%s@127.0.0.1:%d/?authSource=admin&%s" % (
        user, password, s.port, "directConnection=true" if direct else "replicaSet=rs0")


class Privileges(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.s = StandIn(["--auth", "admin:pw", "--user", "reader:rpw:read@shop",
                         "--user", "writer:wpw:readWrite@shop"])
        cls.s.start()

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def status(self, user, password):
        with pymongo.MongoClient(uri_of(self.s, user, password)) as c:
            return c.admin.command({"connectionStatus": 1, "showPrivileges": True})["authInfo"]

    def test_read_role(self):
        info = self.status("reader", "rpw")
        self.assertEqual(info["authenticatedUsers"], [{"user": "reader", "db": "admin"}])
        self.assertEqual(info["authenticatedUserRoles"], [{"role": "read", "db": "shop"}])
        (priv,) = info["authenticatedUserPrivileges"]
        self.assertEqual(priv["resource"], {"db": "shop", "collection": ""})
        self.assertIn("changeStream", priv["actions"])
        self.assertIn("find", priv["actions"])
        self.assertNotIn("insert", priv["actions"])

    def test_read_write_role(self):
        (priv,) = self.status("writer", "wpw")["authenticatedUserPrivileges"]
        for action in ("find", "insert", "update", "remove", "createIndex", "changeStream"):
            self.assertIn(action, priv["actions"])

    def test_root_reads_every_database_and_the_oplog(self):
        privs = self.status("admin", "pw")["authenticatedUserPrivileges"]
        self.assertIn({"db": "", "collection": ""}, [p["resource"] for p in privs])
        with pymongo.MongoClient(uri_of(self.s, "admin", "pw")) as c:
            c.shop.x.insert_one({})
            self.assertEqual(len(list(c.local["oplog.rs"].find().sort("$natural", 1).limit(1))), 1)

    def test_read_role_cannot_read_the_oplog(self):
        with pymongo.MongoClient(uri_of(self.s, "reader", "rpw")) as c:
            with self.assertRaises(OperationFailure) as e:
                list(c.local["oplog.rs"].find().limit(1))
            self.assertEqual(e.exception.code, 13)

    def test_connection_status_needs_no_authentication(self):
        # src/mongo/db/commands/connection_status.cpp: requiresAuth() returns false.
        with pymongo.MongoClient("mongodb://127.0.0.1:%d/?replicaSet=rs0" % self.s.port) as c:
            info = c.admin.command({"connectionStatus": 1, "showPrivileges": True})["authInfo"]
            self.assertEqual(info["authenticatedUsers"], [])
            self.assertEqual(info["authenticatedUserPrivileges"], [])
            with self.assertRaises(OperationFailure) as e:
                c.shop.command("listCollections")
            self.assertEqual(e.exception.code, 13)

    def test_without_showprivileges_no_privileges(self):
        with pymongo.MongoClient(uri_of(self.s, "reader", "rpw")) as c:
            info = c.admin.command({"connectionStatus": 1})["authInfo"]
        self.assertNotIn("authenticatedUserPrivileges", info)


class OplogEnds(unittest.TestCase):

    def test_the_oldest_entry_moves(self):
        with StandIn(["--oplog-max-entries", "3"]) as s:
            with pymongo.MongoClient(s.uri) as c:
                c.shop.x.insert_many([{"_id": i} for i in range(10)])
                first = list(c.local["oplog.rs"].find({}, {"ts": 1}).sort("$natural", 1).limit(1))
                last = list(c.local["oplog.rs"].find({}, {"ts": 1}).sort("$natural", -1).limit(1))
                self.assertEqual(len(list(c.local["oplog.rs"].find())), 3)
                self.assertLess(first[0]["ts"], last[0]["ts"])
                c.shop.x.insert_one({"_id": 99})
                moved = list(c.local["oplog.rs"].find().sort("$natural", 1).limit(1))
                self.assertGreater(moved[0]["ts"], first[0]["ts"])


class ClockOffset(unittest.TestCase):

    def test_local_time_runs_ahead(self):
        with StandIn(["--clock-offset-ms", "60000"]) as s:
            with pymongo.MongoClient(s.uri) as c:
                now = datetime.datetime.utcnow()
                local = c.admin.command("hello")["localTime"]
                self.assertGreater((local - now).total_seconds(), 55)
                self.assertLess((local - now).total_seconds(), 65)


class Standalone(unittest.TestCase):

    def test_hello_without_set_name_and_change_streams_refused(self):
        with StandIn(["--standalone"]) as s:
            with pymongo.MongoClient("mongodb://127.0.0.1:%d/?directConnection=true"
                                     % s.port) as c:
                hello = c.admin.command("hello")
                self.assertNotIn("setName", hello)
                with self.assertRaises(OperationFailure) as e:
                    c.shop.x.watch().try_next()
                self.assertEqual(e.exception.code, 40573)
                self.assertIn("only supported on replica sets", str(e.exception))


if __name__ == "__main__":
    unittest.main()
