"""flowwarden's own collections sharded on a key its writes cannot use (issue
23, section 8): through mongos a findAndModify or an upsert without the whole
shard key fails with 61 ShardKeyNotFound, a unique index that does not start
with it with 67 CannotCreateIndex. The stand-in cannot shard: a fail point
answers with those codes, and the failure must say which key the collection
may be sharded on (docs/compatibility.md)."""
import unittest

from fwtest import needs_standin, StandInTestCase

STREAM = """
fw.stream { name = "s", collection = "c",
  checkpoint = { save_interval = "100ms" },%(extra)s
  on_change = function(ctx) report({ op = ctx:operation_type() }) end }
"""


@needs_standin("fault injection (failCommand 61 / 67 as mongos answers)")
class ShardedOwnCollections(StandInTestCase):

    def test_checkpoint_write_refused_for_its_shard_key_says_how_to_shard(self):
        self.fail_point("alwaysOn", {"failCommands": ["update"], "errorCode": 61,
                                     "appName": "flowwarden"})
        p = self.run_fw(self.script(STREAM % {"extra": ""}))
        p.wait_open()
        self.db.c.insert_one({"n": 1})
        p.wait_reports(1)
        p.wait_log("_fw_checkpoints is sharded on a key flowwarden's writes cannot name: "
                   "shard it on { _id: 1 } (or { _id: \"hashed\" }) or leave it unsharded; "
                   "see docs/compatibility.md")
        self.fail_point("off")
        self.wait_checkpoint("s")
        self.assertEqual(p.stop(), 0)

    def test_dlq_unique_index_refused_for_its_shard_key_says_how_to_shard(self):
        # The first createIndexes (TTL, by stream and time) goes through; the
        # unique (streamName, eventId) index is refused.
        self.fail_point({"skip": 1}, {"failCommands": ["createIndexes"], "errorCode": 67,
                                      "appName": "flowwarden"})
        p = self.run_fw(self.script(STREAM % {"extra": "\n  dlq = true,"}))
        p.wait_log("cannot create the DLQ index")
        p.wait_log("_fw_dlq is sharded on a key flowwarden's unique index cannot name: shard "
                   "it on { streamName: 1 } or leave it unsharded; see docs/compatibility.md")
        self.fail_point("off")
        p.wait_open()
        self.db.c.insert_one({"n": 1})
        p.wait_reports(1)
        self.assertEqual(p.stop(), 0)


if __name__ == "__main__":
    unittest.main()
