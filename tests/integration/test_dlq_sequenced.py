"""The sequenced dead-letter queue (issue 14, seed 004): a key whose event is
dead-lettered parks its later events behind it, other keys keep flowing,
`flowwarden dlq replay` resolves whole sequences in order and closes them,
the live stream and a replay closing a sequence never reorder a key's
events, overflow stops the stream without losing anything, and bad
declarations are refused."""
import json
import os
import signal
import subprocess
import threading
import time
import unittest

from fwtest import BINARY, REPORT_PREFIX, StandInTestCase, clean_env, run_cli

LONG = os.environ.get("FW_CHAOS_LONG", "") not in ("", "0")

# Inserts {_id, k, v, bad}: the handler appends v to the read model of key k
# (fw.mongo), and fails with a permanent error while bad is set and the
# script is the broken version. %(extra)s goes into the stream declaration.
SCRIPT = """
local BROKEN = %(broken)s
local function apply(ctx)
  local doc = ctx:full_document()
  if BROKEN and doc.bad then
    error(fw.error("Validation", "bad value " .. tostring(doc.v)))
  end
  %(before)s
  fw.mongo.collection("%(db)s", "model"):update_one({ _id = doc.k }, { ["$push"] = { vs = doc.v } },
    { upsert = true })
  local l = ctx:dead_letter()
  report({ k = doc.k, v = doc.v, seq = l and l.sequence_id or nil,
           idx = l and l.sequence_index or nil })
end
fw.stream { name = "s", collection = "orders", on_insert = apply,
            dlq = { sequenced = true, sequence_key = function(ctx) return ctx:full_document().k end
                    %(dlq)s } %(extra)s }
"""


def script_text(db, broken=True, dlq="", extra="", before=""):
    return SCRIPT % {"db": db, "broken": "true" if broken else "false", "dlq": dlq,
                     "extra": extra, "before": before}


class SequencedTestCase(StandInTestCase):

    def write(self, broken=True, **kw):
        return self.script(script_text(self.db_name, broken, **kw))

    def model(self):
        return {d["_id"]: d["vs"] for d in self.db.model.find()}

    def entries(self, **query):
        q = {"streamName": "s"}
        q.update(query)
        return list(self.db["_fw_dlq"].find(q).sort("sequenceIndex", 1))

    def sequences(self):
        return list(self.db["_fw_dlq_sequences"].find())

    def replay(self, script, *args, timeout=60):
        return run_cli(["dlq", "replay", script, "--uri", self.uri] + list(args), timeout=timeout)

    def fix(self, p, **kw):
        """Rewrites the script as its fixed version and reloads it (SIGHUP)."""
        from fwtest import PRELUDE
        import textwrap
        before = sum("reloaded " in m for m in p.messages())
        with open(p.script, "w") as f:
            f.write(PRELUDE + textwrap.dedent(script_text(self.db_name, False, **kw)))
        p.proc.send_signal(signal.SIGHUP)
        p.wait_until(lambda: sum("reloaded " in m for m in p.messages()) > before, 30, "reload")

    def insert(self, *docs):
        for i, (k, v, bad) in enumerate(docs):
            self.db.orders.insert_one({"_id": self.next_id(), "k": k, "v": v, "bad": bad})

    def next_id(self):
        self._id = getattr(self, "_id", 0) + 1
        return self._id


class LiveParking(SequencedTestCase):

    def test_a_failed_key_parks_its_later_events_and_other_keys_flow(self):
        script = self.write()
        p = self.run_fw(script)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "k": "k1", "v": 1, "bad": True})
        self.db.orders.insert_one({"_id": 2, "k": "k1", "v": 2})
        self.db.orders.insert_one({"_id": 3, "k": "k2", "v": 1})
        self.db.orders.insert_one({"_id": 4, "k": "k1", "v": 3})
        self.db.orders.insert_one({"_id": 5, "k": "k2", "v": 2})
        self.wait_for(lambda: len(self.entries()) == 3, what="head and two parked entries")
        self.wait_for(lambda: self.model().get("k2") == [1, 2], what="k2 handled")
        head, *parked = self.entries()
        self.assertEqual(head["sequenceId"], '"k1"')
        self.assertEqual(head["error"]["type"], "Validation")
        self.assertEqual([e["sequenceIndex"] for e in [head] + parked], [0, 1, 2])
        self.assertEqual([e["fullDocument"]["v"] for e in parked], [2, 3])
        for e in parked:
            self.assertNotIn("error", e)
            self.assertEqual(e["attempts"], 0)
            self.assertEqual(e["status"], "PENDING")
            self.assertEqual(e["history"][0]["result"], "parked")
        self.assertNotIn("k1", self.model())
        seq = self.sequences()
        self.assertEqual(len(seq), 1)
        self.assertEqual((seq[0]["sequenceId"], seq[0]["open"], seq[0]["next"],
                          seq[0]["inflight"]), ('"k1"', True, 3, 0))
        self.assertEqual(p.stop(), 0)
        self.assertIn("parked=2", " ".join(p.messages()))

    def test_the_in_memory_store_parks_and_keeps_its_sequences_in_the_process(self):
        # store = "memory": the entries and the sequences stay in run's
        # process; nothing is written to the server's DLQ collections.
        script = self.write(dlq=', store = "memory"')
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, False), ("k2", 1, False), ("k1", 3, False))
        self.wait_for(lambda: self.model().get("k2") == [1], what="k2 handled")
        p.wait_until(lambda: sum("behind DLQ sequence" in m for m in p.messages()) == 2, 30,
                     "two k1 events parked")
        self.assertIn('DLQ sequence "k1" is open (index 0)', " ".join(p.messages()))
        self.assertNotIn("k1", self.model())
        self.assertEqual(self.entries(), [])
        self.assertEqual(self.sequences(), [])
        self.assertEqual(p.stop(), 0)
        self.assertIn("parked=2", " ".join(p.messages()))


class ReplayInOrder(SequencedTestCase):

    def test_fixed_script_replays_the_sequence_in_order_and_the_model_matches(self):
        script = self.write()
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, False), ("k2", 1, False), ("k1", 3, False),
                    ("k2", 2, False))
        self.wait_for(lambda: len(self.entries()) == 3 and self.model().get("k2") == [1, 2],
                      what="k1 parked, k2 handled")
        self.fix(p)
        cp = self.replay(script)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn('sequence "k1" [s]: resolved and closed', cp.stdout)
        self.assertEqual(self.model()["k1"], [1, 2, 3])
        self.assertEqual([e["status"] for e in self.entries()], ["RESOLVED"] * 3)
        self.assertFalse(self.sequences()[0]["open"])
        # The stream stops parking k1 at once: the next event is handled live.
        self.insert(("k1", 4, False))
        self.wait_for(lambda: self.model()["k1"] == [1, 2, 3, 4], what="k1 v4 handled live")
        self.assertEqual(len(self.entries()), 3)
        # The same read model as a run without the failure.
        self.assertEqual(self.model(), {"k1": [1, 2, 3, 4], "k2": [1, 2]})
        self.assertEqual(p.stop(), 0)

    def test_letter_shows_its_place_in_the_sequence(self):
        script = self.write()
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, False))
        self.wait_for(lambda: len(self.entries()) == 2, what="head and one parked")
        self.assertEqual(p.stop(), 0)
        fixed = self.script(script_text(self.db_name, False), name="fixed.lua")
        cp = self.replay(fixed, "--sequence", '"k1"', "--log-format", "json")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        reports = []
        for line in cp.stderr.splitlines():
            try:
                msg = json.loads(line).get("msg", "")
            except ValueError:
                continue
            if msg.startswith(REPORT_PREFIX):
                reports.append(json.loads(msg[len(REPORT_PREFIX):]))
        self.assertEqual([(r["v"], r["seq"], r["idx"]) for r in reports],
                         [(1, '"k1"', 0), (2, '"k1"', 1)])
        self.assertEqual(self.model()["k1"], [1, 2])

    def test_failure_in_the_middle_stops_the_sequence_and_keeps_the_rest_behind(self):
        script = self.write()
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, True), ("k1", 3, False))
        self.wait_for(lambda: len(self.entries()) == 3, what="head and two parked")
        self.assertEqual(p.stop(), 0)
        # A script that fixes v1 only: v2 still fails.
        half = self.script(script_text(self.db_name, True,
                                       before="").replace("doc.bad then",
                                                          "doc.bad and doc.v > 1 then"),
                           name="half.lua")
        cp = self.replay(half)
        self.assertEqual(cp.returncode, 3, cp.stdout + cp.stderr)
        self.assertIn('sequence "k1" [s]: left open', cp.stdout)
        self.assertEqual([e["status"] for e in self.entries()], ["RESOLVED", "PENDING", "PENDING"])
        self.assertEqual(self.entries()[1]["reprocessAttempts"], 1)
        self.assertEqual(self.model()["k1"], [1])
        self.assertTrue(self.sequences()[0]["open"])
        # The fixed script finishes it: v2, then v3.
        cp = self.replay(self.script(script_text(self.db_name, False), name="fixed.lua"))
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(self.model()["k1"], [1, 2, 3])
        self.assertFalse(self.sequences()[0]["open"])

    def test_evict_policy_discards_the_failing_entry_and_the_sequence_goes_on(self):
        script = self.write()
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, True), ("k1", 3, False))
        self.wait_for(lambda: len(self.entries()) == 3, what="head and two parked")
        self.assertEqual(p.stop(), 0)
        evict = self.script(script_text(self.db_name, True,
                                        dlq=", enqueue_policy = function() return fw.dlq.evict() end"),
                            name="evict.lua")
        cp = self.replay(evict)
        self.assertEqual(cp.returncode, 3, cp.stdout + cp.stderr)  # two failed (evicted)
        self.assertEqual([e["status"] for e in self.entries()],
                         ["DISCARDED", "DISCARDED", "RESOLVED"])
        self.assertEqual(self.model()["k1"], [3])
        self.assertFalse(self.sequences()[0]["open"])


class RestartAndOverflow(SequencedTestCase):

    def test_restart_rebuilds_the_open_sequences_and_keeps_parking(self):
        script = self.write()
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True))
        self.wait_for(lambda: len(self.entries()) == 1, what="head")
        self.assertEqual(p.stop(), 0)
        p = self.run_fw(script)
        p.wait_open()
        p.wait_log("1 open DLQ sequence(s)")
        self.insert(("k1", 2, False), ("k2", 1, False))
        self.wait_for(lambda: len(self.entries()) == 2 and "k2" in self.model(),
                      what="k1 v2 parked after the restart")
        self.assertNotIn("k1", self.model())
        self.assertEqual(self.entries()[1]["sequenceIndex"], 1)
        self.assertEqual(p.stop(), 0)

    def test_max_sequences_overflow_stops_the_stream_and_a_restart_continues(self):
        script = self.write(dlq=", max_sequences = 3")
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("a", 1, True), ("b", 1, True), ("c", 1, True), ("d", 1, True),
                    ("e", 1, False))
        p.wait_log("dlq overflow: 3 open sequences")
        self.assertEqual(len(self.entries()), 3)
        self.assertEqual(self.model(), {})
        self.assertEqual(p.stop(), 0)
        # Resolved with the fixed script, the run goes on from d: nothing lost.
        fixed = self.script(script_text(self.db_name, False), name="fixed.lua")
        cp = self.replay(fixed)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        p = self.run_fw(fixed)
        p.wait_open()
        self.wait_for(lambda: self.model() == {"a": [1], "b": [1], "c": [1], "d": [1], "e": [1]},
                      what="d and e handled after the restart")
        self.assertEqual(p.stop(), 0)

    def test_max_sequence_size_overflow_stops_the_stream_and_nothing_is_lost(self):
        script = self.write(dlq=", max_sequence_size = 3")
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, False), ("k1", 3, False), ("k1", 4, False),
                    ("k2", 1, False))
        p.wait_log("dlq overflow: sequence \"k1\" holds 3 entries")
        self.assertEqual(len(self.entries()), 3)
        self.assertEqual(p.stop(), 0)
        fixed = self.script(script_text(self.db_name, False), name="fixed.lua")
        self.assertEqual(self.replay(fixed).returncode, 0)
        p = self.run_fw(fixed)
        p.wait_open()
        self.wait_for(lambda: self.model() == {"k1": [1, 2, 3, 4], "k2": [1]},
                      what="k1 v4 and k2 handled after the restart")
        self.assertEqual(p.stop(), 0)


class RaceWithLiveEvents(SequencedTestCase):

    # Each repetition inserts its live events 0, 10, ... 60 ms into the replay (rep % 7): 14
    # repetitions try each delay twice (about 1.3 s each), 7 under the sanitizers (the memory
    # paths are the same at every delay), 50 with FW_CHAOS_LONG=1 (the race's long run).
    REPS = 50 if LONG else 7 if os.environ.get("FW_SANITIZED") else 14

    def test_live_events_during_a_closing_replay_never_overtake_the_sequence(self):
        """A live event of S arriving while a replay closes S is parked behind
        S's entries or handled after them, never before them."""
        live = self.write()
        p = self.run_fw(live)
        p.wait_open()
        # The replay's handler is slow (30 ms of work per replayed entry).
        slow = self.script(script_text(
            self.db_name, False,
            before="if ctx:dead_letter() then local t = os.clock() + 0.03 "
                   "while os.clock() < t do end end"), name="slow.lua")
        parked_total = 0
        for rep in range(self.REPS):
            k = "r%d" % rep
            self.insert((k, 1, True))
            self.wait_for(lambda: len(self.entries(sequenceId='"%s"' % k)) == 1,
                          what="head of %s" % k)
            replay = subprocess.Popen([BINARY, "dlq", "replay", slow, "--uri", self.uri,
                                       "--sequence", '"%s"' % k], env=clean_env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL, text=True)
            # Live events of the same key while the replay runs and closes.
            for v in (2, 3, 4):
                time.sleep(0.01 * (rep % 7))
                self.insert((k, v, False))
            out, err = replay.communicate(timeout=60)
            self.assertEqual(replay.returncode, 0, out + err)
            # Parked events that joined after the replay's last pass (it
            # closed only when none had) are handled by a second replay.
            if any(e["status"] == "PENDING" for e in self.entries(sequenceId='"%s"' % k)):
                self.assertEqual(self.replay(slow, "--sequence", '"%s"' % k).returncode, 0)
            self.wait_for(lambda: len(self.model().get(k, [])) == 4,
                          what="four side effects of %s" % k, timeout=30)
            self.assertEqual(self.model()[k], [1, 2, 3, 4], "side effects of %s" % k)
            parked_total += len(self.entries(sequenceId='"%s"' % k)) - 1
        print("race: %d repetitions, %d live events parked behind a replaying sequence, "
              "%d handled live after its close" % (self.REPS, parked_total,
                                                    3 * self.REPS - parked_total))
        self.assertEqual(p.stop(), 0)


class KillDuringReplay(SequencedTestCase):

    def test_kill_9_during_a_sequence_replay_and_a_rerun_finishes_it_in_order(self):
        script = self.write()
        p = self.run_fw(script)
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, False), ("k1", 3, False))
        self.wait_for(lambda: len(self.entries()) == 3, what="head and two parked")
        self.assertEqual(p.stop(), 0)
        flag = os.path.join(self.tmp.name, "release")
        # v2's replay blocks (before its side effect) until the flag exists.
        stuck = self.script(script_text(
            self.db_name, False,
            before="if doc.v == 2 then while not io.open(%r) do end end" % flag),
            name="stuck.lua")
        replay = subprocess.Popen([BINARY, "dlq", "replay", stuck, "--uri", self.uri,
                                   "--claim-ttl", "1s"], env=clean_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True)
        self.wait_for(lambda: [e["status"] for e in self.entries()] ==
                      ["RESOLVED", "REPROCESSING", "PENDING"], what="v2 being replayed")
        replay.kill()
        replay.communicate(timeout=30)
        self.assertEqual(self.model()["k1"], [1])
        # Once the dead claim expires, a rerun finishes the sequence.
        fixed = self.script(script_text(self.db_name, False), name="fixed.lua")
        self.wait_for(lambda: self.replay(fixed).returncode == 0 and
                      self.sequences()[0]["open"] is False, timeout=30,
                      interval=0.5, what="a rerun to close the sequence")
        self.assertEqual(self.model()["k1"], [1, 2, 3])
        self.assertEqual([e["status"] for e in self.entries()], ["RESOLVED"] * 3)


class BadInput(SequencedTestCase):

    def check(self, body):
        return run_cli(["check", self.script(body)])

    def test_declaration_errors_name_the_setting(self):
        cp = self.check('fw.stream { name = "s", database = "shop", collection = "o", on_insert = function() end, '
                        'dlq = { sequenced = true, sequence_key = "customer_id" } }')
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("dlq.sequence_key", cp.stderr)
        self.assertIn("expected a function(ctx)", cp.stderr)
        for key in ("max_sequences", "max_sequence_size"):
            cp = self.check('fw.stream { name = "s", database = "shop", collection = "o", on_insert = function() end, '
                            'dlq = { sequenced = true, %s = 0 } }' % key)
            self.assertNotEqual(cp.returncode, 0)
            self.assertIn("dlq.%s" % key, cp.stderr)
        cp = self.check('fw.stream { name = "s", database = "shop", collection = "o", on_insert = function() end, '
                        'dlq = { sequenced = "yes" } }')
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("dlq.sequenced", cp.stderr)
        cp = self.check('fw.stream { name = "s", database = "shop", collection = "o", on_insert = function() end, '
                        'dlq = { sequenced = true, max_sequences = 8 } }')
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("max_sequences 8", cp.stdout)

    def test_a_key_function_that_raises_or_returns_nil_fails_the_event_by_its_policy(self):
        key = ("function(ctx) local d = ctx:full_document() "
               "if d.raise then error('no key here') end return d.k end")
        body = script_text(self.db_name, True).replace(
            "function(ctx) return ctx:full_document().k end", key)
        p = self.run_fw(self.script(body))
        p.wait_open()
        self.insert(("k1", 1, True))
        self.wait_for(lambda: len(self.entries()) == 1, what="k1 open")
        self.db.orders.insert_one({"_id": 100, "k": "k1", "v": 2, "raise": True})
        self.db.orders.insert_one({"_id": 101, "v": 3})  # k is nil
        self.insert(("k2", 1, False))
        self.wait_for(lambda: "k2" in self.model(), what="k2 handled")
        by_id = {e["fullDocument"]["_id"]: e for e in self.entries()}
        self.assertIn("dlq.sequence_key failed: no key here", by_id[100]["error"]["message"])
        self.assertEqual(by_id[100]["error"]["type"], "RuntimeError")
        self.assertIn("dlq.sequence_key returned nil", by_id[101]["error"]["message"])
        self.assertEqual(by_id[101]["error"]["type"], "NilError")
        for i in (100, 101):
            self.assertNotIn("sequenceId", by_id[i])
        self.assertEqual(p.stop(), 0)


class ReprocessInsideRun(SequencedTestCase):

    def test_automatic_rounds_replay_whole_sequences_and_the_stream_stops_parking(self):
        # The handler fails while the "switch" document says broken; the
        # stream's own dlq.reprocess round replays the sequence once it is
        # flipped, and the closed key is handled live right away.
        gate = ('local sw = fw.mongo.collection("%s", "switch"):find_one({ _id = 1 }) '
                'if doc.bad and sw and sw.broken then error(fw.error("Validation", "broken")) end'
                % self.db_name)
        body = script_text(self.db_name, False, before=gate,
                           dlq=', reprocess = { every = "1s" }')
        self.db.switch.insert_one({"_id": 1, "broken": True})
        p = self.run_fw(self.script(body))
        p.wait_open()
        self.insert(("k1", 1, True), ("k1", 2, False), ("k2", 1, False))
        self.wait_for(lambda: len(self.entries()) == 2 and "k2" in self.model(),
                      what="k1 open with one parked event")
        self.db.switch.update_one({"_id": 1}, {"$set": {"broken": False}})
        self.wait_for(lambda: self.model().get("k1") == [1, 2], timeout=30,
                      what="the round to replay k1's sequence in order")
        p.wait_log('DLQ sequence "k1" resolved and closed')
        self.insert(("k1", 3, False))
        self.wait_for(lambda: self.model().get("k1") == [1, 2, 3], what="k1 v3 handled live")
        self.assertEqual(len(self.entries()), 2)
        self.assertEqual(p.stop(), 0)


class DefaultKeyParking(SequencedTestCase):

    def test_many_events_parked_behind_the_default_key_leave_the_lua_state_sound(self):
        # The default key (the documentKey) with a dlq table but no sequence_key: each event
        # looked up behind an open sequence left one value on the Lua stack, and 400 parked
        # updates in a row wrote past its end (heap corruption: "malloc(): ... corrupted").
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "orders", dlq = { sequenced = true },
              on_change = function(ctx)
                local d = ctx:full_document()
                report({ id = d and d._id or nil })
                if d and d.bad then error(fw.error("Validation", "bad")) end
              end }
            """))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1, "bad": True})
        self.wait_for(lambda: self.sequences(), what="the open sequence")
        for i in range(400):
            self.db.orders.update_one({"_id": 1}, {"$set": {"n": i}})
        self.db.orders.insert_one({"_id": 2})
        # Each park costs a few round trips that grow with the sequence (about 20 ms an event
        # here, three times that on a loaded machine): wait while the entries keep coming.
        last, deadline = -1, time.monotonic() + 30
        while not any(r.get("id") == 2 for r in p.reports()):
            n = self.db["_fw_dlq"].count_documents({})
            if n != last:
                last, deadline = n, time.monotonic() + 30
            self.assertLess(time.monotonic(), deadline, "doc 2 handled (parking stalled at "
                            "%d entries)" % n)
            time.sleep(0.1)
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 401,
                      what="400 parked entries")
        self.assertEqual(p.stop(), 0)
        self.assertIn("parked=400", " ".join(p.messages()))


if __name__ == "__main__":
    unittest.main()
