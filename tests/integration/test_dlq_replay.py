"""Replaying dead letters (issue 12): `flowwarden dlq replay` and run's
automatic rounds (dlq.reprocess): claims, outcomes, the enqueue policy,
ctx:dead_letter(), --dry-run, --rate, exit codes."""
import datetime
import signal
import subprocess
import unittest
import uuid

from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from bson.timestamp import Timestamp

from fwtest import BINARY, StandInTestCase, clean_env, reports_of, run_cli

RAW = CodecOptions(document_class=RawBSONDocument)

# A handler counting its side effects per key with fw.mongo and reporting
# what ctx:dead_letter() showed. %(db)s is the test's database.
FIXED = """
local function effect(ctx)
  local key = ctx:document_key()._id
  fw.mongo.collection("%(db)s", "effects"):update_one({ _id = key }, { ["$inc"] = { n = 1 } },
    { upsert = true })
  local l = ctx:dead_letter()
  report({ key = key, attempt = ctx:attempt_number(), has_doc = ctx:full_document() ~= nil,
           letter = l and { id = l.id, cause = plain(l.cause), reprocess_attempts = l.reprocess_attempts,
                            retries = l.diagnostics.retries, enqueued_at = tostring(l.enqueued_at),
                            last_touched = l.last_touched ~= nil } or "nil" })
  %(extra)s
end
fw.stream { name = "s", collection = "orders", dlq = %(dlq)s, on_insert = effect %(more)s }
"""


def fixed(db, dlq="true", extra="", more=""):
    return FIXED % {"db": db, "dlq": dlq, "extra": extra, "more": more}


class ReplayTestCase(StandInTestCase):

    def entry(self, i, op="INSERT", stream="s", **over):
        """A DLQ entry as run writes it, for event i of orders."""
        now = datetime.datetime.utcnow().replace(microsecond=0)
        e = {"_id": str(uuid.uuid4()), "streamName": stream, "operationType": op,
             "documentKey": {"_id": i}, "fullDocument": {"_id": i, "n": i},
             "resumeToken": {"_data": "82%08X%08X" % (1700000000, i + 1)},
             "error": {"type": "Http.Timeout", "message": "slow", "stackTrace": ""},
             "attempts": 1, "status": "PENDING", "firstAttemptAt": now, "lastAttemptAt": now,
             "createdAt": now + datetime.timedelta(milliseconds=i), "expiresAt": None,
             "metadata": {}, "eventId": "82%08X%08X" % (1700000000, i + 1),
             "ns": {"db": self.db_name, "coll": "orders"},
             "clusterTime": Timestamp(1700000000, i + 1), "scriptVersion": "000000000000",
             "lastTouched": now, "reprocessAttempts": 0, "diagnostics": {}}
        e.update(over)
        return e

    def fill(self, n, **over):
        entries = [self.entry(i, **over) for i in range(n)]
        self.db["_fw_dlq"].insert_many(entries)
        return entries

    def replay(self, body, *args, timeout=60):
        script = self.script(body, "fixed.lua")
        return run_cli(["dlq", "replay", script, "--uri", self.uri, "--log-format", "json"]
                       + list(args), timeout=timeout)

    def popen_replay(self, body, *args, name="fixed.lua"):
        script = self.script(body, name)
        return subprocess.Popen([BINARY, "dlq", "replay", script, "--uri", self.uri,
                                 "--log-format", "json"] + list(args),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=clean_env(), stdin=subprocess.DEVNULL)

    def entries(self):
        return {e["_id"]: e for e in self.db["_fw_dlq"].find()}

    def effects(self):
        return {e["_id"]: e["n"] for e in self.db.effects.find()}

    def raw_collection(self):
        return sorted((bytes(d.raw) for d in
                       self.db.get_collection("_fw_dlq", codec_options=RAW).find()))


class ReplayFromARealFailure(ReplayTestCase):

    def test_a_fixed_script_resolves_each_entry_once_and_sees_its_letter(self):
        failing = self.script("""
fw.stream { name = "s", collection = "orders", dlq = true,
  on_insert = function(ctx) error(fw.error("Payment.Unavailable", "gateway down")) end }
""")
        p = self.run_fw(failing)
        p.wait_open()
        self.db.orders.insert_many([{"_id": k} for k in (1, 2, 3)])
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 3, what="3 DLQ entries")
        self.assertEqual(p.stop(), 0)
        before = self.entries()

        cp = self.replay(fixed(self.db_name))
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("replaying 3 entries", cp.stdout)
        self.assertIn("summary: resolved=3 skipped=0 requeued=0 evicted=0 errors=0", cp.stdout)
        self.assertEqual(self.effects(), {1: 1, 2: 1, 3: 1})
        reports = reports_of(cp)
        self.assertEqual([r["key"] for r in reports], [1, 2, 3])  # oldest clusterTime first
        by_key = {e["documentKey"]["_id"]: e for e in before.values()}
        for r in reports:
            letter = r["letter"]
            self.assertEqual(r["attempt"], 1)
            self.assertTrue(r["has_doc"])
            self.assertEqual(letter["id"], by_key[r["key"]]["_id"])
            self.assertEqual(letter["cause"], {"type": "Payment.Unavailable",
                                               "message": "gateway down"})
            self.assertEqual(letter["reprocess_attempts"], 0)
            self.assertTrue(letter["last_touched"])
            self.assertRegex(letter["enqueued_at"], r"^\d{4}-\d\d-\d\dT")
        for e in self.entries().values():
            self.assertEqual(e["status"], "RESOLVED")
            self.assertEqual(e["resolution"], "REPLAYED")
            self.assertIn("resolvedAt", e)
            self.assertNotIn("claimedBy", e)
            self.assertNotIn("claimedUntil", e)
            last = e["history"][-1]
            self.assertEqual((last["action"], last["result"]), ("resolved", "ok"))
            self.assertRegex(last["actor"], r"^.+:\d+$")

        # Nothing left to replay: the side effects stay at one per entry.
        again = self.replay(fixed(self.db_name))
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertIn("replaying 0 entries", again.stdout)
        self.assertEqual(self.effects(), {1: 1, 2: 1, 3: 1})

        # A live event: ctx:dead_letter() is nil.
        live = self.run_fw(self.script(fixed(self.db_name), "live.lua"))
        live.wait_open()
        self.db.orders.insert_one({"_id": 4})
        self.assertEqual(live.wait_reports(1)[0]["letter"], "nil")
        self.assertEqual(live.stop(), 0)

    def test_automatic_reprocessing_resolves_entries_after_a_sighup_fix(self):
        reprocess = '{ reprocess = { every = "1s", max_attempts = 100 } }'
        path = self.script(fixed(self.db_name, dlq=reprocess,
                                 extra='error(fw.error("Payment.Unavailable", "down"))'))
        p = self.run_fw(path)
        p.wait_open()
        self.db.orders.insert_many([{"_id": k} for k in (1, 2)])
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({"reprocessAttempts": {"$gte": 1}})
                      == 2, what="failed automatic rounds")
        self.assertTrue(all(e["status"] in ("PENDING", "REPROCESSING")
                            for e in self.entries().values()))
        with open(path, "w") as f:
            from fwtest import PRELUDE
            f.write(PRELUDE + fixed(self.db_name, dlq=reprocess))
        p.proc.send_signal(signal.SIGHUP)
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({"status": "RESOLVED"}) == 2,
                      what="entries resolved by an automatic round")
        effects = self.effects()
        self.assertEqual(p.stop(), 0)
        # every failed round counted one effect before raising; the fix one more
        self.assertEqual(set(effects), {1, 2})
        self.assertGreaterEqual(p.count_log("dlq.reprocess round"), 2)
        for e in self.entries().values():
            self.assertEqual(e["history"][-1]["action"], "resolved")
            self.assertEqual(e["history"][-2]["action"], "requeued")


class ReplayOutcomes(ReplayTestCase):

    def test_fw_skip_resolves_as_skipped(self):
        self.fill(2)
        cp = self.replay(fixed(self.db_name, extra='error("still broken")',
                               more=", on_error = function() return fw.SKIP end"))
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("summary: resolved=0 skipped=2", cp.stdout)
        for e in self.entries().values():
            self.assertEqual((e["status"], e["resolution"]), ("RESOLVED", "SKIPPED"))
            self.assertEqual(e["history"][-1]["result"], "skipped")

    def test_the_enqueue_policy_requeues_with_diagnostics_then_evicts(self):
        [e] = self.fill(1)
        policy = """{ enqueue_policy = function(letter, err)
            local n = (letter.diagnostics.retries or 0) + 1
            if n < 3 then return fw.dlq.requeue { diagnostics = { retries = n } } end
            return fw.dlq.evict()
          end }"""
        body = fixed(self.db_name, dlq=policy, extra='error(fw.error("Http.Timeout", "still slow"))')
        for n in (1, 2):
            cp = self.replay(body)
            self.assertEqual(cp.returncode, 3, cp.stdout + cp.stderr)
            self.assertIn("requeued=1", cp.stdout)
            got = self.db["_fw_dlq"].find_one({"_id": e["_id"]})
            self.assertEqual(got["status"], "PENDING")
            self.assertEqual(got["diagnostics"], {"retries": n})
            self.assertEqual(got["reprocessAttempts"], n)
            self.assertEqual(got["lastReprocessError"], {"type": "Http.Timeout",
                                                         "message": "still slow"})
            self.assertIn("lastReprocessAt", got)
            self.assertEqual(got["history"][-1]["action"], "requeued")
            self.assertEqual(reports_of(cp)[0]["letter"].get("retries"), None if n == 1 else n - 1)
        cp = self.replay(body)
        self.assertEqual(cp.returncode, 3, cp.stdout + cp.stderr)
        self.assertIn("evicted=1", cp.stdout)
        got = self.db["_fw_dlq"].find_one({"_id": e["_id"]})
        self.assertEqual(got["status"], "DISCARDED")
        self.assertEqual(got["discardReason"], "evicted by enqueue policy")
        self.assertIn("discardedAt", got)
        self.assertEqual(got["reprocessAttempts"], 3)
        self.assertEqual(got["history"][-1]["action"], "discarded")
        self.assertEqual(self.effects(), {0: 3})

    def test_retries_follow_the_stream_policy_and_no_retry_makes_one_attempt(self):
        self.fill(1)
        body = fixed(self.db_name, extra='error(fw.error("Http.Timeout", "slow"))',
                     more=', retry = { max_attempts = 3, initial_delay = "10ms", jitter = false }')
        cp = self.replay(body, "--no-retry")
        self.assertEqual([r["attempt"] for r in reports_of(cp)], [1])
        cp = self.replay(body)
        self.assertEqual([r["attempt"] for r in reports_of(cp)], [1, 2, 3])
        self.assertIn("after 3 attempt(s)", cp.stdout)

    def test_an_entry_without_a_handler_stays_pending_and_nonsense_is_reported(self):
        good = self.fill(1)[0]
        delete = self.entry(5, op="DELETE", fullDocument=None)
        no_token = self.entry(6)
        del no_token["resumeToken"]
        bad_op = self.entry(7, op="FROBNICATE")
        self.db["_fw_dlq"].insert_many([delete, no_token, bad_op])
        raw_before = {d["_id"]: bytes(d.raw) for d in
                      self.db.get_collection("_fw_dlq", codec_options=RAW).find()}
        cp = self.replay(fixed(self.db_name))
        self.assertEqual(cp.returncode, 3, cp.stdout + cp.stderr)
        out = cp.stdout
        self.assertIn("%s [s]: the current script has no handler for delete; left PENDING"
                      % delete["_id"], out)
        self.assertIn("%s [s]: cannot be replayed: resumeToken is missing or not a document; "
                      "left as it is" % no_token["_id"], out)
        self.assertIn('%s [s]: cannot be replayed: operationType "FROBNICATE" is not a change '
                      "event type; left as it is" % bad_op["_id"], out)
        self.assertIn("summary: resolved=1 skipped=0 requeued=0 evicted=0 errors=3", out)
        raw_after = {d["_id"]: bytes(d.raw) for d in
                     self.db.get_collection("_fw_dlq", codec_options=RAW).find()}
        for e in (delete, no_token, bad_op):
            self.assertEqual(raw_after[e["_id"]], raw_before[e["_id"]])
        self.assertEqual(self.db["_fw_dlq"].find_one({"_id": good["_id"]})["status"], "RESOLVED")

    def test_a_field_that_was_not_stored_is_named(self):
        self.fill(1, fullDocument=None, omitted=["fullDocumentBeforeChange"])
        cp = self.replay(fixed(self.db_name))
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("(fullDocumentBeforeChange not stored; fullDocument not stored (the handler "
                      "can read the current document with fw.mongo))", cp.stdout)
        self.assertFalse(reports_of(cp)[0]["has_doc"])


class ReplayControls(ReplayTestCase):

    def test_dry_run_leaves_the_collection_byte_identical(self):
        self.fill(3)
        before = self.raw_collection()
        cp = self.replay(fixed(self.db_name), "--dry-run")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("dry run: would replay 3 entries", cp.stdout)
        self.assertEqual(cp.stdout.count("would run the insert handler"), 3)
        self.assertIn("dry run: 3 would run, 0 would not", cp.stdout)
        self.assertEqual(self.raw_collection(), before)
        self.assertEqual(self.effects(), {})

    def test_rate_caps_entries_per_second(self):
        self.fill(60)
        cp = self.replay(fixed(self.db_name), "--rate", "20")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertGreaterEqual(cp.elapsed, 2.5)
        self.assertEqual(len(self.effects()), 60)

    def test_filters_select_entries(self):
        entries = self.fill(4)
        cp = self.replay(fixed(self.db_name), "--id", entries[2]["_id"])
        self.assertIn("replaying 1 entry", cp.stdout)
        self.assertEqual(self.effects(), {2: 1})
        cp = self.replay(fixed(self.db_name), "--limit", "2")
        self.assertEqual(self.effects(), {0: 1, 1: 1, 2: 1})

    def test_a_wrong_stream_or_database_is_said_not_replayed_as_nothing(self):
        script = self.script(
            'fw.stream { name = "orders", collection = "orders", dlq = true,\n'
            '  on_insert = function() end }\n'
            'fw.stream { name = "payments", collection = "payments", dlq = true,\n'
            '  on_insert = function() end }\n', "two.lua")
        self.db["_fw_dlq"].insert_one(self.entry(1, stream="orders"))
        cp = run_cli(["dlq", "replay", script, "--uri", self.uri, "--stream", "ordrs"])
        self.assertEqual(cp.returncode, 1, cp.stdout + cp.stderr)
        self.assertIn("--stream ordrs: no such stream with a dead-letter queue (did you mean "
                      "orders?); its streams are: orders, payments", cp.stderr)
        wrong = self.uri.replace("/%s?" % self.db_name, "/%s_typo?" % self.db_name)
        self.assertNotEqual(wrong, self.uri)
        cp = run_cli(["dlq", "replay", script, "--uri", wrong])
        self.assertEqual(cp.returncode, 1, cp.stdout + cp.stderr)
        self.assertIn("its DLQ collection %s_typo._fw_dlq does not exist" % self.db_name,
                      cp.stderr)
        self.assertNotIn("replaying", cp.stdout)
        cp = run_cli(["dlq", "replay", script, "--uri", self.uri, "--dry-run"])
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("would replay 1 entry", cp.stdout)

    def test_exit_codes_for_bad_usage_and_connection_errors(self):
        script = self.script(fixed(self.db_name), "fixed.lua")
        for args, text in (
                (["--rate", "0"], '--rate: expected a number of entries per second > 0, got "0"'),
                (["--claim-ttl", "soon"], '--claim-ttl: invalid duration "soon" (expected a '
                 'number followed by ms, s, m, h, d or w, e.g. "500ms")'),
                (["--claim-ttl", "0s"], '--claim-ttl: must be greater than zero, got "0s"'),
                (["--status", "LOST"], 'unknown status "LOST"'),
                (["--stream", "nope"], "--stream nope: no such stream with a dead-letter queue")):
            cp = run_cli(["dlq", "replay", script, "--uri", self.uri] + args)
            self.assertEqual(cp.returncode, 1, args)
            self.assertIn(text, cp.stderr)
        cp = run_cli(["dlq", "replay", script, "--uri",
                      "mongodb://127.0.0.1:9/x?replicaSet=rs0&serverSelectionTimeoutMS=300"])
        self.assertEqual(cp.returncode, 1)
        self.assertIn("cannot connect to mongodb://127.0.0.1:9/", cp.stderr)


class ReplayClaims(ReplayTestCase):

    SLOW = 'local t = os.clock() while os.clock() - t < 0.05 do end'

    def test_two_concurrent_replays_process_each_entry_once(self):
        self.fill(30)
        body = fixed(self.db_name, extra=self.SLOW)
        a = self.popen_replay(body, name="a.lua")
        b = self.popen_replay(body, name="b.lua")
        out_a, _ = a.communicate(timeout=60)
        out_b, _ = b.communicate(timeout=60)
        self.assertEqual((a.returncode, b.returncode), (0, 0), out_a + out_b)
        self.assertEqual(self.effects(), {i: 1 for i in range(30)})
        self.assertTrue(all(e["status"] == "RESOLVED" for e in self.entries().values()))
        resolved = sum(int(out.split("summary: resolved=")[1].split()[0]) for out in (out_a, out_b))
        self.assertEqual(resolved, 30)

    def test_a_replay_killed_mid_way_is_completed_after_the_claim_ttl(self):
        self.fill(20)
        body = fixed(self.db_name, extra=self.SLOW)
        p = self.popen_replay(body, "--claim-ttl", "1s")
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({"status": "RESOLVED"}) >= 5,
                      what="some entries resolved")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        p.stdout.close()
        p.stderr.close()
        left = self.db["_fw_dlq"].count_documents({"status": {"$ne": "RESOLVED"}})
        self.assertGreater(left, 0)
        # The killed replay's claims expire (each 1 s after it was last set, on this machine's
        # clock, as the next replay reads it).
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents(
            {"status": {"$ne": "RESOLVED"},
             "claimedUntil": {"$gte": datetime.datetime.utcnow()}}) == 0,
            10, "the killed replay's claims to expire")
        cp = self.replay(body, "--claim-ttl", "1s")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertTrue(all(e["status"] == "RESOLVED" for e in self.entries().values()))
        effects = self.effects()
        self.assertEqual(set(effects), set(range(20)))  # nothing lost
        # only the entry being handled when the kill came may have run twice
        self.assertLessEqual(sum(n - 1 for n in effects.values()), 1)


    def test_a_handler_longer_than_the_claim_ttl_keeps_its_claim(self):
        """Issue 25 section 5: the claim is extended while the handler runs,
        not only before each attempt, so a second replay started after the
        TTL has passed does not take the entry."""
        self.fill(1)
        gate = (
            'local gate = fw.mongo.collection("%s", "gate")\n'
            '  local t0 = os.time()\n'
            '  while not gate:find_one({ _id = "go" }) and os.time() - t0 < 30 do\n'
            '    local t = os.clock() while os.clock() - t < 0.02 do end\n'
            '  end' % self.db_name)
        a = self.popen_replay(fixed(self.db_name, extra=gate), "--claim-ttl", "1s", name="a.lua")
        try:
            self.wait_for(lambda: self.db["_fw_dlq"].count_documents(
                {"status": "REPROCESSING"}) == 1, what="replay a's claim")
            first = self.db["_fw_dlq"].find_one()["claimedUntil"]
            # Past the first claim's end by a whole TTL: only an extension keeps it.
            self.wait_for(lambda: datetime.datetime.utcnow() > first + datetime.timedelta(
                seconds=2), what="two TTLs after the claim", timeout=10)
            entry = self.db["_fw_dlq"].find_one()
            self.assertEqual(entry["status"], "REPROCESSING")
            self.assertGreater(entry["claimedUntil"], first)
            b = self.replay(fixed(self.db_name), "--claim-ttl", "1s")
            self.assertEqual(b.returncode, 0, b.stdout + b.stderr)
            self.assertNotIn("resolved=1", b.stdout)
            self.assertEqual(self.effects(), {0: 1})  # a's, before its gate; b ran none
        finally:
            self.db.gate.insert_one({"_id": "go"})
        out_a, err_a = a.communicate(timeout=60)
        self.assertEqual(a.returncode, 0, out_a + err_a)
        self.assertIn("summary: resolved=1 ", out_a)
        self.assertEqual(self.effects(), {0: 1})
        self.assertEqual(self.db["_fw_dlq"].find_one()["status"], "RESOLVED")


if __name__ == "__main__":
    unittest.main()
