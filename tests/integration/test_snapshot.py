"""Incremental snapshots (issue 28): checkpoint.start_position = "snapshot" reads
the documents that exist before a stream's first start, in chunks by _id between
the live events (DBLog's watermarks), and hands each to on_snapshot (else
on_insert) as a "snapshot" event. Per key, a snapshot event is never handled
after a newer live change of that key; a key may be handled twice (snapshot then
live), never stale. The snapshot resumes after its last finished chunk when the
process dies, and `flowwarden snapshot STREAM` takes one again on a running
stream.

FW_CHAOS_LONG=1: 20,000 documents and 5,000 writes during the snapshot (the
issue's sizes); by default 2,000 and 500, which still interleave with many
chunks."""
import json
import os
import random
import threading
import time
import urllib.request

from fwtest import StandInTestCase, needs_standin, run_cli

LONG = os.environ.get("FW_CHAOS_LONG") == "1"
N = 20000 if LONG else 2000
M = 5000 if LONG else 500
WAIT = 600 if LONG else 120   # the stand-in scans the collection for each chunk's find

# Every write sets v to the next value of one counter, so a larger v is a
# newer write. The handler reports what it saw: the key, the operation and
# v (a delete has none).
SCRIPT = """
fw.stream { name = "s", collection = "c",
  checkpoint = { start_position = "snapshot", save_interval = "100ms" },
  snapshot = { chunk_size = %(chunk)d, pause = "%(pause)s" },
  on_snapshot = function(ctx)
    report({ op = ctx:operation_type(), id = ctx:document_key()._id,
             v = ctx:full_document().v })
  end,
  on_insert = function(ctx)
    report({ op = "insert", id = ctx:document_key()._id, v = ctx:full_document().v })
  end,
  on_replace = function(ctx)
    report({ op = "replace", id = ctx:document_key()._id, v = ctx:full_document().v })
  end,
  on_update = function(ctx)
    report({ op = "update", id = ctx:document_key()._id,
             v = ctx:update_description().updatedFields.v })
  end,
  on_delete = function(ctx)
    report({ op = "delete", id = ctx:document_key()._id })
  end }
"""


# The same reports from on_batch: the live events come in batches, which the snapshot must see
# event by event (each drops its key's rows; one past a chunk's high watermark ends the batch so
# the chunk's rows come before it); each snapshot row is a call of its own.
BATCH_SCRIPT = """
fw.stream { name = "s", collection = "c",
  checkpoint = { start_position = "snapshot", save_interval = "100ms" },
  snapshot = { chunk_size = %(chunk)d, pause = "%(pause)s" },
  batch = { max_events = 50, max_wait = "20ms" },
  on_batch = function(batch)
    for _, ctx in batch:events() do
      local op, v = ctx:operation_type(), nil
      if op == "update" then v = ctx:update_description().updatedFields.v
      elseif op ~= "delete" then v = ctx:full_document().v end
      report({ op = op, id = ctx:document_key()._id, v = v })
    end
  end }
"""


class Writer(threading.Thread):
    """M inserts, updates, replaces and deletes on the keys 0..N-1 (and a few
    new ones), each with the next v; stops early when told."""

    def __init__(self, coll, counter, m, seed):
        super().__init__(daemon=True)
        self.coll, self.counter, self.m = coll, counter, m
        self.rng = random.Random(seed)
        self.done_writes = 0
        self.stop_flag = threading.Event()

    def run(self):
        for _ in range(self.m):
            if self.stop_flag.is_set():
                break
            self.counter[0] += 1
            v = self.counter[0]
            k = self.rng.randrange(N + N // 20)
            op = self.rng.random()
            if op < 0.35:
                self.coll.update_one({"_id": k}, {"$set": {"v": v}})
            elif op < 0.6:
                self.coll.replace_one({"_id": k}, {"v": v}, upsert=True)
            elif op < 0.8:
                self.coll.delete_one({"_id": k})
            else:
                try:
                    self.coll.insert_one({"_id": k, "v": v})
                except Exception:   # DuplicateKey: the key exists
                    self.coll.update_one({"_id": k}, {"$set": {"v": v}})
            self.done_writes += 1


class Snapshot(StandInTestCase):

    def seed(self):
        self.db.c.insert_many([{"_id": i, "v": i} for i in range(N)])
        return [N]   # the writers' counter: v above every seeded one

    def model(self, reports):
        """Last write wins over what the handler saw, and every snapshot event
        that came after a newer live event of its key (stale)."""
        state, newest_live, stale = {}, {}, []
        for r in reports:
            k = r["id"]
            if r["op"] == "snapshot":
                if k in newest_live and (newest_live[k] is None or newest_live[k] > r["v"]):
                    stale.append(r)
                state[k] = r["v"]
            elif r["op"] == "delete":
                state.pop(k, None)
                newest_live[k] = None
            else:
                if r["v"] is not None:
                    state[k] = r["v"]
                newest_live[k] = r["v"] if r["v"] is not None else newest_live.get(k)
        return state, stale

    def collection(self):
        return {d["_id"]: d["v"] for d in self.db.c.find()}

    def snapshot_state(self):
        cp = self.checkpoint("s") or {}
        return (cp.get("snapshot") or {}).get("state")

    def wait_quiet(self, p, what):
        """Every write so far seen by the handler: a marker write arrives."""
        self.db.c.insert_one({"_id": "end-%s" % what, "v": 10 ** 9})
        self.wait_for(lambda: any(r["id"] == "end-%s" % what for r in p.reports("s")),
                      timeout=60, what="the marker %s" % what)
        self.db.c.delete_one({"_id": "end-%s" % what})
        self.wait_for(lambda: any(r["id"] == "end-%s" % what and r["op"] == "delete"
                                  for r in p.reports("s")), timeout=30, what="its delete")

    def test_snapshot_interleaved_with_writes_is_exact_and_never_stale(self):
        self.interleaved(SCRIPT)

    def test_snapshot_interleaved_with_batches_of_writes_is_exact_and_never_stale(self):
        self.interleaved(BATCH_SCRIPT)

    def test_snapshot_read_ahead_in_runs_interleaved_with_writes_is_exact_and_never_stale(self):
        """pause 0ms: the chunks are read ahead on a thread of their own in runs (a chunk's
        high watermark the next one's low) while the stream's thread hands out the due ones
        and handles the live events; a chunk joining the queue drops its rows of the live
        events shown since its run began."""
        self.interleaved(SCRIPT, chunk=N // 100, pause="0ms")

    def interleaved(self, body, chunk=N // 20, pause="10ms"):
        counter = self.seed()
        p = self.run_fw(self.script(body % {"chunk": chunk, "pause": pause}))
        p.wait_log("snapshot starting", timeout=30)
        w = Writer(self.db.c, counter, M, seed=28)
        w.start()
        self.wait_for(lambda: self.snapshot_state() == "done", timeout=WAIT,
                      what="the snapshot to finish")
        writes_during = w.done_writes
        w.join(timeout=WAIT)
        self.wait_quiet(p, "a")
        reports = p.reports("s")
        state, stale = self.model(reports)
        state = {k: v for k, v in state.items() if not str(k).startswith("end-")}
        self.assertEqual(stale, [], "snapshot events after a newer live change of their key")
        self.assertEqual(state, self.collection())
        self.assertGreater(writes_during, 0, "no write happened while the snapshot ran")
        snaps = [r for r in reports if r["op"] == "snapshot"]
        self.assertGreater(len(snaps), N // 2)
        self.assertEqual(len({r["id"] for r in snaps}), len(snaps), "a key snapshotted twice")
        self.assertEqual(self.checkpoint("s")["snapshot"]["documents"], len(snaps))
        p.wait_log("snapshot finished", timeout=10)
        self.assertEqual(p.stop(), 0)
        # Finished: the restart takes no snapshot again.
        p2 = self.run_fw(self.script(SCRIPT % {"chunk": 100, "pause": "10ms"}))
        p2.wait_open()
        self.db.c.insert_one({"_id": "after", "v": 1})
        p2.wait_reports(1, stream="s")
        self.assertEqual([r["op"] for r in p2.reports("s")], ["insert"])
        self.assertEqual(p2.stop(), 0)

    @needs_standin("a kill -9 of flowwarden during its snapshot")
    def test_kill_at_30_percent_resumes_from_the_last_finished_chunk(self):
        counter = self.seed()
        script = self.script(SCRIPT % {"chunk": N // 40, "pause": "0ms"})
        p = self.run_fw(script)
        w = Writer(self.db.c, counter, M, seed=9)
        w.start()
        self.wait_for(lambda: sum(1 for r in p.reports("s") if r["op"] == "snapshot")
                      >= 0.3 * N, timeout=WAIT, what="30% of the snapshot")
        p.kill9()
        first = p.reports("s")
        self.assertEqual(self.snapshot_state(), "running")
        p2 = self.run_fw(script)
        p2.wait_log("snapshot resuming after its last finished chunk", timeout=30)
        self.wait_for(lambda: self.snapshot_state() == "done", timeout=WAIT,
                      what="the snapshot to finish after the restart")
        w.join(timeout=WAIT)
        self.wait_quiet(p2, "b")
        second = p2.reports("s")
        again = sum(1 for r in second if r["op"] == "snapshot")
        self.assertLess(again, 0.8 * N, "the restart read the collection from the start")
        state, _ = self.model(first + second)
        state = {k: v for k, v in state.items() if not str(k).startswith("end-")}
        self.assertEqual(state, self.collection())
        _, stale = self.model(second)
        self.assertEqual(stale, [], "snapshot events after a newer live change of their key")
        self.assertEqual(p2.stop(), 0)

    @needs_standin("a kill -9 of the leader during its snapshot")
    def test_ha_standby_takes_over_a_snapshot_from_a_killed_leader(self):
        """ha.mode = "leader": only the lease's holder hands out snapshot rows; when
        it dies mid-snapshot the standby takes the lease and the snapshot resumes
        after the last finished chunk, fenced with its own epoch; nothing is lost,
        nothing stale."""
        counter = self.seed()
        script = self.script('fw.defaults { ha = { mode = "leader", lease = "1s" } }\n' +
                             SCRIPT % {"chunk": N // 40, "pause": "0ms"})
        a = self.run_fw(script)
        self.wait_for(lambda: sum(1 for r in a.reports("s") if r["op"] == "snapshot")
                      >= 0.1 * N, timeout=WAIT, what="the leader's snapshot to start")
        b = self.run_fw(script)
        b.wait_log("role: standby", timeout=30)
        self.assertEqual([r for r in b.reports("s")], [], "the standby handled events")
        w = Writer(self.db.c, counter, M // 5, seed=36)
        w.start()
        self.wait_for(lambda: sum(1 for r in a.reports("s") if r["op"] == "snapshot")
                      >= 0.3 * N, timeout=WAIT, what="30% of the snapshot")
        a.kill9()
        first = a.reports("s")
        self.wait_for(lambda: self.snapshot_state() == "done", timeout=WAIT,
                      what="the standby to finish the snapshot")
        w.join(timeout=WAIT)
        self.wait_quiet(b, "ha")
        second = b.reports("s")
        self.assertLess(sum(1 for r in second if r["op"] == "snapshot"), 0.8 * N,
                        "the standby read the collection from the start")
        state, _ = self.model(first + second)
        state = {k: v for k, v in state.items() if not str(k).startswith("end-")}
        self.assertEqual(state, self.collection())
        _, stale = self.model(second)
        self.assertEqual(stale, [], "snapshot events after a newer live change of their key")
        self.assertEqual(b.stop(), 0)

    def test_snapshot_command_on_a_running_stream_with_a_filter(self):
        self.db.c.insert_many([{"_id": i, "v": i} for i in range(300)])
        self.db.other.insert_one({"_id": 1})
        script = self.script("""
            fw.stream { name = "s", collection = "c", snapshot = { chunk_size = 40 },
              on_insert = function(ctx)
                report({ op = ctx:operation_type(), id = ctx:document_key()._id })
              end }
            fw.stream { name = "all",
              on_change = function(ctx)
                report({ op = ctx:operation_type(), coll = ctx:collection_name() })
              end }
            """)
        p = self.run_fw(script, extra=["--admin", "127.0.0.1:0"])
        url = "http://127.0.0.1:%d" % p.admin_port()
        p.wait_open(2)
        # start_position = "resume" (the default): nothing existing is read.
        self.db.c.insert_one({"_id": "live", "v": 0})
        p.wait_reports(1, stream="s")
        r = run_cli(["snapshot", "s", "--filter", '{"v": {"$gte": 250}}', "--admin", url])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("snapshot s: accepted: snapshot asked: the stream reads its collection "
                      "(the documents matching the filter)", r.stdout)
        self.wait_for(lambda: self.snapshot_state() == "done",
                      what="the snapshot to finish")
        # The stored state says nothing about whether the report lines before it were read
        # from the process's output yet: wait for them.
        self.wait_for(lambda: len([r for r in p.reports("s") if r["op"] == "snapshot"]) >= 50,
                      what="the snapshot's reports")
        snaps = sorted(r["id"] for r in p.reports("s") if r["op"] == "snapshot")
        self.assertEqual(snaps, list(range(250, 300)))
        r = run_cli(["status", "--admin", url])
        self.assertIn("s: snapshot finished: 50 documents handed out", r.stdout)
        metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        self.assertIn('flowwarden_snapshot_documents_total{stream="s"} 50', metrics)
        # Issue 38: snapshot events have their own label, not "other".
        self.assertIn('flowwarden_events_total{stream="s",operation="snapshot"} 50', metrics)
        self.assertIn('flowwarden_events_total{stream="s",operation="other"} 0', metrics)
        self.assertIn('flowwarden_events_total{stream="s",operation="insert"} 1', metrics)
        st = json.loads(urllib.request.urlopen(url + "/v1/streams/s", timeout=10).read())
        self.assertEqual(st["events"]["snapshot"], 50)
        self.assertEqual(st["events"]["other"], 0)
        # The database-wide stream never saw the watermarks, and cannot snapshot.
        self.assertNotIn("_fw_snapshot_marks", [r.get("coll") for r in p.reports("all")])
        r = run_cli(["snapshot", "all", "--admin", url])
        self.assertEqual(r.returncode, 1)
        self.assertIn('stream "all" watches a whole database: a snapshot needs a collection',
                      r.stderr)
        r = run_cli(["snapshot", "s", "--filter", "{not json", "--admin", url])
        self.assertEqual(r.returncode, 1)
        self.assertIn("the filter is not a JSON document", r.stderr)
        self.assertEqual(p.stop(), 0)

    def test_snapshot_events_go_through_lanes_retries_and_the_dlq(self):
        self.db.c.insert_many([{"_id": i, "v": i} for i in range(120)])
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "c", lanes = 2, dlq = true,
              retry = { max_attempts = 2, initial_delay = "10ms" },
              checkpoint = { start_position = "snapshot" }, snapshot = { chunk_size = 25 },
              on_snapshot = function(ctx)
                local id = ctx:document_key()._id
                if id == 7 then error(fw.error("Validation", "no seven")) end
                report({ op = ctx:operation_type(), id = id, attempt = ctx:attempt_number() })
              end,
              on_insert = function(ctx) report({ op = "insert", id = ctx:document_key()._id }) end }
            """))
        self.wait_for(lambda: self.snapshot_state() == "done",
                      what="the snapshot to finish")
        self.wait_for(lambda: self.db["_fw_dlq"].find_one({"documentKey._id": 7}),
                      what="the dead letter of 7")
        entry = self.db["_fw_dlq"].find_one({"documentKey._id": 7})
        self.assertEqual(entry["operationType"], "SNAPSHOT")
        self.assertEqual(entry["fullDocument"], {"_id": 7, "v": 7})
        # Validation is retried as any type outside no_retry_on: two attempts.
        self.assertEqual(entry["attempts"], 2)
        # The reports are read from flowwarden's log by a thread of this test, which may
        # trail the checkpoint's "done" on a loaded machine: waited for, then compared.
        self.wait_for(lambda: sum(1 for r in p.reports("s") if r["op"] == "snapshot") >= 119,
                      what="the reports of the 119 rows handled")
        ids = sorted(r["id"] for r in p.reports("s") if r["op"] == "snapshot")
        self.assertEqual(ids, [i for i in range(120) if i != 7])
        self.assertEqual(p.stop(), 0)

    def test_exactly_once_a_poison_row_is_dead_lettered_once_with_its_progress(self):
        """exactly_once (issue 39): each row's writes commit with the progress past it; a row
        whose handler fails after writing is dead-lettered (the DLQ on the same deployment:
        its entry and the progress past it in one transaction), nothing of it applied."""
        self.db.c.insert_many([{"_id": i, "v": i} for i in range(120)])
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "c", exactly_once = true, dlq = true,
              retry = { max_attempts = 2, initial_delay = "10ms" },
              checkpoint = { start_position = "snapshot" }, snapshot = { chunk_size = 25 },
              on_snapshot = function(ctx)
                local id = ctx:document_key()._id
                fw.mongo.collection(ctx:database_name(), "applied"):update_one({ _id = id },
                  { ["$inc"] = { n = 1 } }, { upsert = true })
                if id == 57 then error(fw.error("Validation", "no 57")) end
              end }
            """))
        self.wait_for(lambda: self.snapshot_state() == "done", what="the snapshot to finish")
        self.assertEqual(p.stop(), 0)
        entries = list(self.db["_fw_dlq"].find())
        self.assertEqual([(e["documentKey"]["_id"], e["operationType"]) for e in entries],
                         [(57, "SNAPSHOT")])
        self.assertEqual({d["_id"]: d["n"] for d in self.db.applied.find()},
                         {i: 1 for i in range(120) if i != 57})
        snap = self.checkpoint("s")["snapshot"]
        self.assertEqual((snap["state"], snap["documents"]), ("done", 120))
        # No resume token of a row ever became the stream's position.
        self.assertNotIn("fwsnapshot", str(self.checkpoint("s").get("lastProcessedToken")))

    def test_exactly_once_a_deferred_row_is_applied_once_by_its_retry(self):
        """exactly_once with retry.mode = "deferred": a row whose first attempt fails after
        writing waits in the DLQ as SCHEDULED (committed with the progress past it), and its
        retry applies it once, resolving the entry."""
        self.db.c.insert_many([{"_id": i, "v": i} for i in range(60)])
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "c", exactly_once = true, dlq = true,
              retry = { mode = "deferred", max_attempts = 3, initial_delay = "100ms" },
              checkpoint = { start_position = "snapshot" }, snapshot = { chunk_size = 20 },
              on_snapshot = function(ctx)
                local id = ctx:document_key()._id
                fw.mongo.collection(ctx:database_name(), "applied"):update_one({ _id = id },
                  { ["$inc"] = { n = 1 } }, { upsert = true })
                if id == 33 and ctx:attempt_number() == 1 then
                  error(fw.error("Http", "not yet"))
                end
              end }
            """))
        self.wait_for(lambda: self.db["_fw_dlq"].find_one({"status": "RESOLVED"}), timeout=30,
                      what="the deferred row's retry")
        self.wait_for(lambda: self.snapshot_state() == "done", what="the snapshot to finish")
        self.assertEqual(p.stop(), 0)
        self.assertEqual({d["_id"]: d["n"] for d in self.db.applied.find()},
                         {i: 1 for i in range(60)})
        entries = list(self.db["_fw_dlq"].find())
        self.assertEqual([(e["documentKey"]["_id"], e["status"]) for e in entries],
                         [(33, "RESOLVED")])

    def test_exactly_once_a_row_behind_an_open_sequence_is_parked_once(self):
        """exactly_once with a sequenced DLQ: a live update of key 5 dead-lettered opens its
        sequence; the snapshot asked afterwards parks key 5's row behind it (its progress
        stored right after the entry) and applies every other row once."""
        self.db.c.insert_many([{"_id": i, "v": i} for i in range(40)])
        p = self.run_fw(self.script("""
            local function apply(ctx)
              local id = ctx:document_key()._id
              fw.mongo.collection(ctx:database_name(), "applied"):update_one({ _id = id },
                { ["$inc"] = { n = 1 } }, { upsert = true })
            end
            fw.stream { name = "s", collection = "c", exactly_once = true,
              dlq = { sequenced = true }, retry = { max_attempts = 1 },
              snapshot = { chunk_size = 15 },
              on_update = function(ctx) apply(ctx); error(fw.error("Validation", "no")) end,
              on_snapshot = apply }
            """), extra=["--admin", "127.0.0.1:0"])
        p.wait_open()
        self.db.c.update_one({"_id": 5}, {"$set": {"v": -5}})
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 1,
                      what="the update's dead letter")
        r = run_cli(["snapshot", "s", "--admin", "http://127.0.0.1:%d" % p.admin_port()])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: self.snapshot_state() == "done", what="the snapshot to finish")
        self.assertEqual(p.stop(), 0)
        self.assertEqual({d["_id"]: d["n"] for d in self.db.applied.find()},
                         {i: 1 for i in range(40) if i != 5})
        ops = sorted(e["operationType"] for e in self.db["_fw_dlq"].find({"documentKey._id": 5}))
        self.assertEqual(ops, ["SNAPSHOT", "UPDATE"], "the row parked once behind the update")
        self.assertEqual(self.checkpoint("s")["snapshot"]["documents"], 40)

    def test_ids_of_several_types_are_all_read_in_mongodb_order(self):
        from bson import ObjectId
        docs = ([{"_id": i} for i in range(20)] + [{"_id": 2.5}] +
                [{"_id": "k%02d" % i} for i in range(15)] + [{"_id": {"a": 1}}] +
                [{"_id": ObjectId()} for _ in range(9)] + [{"_id": True}])
        self.db.c.insert_many(docs)
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "c", snapshot = { chunk_size = 7 },
              checkpoint = { start_position = "snapshot" },
              on_snapshot = function(ctx) report({ id = tostring(ctx:document_key()._id) }) end }
            """))
        self.wait_for(lambda: self.snapshot_state() == "done", what="the snapshot to finish")
        self.wait_for(lambda: len(p.reports("s")) >= len(docs), what="the rows' reports")
        ids = [r["id"] for r in p.reports("s")]
        self.assertEqual(len(set(ids)), len(docs), "a document missed or read twice")
        self.assertEqual(len(ids), len(docs))
        self.assertEqual(self.checkpoint("s")["snapshot"]["documents"], len(docs))
        self.assertEqual(p.stop(), 0)

    @needs_standin("counting getMores in serverStatus (a replica set's secondaries' oplog reads "
                   "count too)")
    def test_the_change_stream_goes_back_to_its_usual_wait_once_the_snapshot_finished(self):
        """While a snapshot runs the change stream's getMores wait a few ms at most (its chunks
        wait for their post-batch tokens); once it finished the stream re-opens where it is,
        with the usual wait (1 s): an idle stream does not go on asking hundreds of times a
        second, and the re-open neither loses nor repeats an event."""
        self.db.c.insert_many([{"_id": i, "v": i} for i in range(300)])
        p = self.run_fw(self.script(SCRIPT % {"chunk": 100, "pause": "0ms"}))
        p.wait_log("re-opens with its usual getMore wait", timeout=60)
        p.wait_log("change stream open", count=2, timeout=30)
        self.db.c.insert_one({"_id": "after", "v": 1})
        self.wait_for(lambda: any(r["id"] == "after" for r in p.reports("s")), timeout=30,
                      what="the insert after the snapshot")

        def getmores():
            return self.client.admin.command("serverStatus")["opcounters"]["getmore"]

        # A window to count in, not a wait for something: with a 5 ms wait an idle stream
        # asks ~200 times a second (fewer on a loaded machine, never 10); with 1 s, twice.
        before = getmores()
        time.sleep(1.0)
        self.assertLessEqual(getmores() - before, 10, "an idle stream still polls fast")
        reports = p.reports("s")
        self.assertEqual(sorted(r["id"] for r in reports if r["op"] == "snapshot"),
                         list(range(300)))
        self.assertEqual([r["op"] for r in reports if r["id"] == "after"], ["insert"])
        self.assertEqual(p.stop(), 0)

    def test_nan_infinities_min_max_keys_and_mixed_numbers_at_chunk_boundaries(self):
        """Every _id a boundary (chunk_size 1, then 2 and 3): NaN sorts before every
        number, and MongoDB's $gt: NaN matches nothing (NaN compares false to every
        other number: src/mongo/db/matcher/expression_leaf.cpp,
        ComparisonMatchExpression::matchesSingleElement; jstests/core/nan.js), so a
        chunk ending at NaN must go on with the numbers, not skip them."""
        from bson import Decimal128, Int64, MaxKey, MinKey
        docs = [{"_id": MinKey()}, {"_id": None}, {"_id": float("nan")},
                {"_id": float("-inf")}, {"_id": Int64(-2 ** 62)}, {"_id": -7},
                {"_id": Decimal128("-0.5")}, {"_id": 0}, {"_id": 0.25},
                {"_id": Decimal128("0.3")}, {"_id": 1}, {"_id": Int64(2)}, {"_id": 2.5},
                {"_id": Decimal128("3")}, {"_id": Int64(2 ** 53 + 1)}, {"_id": 1e300},
                {"_id": Decimal128("1E+400")}, {"_id": float("inf")}, {"_id": "a"},
                {"_id": MaxKey()}]
        self.db.c.insert_many(docs)
        self.assertEqual(self.db.c.count_documents({}), len(docs))
        for chunk in (1, 2, 3):
            self.db.drop_collection("_fw_checkpoints")
            self.db.drop_collection("_fw_snapshot_marks")
            p = self.run_fw(self.script("""
                fw.stream { name = "s", collection = "c", snapshot = { chunk_size = %d },
                  checkpoint = { start_position = "snapshot" },
                  on_snapshot = function(ctx)
                    report({ id = fw.json.encode({ v = ctx:document_key()._id }) })
                  end }
                """ % chunk))
            self.wait_for(lambda: self.snapshot_state() == "done",
                          what="the snapshot to finish (chunk_size %d)" % chunk)
            # The handler logged each row before the state was stored; this test's reader
            # of the log may lag behind a fast snapshot.
            self.wait_for(lambda: len(p.reports("s")) >= len(docs),
                          what="the rows' reports (chunk_size %d)" % chunk)
            ids = [r["id"] for r in p.reports("s")]
            self.assertEqual(p.stop(), 0)
            self.assertEqual(len(ids), len(docs), "chunk_size %d: %s" % (chunk, ids))
            self.assertEqual(len(set(ids)), len(docs), "chunk_size %d: %s" % (chunk, ids))
