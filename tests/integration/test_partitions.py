"""Key partitions in one instance (issue 31, partitions = N): each partition its own change
stream (a server-side $match on $toHashedIndexKey of documentKey._id), checkpoint and Lua
state; every event handled once, in order per key, each key always in the partition its hash
names; a restart resumes each partition from its own checkpoint; a different N than the stored
checkpoints' without positions is refused, and so is removing partitions (doctor warns of another
generation; test_partition_generations.py switches); a server without $toHashedIndexKey (older
than 7.0) is refused."""
import json
import os
import sys

import pymongo

from fwtest import StandInTestCase, clean_env, needs_standin, run_cli

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standin"))
from fwstandin.hashing import hashed_index_key  # noqa: E402

SCRIPT = """
    local STATE = string.format("%%p", {})
    local function seen(ctx, n)
      local k, parts = ctx:partition()
      report({ key = ctx:document_key()._id, n = n, k = k, parts = parts,
               unit = ctx:stream_name(), st = STATE })
    end
    fw.stream {
      name = "s", collection = "c", partitions = %(n)d,
      restart = { initial_delay = "100ms" },
      on_insert = function(ctx) seen(ctx, 0) end,
      on_update = function(ctx) seen(ctx, ctx:update_description().updatedFields.n) end,
      on_change = function(ctx)  -- drop, invalidate
        local k = ctx:partition()
        report({ op = ctx:operation_type(), k = k })
      end,
    }
    fw.stream {
      name = "plain", collection = "other",
      on_insert = function(ctx)
        local k, parts = ctx:partition()
        report({ plain = true, k = k == nil and "nil" or k, parts = parts == nil and "nil" or parts })
      end,
    }
"""

KEYS, UPDATES = 24, 240


def doctor_check(case, n):
    """flowwarden doctor's "partitions" check of stream "s" (partitions = n) and its exit."""
    cp = run_cli(["doctor", case.script(SCRIPT % {"n": n}), "--uri", case.uri, "--json"],
                 env=clean_env())
    found = [c for c in json.loads(cp.stdout)["checks"]
             if c["name"] == "partitions" and c["stream"] == "s"]
    case.assertEqual(len(found), 1, cp.stdout)
    return found[0], cp.returncode


def partition_of(key, n):
    # $abs of $mod (truncated, the sign of the dividend): |hash| % n.
    return abs(hashed_index_key(key)) % n


@needs_standin("version mode (--server-version 7.0)")
class PartitionsTest(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def write(self, start, count):
        ops = [pymongo.UpdateOne({"_id": "k%d" % (i % KEYS)}, {"$set": {"n": start + i + 1}})
               for i in range(count)]
        self.db.c.bulk_write(ops)

    def check_reports(self, got, n):
        per_key = {}
        for r in (r for r in got if "key" in r):
            self.assertEqual(r["parts"], n)
            self.assertEqual(r["unit"], "s#%d/%d" % (r["k"], n))
            self.assertEqual(r["k"], partition_of(r["key"], n), r)
            per_key.setdefault(r["key"], []).append(r["n"])
        return per_key

    def test_four_partitions_each_key_once_in_order_in_its_partition(self):
        p = self.run_fw(self.script(SCRIPT % {"n": 4}))
        p.wait_open(streams=5)
        self.db.c.insert_many([{"_id": "k%d" % j, "n": 0} for j in range(KEYS)])
        self.write(0, UPDATES)
        self.db.other.insert_one({"_id": 1})
        got = [r for r in p.wait_reports(KEYS + UPDATES + 1, timeout=60) if "plain" not in r]
        want = {"k%d" % j: [0] for j in range(KEYS)}
        for i in range(UPDATES):
            want["k%d" % (i % KEYS)].append(i + 1)
        self.assertEqual(self.check_reports(got, 4), want)   # once each, in order per key
        self.assertEqual({r["k"] for r in got}, {0, 1, 2, 3})  # every partition had keys
        self.assertEqual(len({r["st"] for r in got}), 4)     # one Lua state per partition
        plain = [r for r in p.reports() if "plain" in r]
        self.assertEqual(plain, [{"plain": True, "k": "nil", "parts": "nil"}])
        self.assertEqual(p.stop(), 0)

        # Each partition's checkpoint is its own; a restart resumes from each.
        ids = sorted(d["_id"] for d in self.db["_fw_checkpoints"].find({}, {"_id": 1}))
        self.assertEqual(ids, ["plain", "s#0/4", "s#1/4", "s#2/4", "s#3/4"])
        p2 = self.run_fw(self.script(SCRIPT % {"n": 4}))
        p2.wait_open(streams=5)
        self.write(UPDATES, 40)
        got = p2.wait_reports(40, timeout=60)
        per_key = self.check_reports(got, 4)
        self.assertEqual(sorted(n for ns in per_key.values() for n in ns),
                         list(range(UPDATES + 1, UPDATES + 41)))  # nothing again, none lost

        # A drop: its events have no documentKey and hash as null, so one partition handles
        # drop and invalidate once; the others re-open, and every later insert is handled.
        self.db.c.drop()
        self.db.c.insert_many([{"_id": "z%d" % j, "n": 0} for j in range(8)])
        got = p2.wait_reports(40 + 2 + 8, timeout=30)
        ops = [(r["op"], r["k"]) for r in got if r.get("op")]
        null_k = partition_of(None, 4)
        self.assertEqual(ops, [("drop", null_k), ("invalidate", null_k)])
        self.assertEqual(sorted(r["key"] for r in got if r.get("key", "").startswith("z")),
                         ["z%d" % j for j in range(8)])
        self.assertEqual(p2.stop(), 0)
        self.assertEqual(p2.report_count(), 50)

    def test_doctor_says_the_server_hashes_keys(self):
        check, _ = doctor_check(self, 4)
        self.assertEqual(check["status"], "ok", check)
        self.assertIn("4 partitions: the server has $toHashedIndexKey (7.0+)", check["message"])

    def test_another_number_without_old_positions_is_refused(self):
        # A checkpoint of a run with partitions = 4 but without a position: nothing to switch
        # generations from (test_partition_generations.py switches with positions).
        self.db["_fw_checkpoints"].insert_one({"_id": "s#3/4"})
        p2 = self.run_fw(self.script(SCRIPT % {"n": 2}))
        p2.wait_log("STREAM STOPPED", stream="s#0/2")
        p2.wait_log("STREAM STOPPED", stream="s#1/2")
        msg = "\n".join(p2.messages("error", stream="s#0/2"))
        self.assertIn('stream "s": %s._fw_checkpoints holds checkpoints of the stream with '
                      'partitions = 4, but none has a position, and the script says '
                      'partitions = 2' % self.db_name, msg)
        self.assertIn("set partitions back to the stored number", msg)
        p2.wait_open(streams=1)  # the other stream runs
        self.assertEqual(p2.stop(), 0)
        # Nothing of the new generation was written.
        self.assertIsNone(self.checkpoint("s#0/2"))
        self.assertIsNone(self.checkpoint("s#generation"))

    def test_removing_partitions_without_old_positions_is_refused(self):
        # A checkpoint of a run with partitions = 2; the script now declares none.
        self.db["_fw_checkpoints"].insert_one({"_id": "s#1/2"})
        p = self.run_fw(self.script(SCRIPT.replace("partitions = %(n)d,", "")))
        p.wait_log("STREAM STOPPED", stream="s")
        msg = "\n".join(p.messages("error", stream="s"))
        self.assertIn('holds checkpoints of the stream with partitions = 2, but none has a '
                      'position, and the script says no partitions', msg)
        p.wait_open(streams=1)  # the other stream runs
        self.assertEqual(p.stop(), 0)
        self.assertIsNone(self.checkpoint("s"))

    def test_doctor_warns_of_another_generation(self):
        self.db["_fw_checkpoints"].insert_one({"_id": "s#3/4"})
        check, _ = doctor_check(self, 2)
        self.assertEqual(check["status"], "warn", check)
        self.assertIn('holds checkpoint "s#3/4", of the stream with partitions = 4, but the '
                      'script says partitions = 2: a start switches generations',
                      check["message"])


@needs_standin("version mode (default 6.0)")
class PartitionsNeed70(StandInTestCase):
    def test_a_server_without_to_hashed_index_key_is_refused(self):
        p = self.run_fw(self.script(SCRIPT % {"n": 2}))
        p.wait_log("STREAM STOPPED", stream="s#0/2")
        msg = "\n".join(p.messages("error", stream="s#0/2"))
        self.assertIn('stream "s#0/2": partitions = 2 needs $toHashedIndexKey (MongoDB 7.0 or '
                      'later), but the server 127.0.0.1:%d has maxWireVersion 17' % self.standin.port,
                      msg)
        p.wait_open(streams=1)
        self.assertEqual(p.stop(), 0)

    def test_doctor_fails_it(self):
        check, code = doctor_check(self, 2)
        self.assertEqual(check["status"], "fail", check)
        self.assertIn("needs $toHashedIndexKey (MongoDB 7.0+); the server has maxWireVersion 17",
                      check["message"])
        self.assertNotEqual(code, 0)


SNAPSHOT_SCRIPT = """
    fw.stream {
      name = "s", collection = "c", partitions = 3,
      checkpoint = { start_position = "snapshot" }, snapshot = { chunk_size = 7 },
      on_snapshot = function(ctx)
        local k = ctx:partition()
        report({ key = ctx:document_key()._id, k = k })
      end,
      on_insert = function(ctx) end,
    }
"""


@needs_standin("version mode (--server-version 7.0)")
class PartitionedSnapshotTest(StandInTestCase):
    standin_args = ("--server-version", "7.0")

    def test_each_unit_snapshots_only_its_own_keys(self):
        keys = ["k%d" % i for i in range(40)]
        self.db.c.insert_many([{"_id": k} for k in keys])
        p = self.run_fw(self.script(SNAPSHOT_SCRIPT))
        p.wait_log("snapshot finished", count=3, timeout=60)
        got = [r for r in p.reports() if "key" in r]
        # Every document once, in the unit its hash names (as its live events are).
        self.assertEqual(sorted(r["key"] for r in got), sorted(keys))
        for r in got:
            self.assertEqual(r["k"], partition_of(r["key"], 3), r)
        self.assertEqual(p.stop(), 0)
