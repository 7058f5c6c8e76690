"""Stand-in --latency-ms (issue 16): every reply is late by the given round-trip time, per
connection, and pipelined requests are answered in their order."""

import os
import subprocess
import sys
import time
import unittest

import bson
import pymongo
from bson.codec_options import CodecOptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin_process import PYTHON, SCRIPT, StandIn  # noqa: E402
from test_conformance_wire import RawConnection  # noqa: E402

LATENCY_MS = 50
S = None


def setUpModule():
    global S
    S = StandIn(["--latency-ms", str(LATENCY_MS)])
    S.start()


def tearDownModule():
    assert S.stop() == 0


class LatencyTest(unittest.TestCase):

    def test_every_pymongo_round_trip_takes_at_least_the_latency(self):
        client = pymongo.MongoClient(S.uri, serverSelectionTimeoutMS=10000)
        try:
            client.admin.command("ping")  # connected, handshake done
            coll = client.lat.rt
            trips = {}
            t0 = time.monotonic()
            client.admin.command("ping")
            trips["ping"] = time.monotonic() - t0
            t0 = time.monotonic()
            coll.insert_one({"_id": 1, "v": "x"})
            trips["insert"] = time.monotonic() - t0
            t0 = time.monotonic()
            self.assertEqual(coll.find_one({"_id": 1}), {"_id": 1, "v": "x"})
            trips["find"] = time.monotonic() - t0
            for name, seconds in trips.items():
                # A lower bound: a reply cannot leave before its time.
                self.assertGreaterEqual(seconds * 1000, LATENCY_MS, name)
            print("\nround trips at --latency-ms %d: %s" % (LATENCY_MS, ", ".join(
                "%s %.1f ms" % (k, v * 1000) for k, v in trips.items())))
        finally:
            client.close()

    def test_pipelined_requests_are_answered_late_and_in_their_order(self):
        conn = RawConnection(S.port)
        try:
            conn.command({"hello": 1, "$db": "admin"})
            t0 = time.monotonic()
            # Sent back to back before any reply: an insert, a find that must see it, a ping.
            conn.send_msg({"insert": "pipe", "documents": [{"_id": 7}], "$db": "lat"})
            conn.send_msg({"find": "pipe", "filter": {"_id": 7}, "$db": "lat"})
            conn.send_msg({"ping": 1, "$db": "admin"})
            first = conn.request_id - 2
            replies = []
            for _ in range(3):
                response_to, opcode, _h, payload = conn.read_reply()
                self.assertEqual(opcode, 2013)
                replies.append((response_to, bson.decode(payload[5:], CodecOptions())))
            elapsed_ms = (time.monotonic() - t0) * 1000
            self.assertEqual([r[0] for r in replies], [first, first + 1, first + 2])
            self.assertEqual(replies[0][1]["n"], 1)
            self.assertEqual(replies[1][1]["cursor"]["firstBatch"], [{"_id": 7}])
            self.assertEqual(replies[2][1]["ok"], 1.0)
            self.assertGreaterEqual(elapsed_ms, LATENCY_MS)
        finally:
            conn.close()

    def test_a_bad_latency_is_refused(self):
        r = subprocess.run([PYTHON, SCRIPT, "--port", "0", "--latency-ms", "-1"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--latency-ms: must be between 0 and 10000 ms, got -1", r.stderr)


if __name__ == "__main__":
    unittest.main()
