"""A change stream's getMore builds its batch in runs, letting other commands in between
(ChangeStream.fill_yielding, as mongod's query yields): the batch is the one a single run
would build, in order, within the 16 MiB cap, and a cursor killed meanwhile fails the getMore.

Run: cd tests/standin && /usr/bin/python3 -m unittest test_yield -v
"""

import struct
import unittest

import bson
from bson.int64 import Int64

from fwstandin import changestream, commands, wire
from fwstandin.errors import MongoError
from fwstandin.server import Server


class YieldingGetMoreTest(unittest.TestCase):
    def setUp(self):
        self.server = Server()
        self.server.load()
        self.conn = commands.Connection(1, ("127.0.0.1", 1))
        self.rid = 0

    def call(self, body):
        self.rid += 1
        b = bson.encode(dict(body, **{"$db": "y"}))
        payload = struct.pack("<I", 0) + b"\x00" + b
        req = wire.parse_message((16 + len(payload), self.rid, 0, wire.OP_MSG), payload)
        reply = bson.decode(commands.execute(self.server, self.conn, req)[21:])
        self.assertEqual(reply.get("ok"), 1.0, reply)
        return reply

    def open_stream(self):
        cid = self.call({"aggregate": "c", "pipeline": [{"$changeStream": {}}],
                         "cursor": {"batchSize": 0}})["cursor"]["id"]
        return self.server.cursors.get(cid)

    def insert(self, first, n, pad=0):
        self.call({"insert": "c", "documents": [{"_id": i, "p": "x" * pad}
                                                 for i in range(first, first + n)]})

    @staticmethod
    def ids(batch):
        return [bson.decode(raw)["documentKey"]["_id"] for raw in batch]

    def test_writes_during_the_pauses_join_the_batch_in_order(self):
        cur = self.open_stream()
        self.insert(0, 2500)
        pauses = []

        def pause():  # another client's insert takes the lock while the build pauses
            self.insert(10000 + 10 * len(pauses), 10)
            pauses.append(1)
        with self.server.store.lock:
            batch = cur.fill_yielding(3000, pause)
        self.assertEqual(len(pauses), 2)
        self.assertEqual(self.ids(batch),
                         list(range(2500)) + list(range(10000, 10010)) + list(range(10010, 10020)))
        with self.server.store.lock:
            self.assertEqual(cur.fill_yielding(3000, pause), [])
        self.assertEqual(len(pauses), 2)  # nothing more to build: no pause

    def test_the_batch_stays_within_16_mib_across_runs(self):
        cur = self.open_stream()
        self.insert(0, 2100, pad=10000)  # ~21 MB of events
        with self.server.store.lock:
            first = cur.fill_yielding(5000, lambda: None)
            second = cur.fill_yielding(5000, lambda: None)
        self.assertLessEqual(sum(len(r) for r in first), changestream.MAX_BATCH_BYTES)
        self.assertGreater(len(first), 1000)  # more than one run
        self.assertEqual(self.ids(first) + self.ids(second), list(range(2100)))

    def test_a_cursor_killed_during_a_pause_fails_the_get_more(self):
        cur = self.open_stream()
        self.insert(0, 1500)

        def pause():
            self.call({"killCursors": "c", "cursors": [Int64(cur.id)]})
        with self.server.store.lock:
            with self.assertRaises(MongoError) as ctx:
                cur.fill_yielding(3000, pause)
        self.assertEqual(ctx.exception.code, 237)


if __name__ == "__main__":
    unittest.main()
