"""Stand-in conformance: wire protocol, handshake, generic reply fields, process options."""

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import bson
import pymongo
from bson.codec_options import CodecOptions
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import PYTHON, SCRIPT, StandIn, wait_until  # noqa: E402
from fwstandin.wire import crc32c  # noqa: E402

S = None


def setUpModule():
    global S, LOG
    LOG = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
    S = StandIn(["--log", LOG])
    S.start()


def tearDownModule():
    assert S.stop() == 0
    os.unlink(LOG)


class RawConnection:
    """A bare socket speaking OP_MSG / OP_QUERY, to test what drivers never send."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.request_id = 0

    def close(self):
        self.sock.close()

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        return buf

    def read_reply(self):
        header = self._recv_exact(16)
        length, _rid, response_to, opcode = struct.unpack("<iiii", header)
        payload = self._recv_exact(length - 16)
        return response_to, opcode, header, payload

    def send_msg(self, doc, flags=0, checksum=False, sequences=()):
        self.request_id += 1
        body = struct.pack("<I", flags | (1 if checksum else 0)) + b"\x00" + bson.encode(doc)
        for ident, docs in sequences:
            raw = b"".join(bson.encode(d) for d in docs)
            ident_b = ident.encode() + b"\x00"
            body += b"\x01" + struct.pack("<i", 4 + len(ident_b) + len(raw)) + ident_b + raw
        length = 16 + len(body) + (4 if checksum else 0)
        header = struct.pack("<iiii", length, self.request_id, 0, 2013)
        msg = header + body
        if checksum:
            msg += struct.pack("<I", crc32c(msg))
        self.sock.sendall(msg)

    def command(self, doc, **kw):
        self.send_msg(doc, **kw)
        response_to, opcode, _header, payload = self.read_reply()
        assert response_to == self.request_id
        assert opcode == 2013
        flags = struct.unpack_from("<I", payload)[0]
        assert flags == 0, "replies must not set checksum/moreToCome"
        assert payload[4] == 0
        return bson.decode(payload[5:], CodecOptions())

    def query(self, doc, ns="admin.$cmd"):
        self.request_id += 1
        body = struct.pack("<i", 0) + ns.encode() + b"\x00" + struct.pack("<ii", 0, -1) \
            + bson.encode(doc)
        self.sock.sendall(struct.pack("<iiii", 16 + len(body), self.request_id, 0, 2004) + body)
        response_to, opcode, _h, payload = self.read_reply()
        assert response_to == self.request_id
        assert opcode == 1, "OP_QUERY must be answered with OP_REPLY"
        _flags, cursor_id, _start, n = struct.unpack_from("<iqii", payload)
        assert cursor_id == 0 and n == 1
        return bson.decode(payload[20:])


class HandshakeTest(unittest.TestCase):
    def setUp(self):
        self.conn = RawConnection(S.port)

    def tearDown(self):
        self.conn.close()

    def test_op_query_is_master_handshake_has_everything_drivers_need(self):
        r = self.conn.query({"isMaster": 1, "helloOk": True,
                             "client": {"application": {"name": "t"}}})
        me = "127.0.0.1:%d" % S.port
        self.assertEqual(r["ok"], 1.0)
        self.assertIs(r["ismaster"], True)
        self.assertIs(r["secondary"], False)
        self.assertIs(r["helloOk"], True)
        self.assertEqual(r["setName"], "rs0")
        self.assertEqual(r["hosts"], [me])
        self.assertEqual(r["primary"], me)
        self.assertEqual(r["me"], me)
        self.assertEqual((r["minWireVersion"], r["maxWireVersion"]), (0, 17))
        self.assertEqual(r["logicalSessionTimeoutMinutes"], 30)
        self.assertEqual(r["maxBsonObjectSize"], 16 * 1024 * 1024)
        self.assertEqual(r["maxMessageSizeBytes"], 48000000)
        self.assertEqual(r["maxWriteBatchSize"], 100000)
        self.assertIn("processId", r["topologyVersion"])
        self.assertIsInstance(r["operationTime"], Timestamp)
        self.assertEqual(r["$clusterTime"]["signature"],
                         {"hash": b"\x00" * 20, "keyId": 0})

    def test_hello_uses_is_writable_primary(self):
        r = self.conn.command({"hello": 1, "$db": "admin"})
        self.assertIs(r["isWritablePrimary"], True)
        self.assertNotIn("ismaster", r)

    def test_awaitable_hello_blocks_for_max_await_time(self):
        tv = self.conn.command({"hello": 1, "$db": "admin"})["topologyVersion"]
        start = time.monotonic()
        r = self.conn.command({"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 400,
                               "$db": "admin"}, flags=1 << 16)
        self.assertGreaterEqual(time.monotonic() - start, 0.39)
        self.assertEqual(r["topologyVersion"], tv)

    def test_op_query_other_than_hello_is_rejected_like_6_0(self):
        r = self.conn.query({"ping": 1})
        self.assertEqual((r["ok"], r["code"], r["codeName"]),
                         (0.0, 352, "UnsupportedOpQueryCommand"))

    def test_checksummed_op_msg_is_verified(self):
        r = self.conn.command({"ping": 1, "$db": "admin"}, checksum=True)
        self.assertEqual(r["ok"], 1.0)
        # A corrupted checksum is rejected.
        self.conn.request_id += 1
        body = struct.pack("<I", 1) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
        header = struct.pack("<iiii", 16 + len(body) + 4, self.conn.request_id, 0, 2013)
        self.conn.sock.sendall(header + body + b"\x00\x00\x00\x00")
        _rt, _op, _h, payload = self.conn.read_reply()
        r = bson.decode(payload[5:])
        self.assertEqual(r["ok"], 0.0)
        self.assertIn("checksum", r["errmsg"])

    def test_kind1_sequences_and_more_to_come(self):
        r = self.conn.command({"insert": "raw", "$db": "wire"},
                              sequences=[("documents", [{"_id": 1}, {"_id": 2}])])
        self.assertEqual(r["n"], 2)
        # moreToCome (w: 0): no reply; the next command still answers in order.
        self.conn.send_msg({"insert": "raw", "$db": "wire", "writeConcern": {"w": 0}},
                           flags=2, sequences=[("documents", [{"_id": 3}])])
        r = self.conn.command({"count": "raw", "$db": "wire"})
        self.assertEqual(r["n"], 3)

    def test_generic_fields_are_accepted(self):
        r = self.conn.command({"ping": 1, "$db": "admin", "lsid": {"id": bson.Binary(b"x" * 16, 4)},
                               "txnNumber": bson.Int64(1), "$clusterTime": {
                                   "clusterTime": Timestamp(1, 1),
                                   "signature": {"hash": b"\x00" * 20, "keyId": 0}},
                               "$readPreference": {"mode": "primary"},
                               "readConcern": {}, "comment": "x", "maxTimeMS": 100})
        self.assertEqual(r["ok"], 1.0)


class CommandsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = pymongo.MongoClient(S.uri)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_unknown_command(self):
        with self.assertRaises(OperationFailure) as cm:
            self.client.admin.command("frobnicate")
        d = cm.exception.details
        self.assertEqual((d["ok"], d["code"], d["codeName"], d["errmsg"]),
                         (0.0, 59, "CommandNotFound", "no such command: 'frobnicate'"))
        self.assertIn("$clusterTime", d)
        self.assertIn("operationTime", d)

    def test_every_reply_has_cluster_and_operation_time(self):
        for cmd in ("ping", "buildInfo", "serverStatus", "hello"):
            r = self.client.admin.command(cmd)
            self.assertIsInstance(r["operationTime"], Timestamp, cmd)
            self.assertEqual(r["$clusterTime"]["signature"]["keyId"], 0, cmd)
            self.assertGreaterEqual(r["$clusterTime"]["clusterTime"], r["operationTime"])

    def test_operation_time_advances_with_writes(self):
        before = self.client.admin.command("ping")["operationTime"]
        self.client.wire.t.insert_one({})
        after = self.client.admin.command("ping")["operationTime"]
        self.assertGreater(after, before)

    def test_build_info_and_server_status(self):
        bi = self.client.admin.command("buildInfo")
        self.assertEqual(bi["versionArray"][:2], [6, 0])
        self.assertEqual(self.client.server_info()["version"], bi["version"])
        ss = self.client.admin.command("serverStatus")
        self.assertEqual(ss["process"], "mongod")
        self.assertEqual(ss["repl"]["setName"], "rs0")
        self.assertGreaterEqual(ss["connections"]["current"], 1)

    def test_end_sessions(self):
        self.assertEqual(self.client.admin.command("endSessions", [])["ok"], 1.0)

    def test_transactions_are_accepted(self):
        # The whole behaviour is in test_conformance_transactions.py.
        with self.client.start_session() as session:
            with session.start_transaction():
                self.client.wire.txn.insert_one({"_id": 1}, session=session)
                self.assertIsNone(self.client.wire.txn.find_one({"_id": 1}))
        self.assertEqual(self.client.wire.txn.find_one({"_id": 1}), {"_id": 1})

    def test_unknown_command_field_is_rejected(self):
        with self.assertRaises(OperationFailure) as cm:
            self.client.wire.command("count", "t", bogus=1)
        self.assertEqual(cm.exception.code, 40415)
        self.assertIn("BSON field 'count.bogus' is an unknown field.", str(cm.exception))

    def test_log_has_one_json_line_per_command_without_documents(self):
        self.client.wire.logged.insert_many([{"secret": "s3cr3t"} for _ in range(3)])
        self.client.wire.logged.find_one({"secret": "s3cr3t"})

        def lines():
            with open(LOG) as f:
                return [json.loads(line) for line in f]
        recs = wait_until(lambda: [r for r in lines() if r["cmd"] == "find"
                                   and r["summary"].get("target") == "logged"],
                          message="the find in the log")
        inserts = [r for r in lines() if r["cmd"] == "insert"
                   and r["summary"].get("target") == "logged"]
        self.assertEqual(inserts[0]["db"], "wire")
        self.assertEqual(inserts[0]["summary"]["documents"], 3)
        self.assertTrue(recs)
        with open(LOG) as f:
            self.assertNotIn("s3cr3t", f.read())

    def test_pooled_client_monitoring_does_not_hot_loop(self):
        # pymongo streams awaitable hellos every heartbeat: they must block server-side.
        c = pymongo.MongoClient(S.uri, heartbeatFrequencyMS=500)
        c.admin.command("ping")

        def hellos():
            with open(LOG) as f:
                return sum(1 for line in f if '"cmd": "hello"' in line
                           or '"cmd": "isMaster"' in line or '"cmd": "ismaster"' in line)
        first = hellos()
        # Two awaitable hellos need >= 1 s; a hot loop would log hundreds meanwhile.
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            c.admin.command("ping")
        self.assertLess(hellos() - first, 20)
        c.close()


class ProcessTest(unittest.TestCase):
    def test_bad_option_exits_2_with_message(self):
        r = subprocess.run([PYTHON, SCRIPT, "--port", "0", "--bogus"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unrecognized arguments: --bogus", r.stderr)
        r = subprocess.run([PYTHON, SCRIPT, "--oplog-max-entries", "0"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--oplog-max-entries", r.stderr)

    def test_sigterm_and_sigint_stop_cleanly_and_replset_option(self):
        s = StandIn(["--replset", "other"])
        s.start()
        c = pymongo.MongoClient(s.uri, serverSelectionTimeoutMS=5000)
        self.assertEqual(c.admin.command("hello")["setName"], "other")
        c.close()
        self.assertEqual(s.stop(), 0)
        s = StandIn()
        s.start()
        s.proc.send_signal(2)
        self.assertEqual(s.proc.wait(15), 0)
        s.proc = None


if __name__ == "__main__":
    unittest.main()
