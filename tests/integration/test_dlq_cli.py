"""`flowwarden dlq`: list, show, stats, discard, purge, export and import
against entries shaped like the runtime's (and one the runtime wrote), every
filter, the confirmation rule, a lossless export/import round trip, each
bad-input message, and entries edited by hand into nonsense."""
import datetime
import json
import os
import pty
import re
import subprocess
import uuid

from bson import json_util
from bson.binary import Binary
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from bson.timestamp import Timestamp

from fwtest import BINARY, ConnectionProbe, StandInTestCase, clean_env, run_cli
from dlqtest import MISBEHAVE, lua_stream

RAW = CodecOptions(document_class=RawBSONDocument)
UTC = datetime.timezone.utc
SECRET = "alice@example.com"
DOC_FIELDS = ("fullDocument", "fullDocumentBeforeChange", "updateDescription")

SCRIPT = """
fw.stream { name = "orders", collection = "orders", dlq = true, on_insert = function() end }
fw.stream { name = "payments", collection = "payments", dlq = true, on_insert = function() end }
fw.stream { name = "audit", collection = "audit", dlq = { collection = "audit_dlq" },
            on_insert = function() end }
fw.stream { name = "nodlq", collection = "x", on_insert = function() end }
"""


def now():
    return datetime.datetime.now(UTC).replace(microsecond=0)


def entry(stream="orders", status="PENDING", etype="Http.Timeout", age_h=1, attempts=3, **extra):
    """A DLQ entry as the runtime writes it (dlq_entry.c), with issue 12's fields."""
    created = now() - datetime.timedelta(hours=age_h)
    oid = ObjectId()
    e = {
        "_id": str(uuid.uuid4()), "streamName": stream, "operationType": "INSERT",
        "documentKey": {"_id": oid},
        "fullDocument": {"_id": oid, "email": SECRET, "total": Decimal128("12.50")},
        "resumeToken": {"_data": "826B0001"},
        "error": {"type": etype, "message": "failed with " + etype,
                  "stackTrace": "stack traceback:\n\t[C]: in ?"},
        "attempts": attempts, "status": status, "firstAttemptAt": created,
        "lastAttemptAt": created, "createdAt": created,
        "expiresAt": created + datetime.timedelta(days=30), "metadata": {},
        "eventId": "826B0001", "ns": {"db": "shop", "coll": stream},
        "clusterTime": Timestamp(1700000000, 1), "scriptVersion": "0123456789ab",
    }
    e.update(extra)
    return e


def loads(text):
    """One line of relaxed Extended JSON, with naive datetimes as pymongo reads them."""
    return json_util.loads(text, json_options=json_util.JSONOptions(tz_aware=False))


def rows(text):
    """The list table as dicts keyed by header."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(header, re.split(r"\s{2,}", ln.strip()))) for ln in lines[1:]]


class DlqCliTestCase(StandInTestCase):

    def setUp(self):
        super().setUp()
        self.path = self.script(SCRIPT)

    def dlq(self, *args, uri=None, script=None):
        verb, rest = args[0], list(args[1:])
        return run_cli(["dlq", verb, script or self.path, "--uri", uri or self.uri] + rest)

    def coll(self, name="_fw_dlq"):
        return self.db.get_collection(name)

    def raw(self, name="_fw_dlq"):
        """Every document as raw BSON bytes, by _id."""
        return {d["_id"]: d.raw for d in self.db.get_collection(name, codec_options=RAW).find()}

    def insert(self, *entries, name="_fw_dlq"):
        self.coll(name).insert_many([dict(e) for e in entries])
        return entries

    def assert_fails(self, cp, message):
        self.assertEqual(cp.returncode, 1, cp.stdout + cp.stderr)
        self.assertIn(message, cp.stderr)


class ListShowStats(DlqCliTestCase):

    def test_list_table_shows_each_entry_with_its_figures(self):
        a = entry(age_h=3, attempts=3)
        b = entry(stream="payments", etype="Validation", age_h=1, attempts=1,
                  status="RESOLVED", reprocessAttempts=2)
        c = entry(stream="audit", etype="NilError", age_h=50)
        self.insert(a, b)
        self.insert(c, name="audit_dlq")
        cp = self.dlq("list")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        got = {r["ID"]: r for r in rows(cp.stdout)}
        self.assertEqual(set(got), {a["_id"], b["_id"], c["_id"]})
        self.assertEqual(got[a["_id"]], {
            "ID": a["_id"], "STREAM": "orders", "OPERATION": "INSERT",
            "DOCUMENT KEY": str(a["documentKey"]["_id"]), "ERROR TYPE": "Http.Timeout",
            "ATTEMPTS": "3", "REPROCESSED": "0", "AGE": "3h00m", "STATUS": "PENDING"})
        self.assertEqual(got[b["_id"]]["REPROCESSED"], "2")
        self.assertEqual(got[b["_id"]]["STATUS"], "RESOLVED")
        self.assertEqual(got[c["_id"]]["AGE"], "2d02h")
        # Oldest first within a collection.
        ids = [r["ID"] for r in rows(cp.stdout)]
        self.assertLess(ids.index(a["_id"]), ids.index(b["_id"]))

    def test_list_json_is_each_entry_without_its_documents(self):
        a, b = self.insert(entry(age_h=2), entry(stream="payments", age_h=1))
        cp = self.dlq("list", "--json")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        lines = [loads(ln) for ln in cp.stdout.splitlines()]
        self.assertEqual([x["_id"] for x in lines], [a["_id"], b["_id"]])
        for line in lines:
            stored = self.coll().find_one({"_id": line["_id"]})
            for f in DOC_FIELDS:
                stored.pop(f, None)
            self.assertEqual(line, stored)

    def test_no_document_contents_without_documents(self):
        e = entry(fullDocumentBeforeChange={"email": SECRET},
                  updateDescription={"updatedFields": {"email": SECRET}})
        self.insert(e)
        for args in (["list"], ["list", "--json"], ["show", e["_id"]],
                     ["show", e["_id"], "--json"]):
            cp = self.dlq(*args)
            self.assertEqual(cp.returncode, 0, cp.stderr)
            self.assertNotIn(SECRET, cp.stdout, args)
            self.assertNotIn("alice", cp.stdout + cp.stderr, args)
        shown = self.dlq("show", e["_id"]).stdout
        for f in DOC_FIELDS:
            self.assertRegex(shown, r"(?m)^%s\s+\(hidden: --documents shows it\)$" % f)
        with_docs = self.dlq("show", e["_id"], "--json", "--documents")
        self.assertEqual(loads(with_docs.stdout), self.coll().find_one())
        self.assertIn(SECRET, self.dlq("list", "--json", "--documents").stdout)
        self.assertIn(SECRET, self.dlq("show", e["_id"], "--documents").stdout)

    def test_show_prints_the_whole_entry(self):
        e = entry(history=[{"at": now(), "action": "replayed", "actor": "cli:a@b",
                            "result": "failed"}])
        self.insert(e)
        cp = self.dlq("show", e["_id"])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        for key in e:
            if key != "error":
                self.assertRegex(cp.stdout, r"(?m)^%s\b" % key)
        self.assertRegex(cp.stdout, r"(?m)^error\.type\s+Http\.Timeout$")
        self.assertRegex(cp.stdout, r"(?m)^error\.message\s+failed with Http\.Timeout$")
        self.assertIn('"action" : "replayed"', cp.stdout)
        self.assertRegex(cp.stdout, r"(?m)^createdAt\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$")
        js = self.dlq("show", e["_id"], "--json")
        stored = self.coll().find_one()
        for f in DOC_FIELDS:
            stored.pop(f, None)
        self.assertEqual(loads(js.stdout), stored)

    def test_show_and_id_take_the_event_id_a_log_line_names(self):
        e = entry(eventId="826B00AA", resumeToken={"_data": "826B00AA"})
        other = entry(etype="Http.BadRequest", eventId="826B00BB",
                      resumeToken={"_data": "826B00BB"})
        self.insert(e, other)
        by_event = self.dlq("show", e["eventId"], "--json")
        self.assertEqual(by_event.returncode, 0, by_event.stderr)
        self.assertEqual(loads(by_event.stdout)["_id"], e["_id"])
        listed = self.dlq("list", "--id", other["eventId"], "--json")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual([loads(ln)["_id"] for ln in listed.stdout.splitlines()], [other["_id"]])
        both = self.dlq("list", "--id", e["_id"], "--id", other["eventId"], "--json")
        self.assertEqual(sorted(loads(ln)["_id"] for ln in both.stdout.splitlines()),
                         sorted([e["_id"], other["_id"]]))

    def test_the_read_verbs_need_none_of_the_scripts_secrets(self):
        path = self.script(
            'local hook = fw.env("HOOK_URL") .. "/orders"\n'
            'local token = fw.env("HOOK_TOKEN")\n'
            'fw.stream { name = "orders", collection = "orders", dlq = true,\n'
            '  on_insert = function() return hook .. token end }\n', name="hook.lua")
        e = self.insert(entry())[0]
        for args in (["list"], ["show", e["_id"]], ["stats"], ["export"]):
            cp = self.dlq(*args, script=path)
            self.assertEqual(cp.returncode, 0, (args, cp.stderr))
            self.assertNotIn("HOOK_URL", cp.stderr)
        self.assertIn(e["_id"], self.dlq("list", script=path).stdout)
        checked = run_cli(["check", path])
        self.assertNotEqual(checked.returncode, 0)
        self.assertIn("fw.env: environment variable HOOK_URL is not set", checked.stderr)

    def test_stats_counts_by_stream_status_and_error_type(self):
        self.insert(entry(age_h=5), entry(etype="Http.BadRequest", age_h=2),
                    entry(stream="payments", status="RESOLVED", age_h=9),
                    entry(stream="payments", status="DISCARDED", etype="Validation"))
        self.insert(entry(stream="audit", etype="NilError", age_h=1), name="audit_dlq")
        cp = self.dlq("stats", "--json")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        stats = json.loads(cp.stdout)
        self.assertEqual(stats["total"], 5)
        self.assertEqual(stats["by_stream"], {"orders": 2, "payments": 2, "audit": 1})
        self.assertEqual(stats["by_status"], {"PENDING": 3, "RESOLVED": 1, "DISCARDED": 1})
        self.assertEqual(stats["by_error_type"], {"Http.Timeout": 2, "Http.BadRequest": 1,
                                                  "Validation": 1, "NilError": 1})
        # The oldest PENDING is 5 h old (the RESOLVED one, 9 h, does not count).
        self.assertAlmostEqual(stats["oldest_pending_age_s"], 5 * 3600, delta=30)
        self.assertEqual(list(stats), ["total", "by_stream", "by_status", "by_error_type",
                                       "oldest_pending_age_s"])
        table = self.dlq("stats").stdout
        self.assertIn("entries: 5", table)
        self.assertRegex(table, r"oldest PENDING: 5h00m ago \(1800\d s\)")
        self.assertRegex(table, r"(?m)^payments\s+2$")
        self.assertRegex(table, r"(?m)^Http\.BadRequest\s+1$")
        only = json.loads(self.dlq("stats", "--json", "--stream", "audit").stdout)
        self.assertEqual(only["total"], 1)
        self.assertEqual(only["by_stream"], {"audit": 1})

    def test_stats_of_an_empty_dlq(self):
        stats = json.loads(self.dlq("stats", "--json").stdout)
        self.assertEqual(stats, {"total": 0, "by_stream": {}, "by_status": {},
                                 "by_error_type": {}, "oldest_pending_age_s": None})

    def test_an_entry_the_runtime_wrote(self):
        path = self.script(MISBEHAVE + lua_stream(dlq="true"), name="real.lua")
        p = self.run_fw(path)
        p.wait_open()
        self.db.orders.insert_one({"_id": 7, "fail": "Payment.Declined", "email": SECRET})
        self.wait_for(lambda: self.coll().count_documents({}) == 1, what="the DLQ entry")
        p.stop()
        stored = self.coll().find_one()
        got = rows(self.dlq("list", script=path).stdout)
        self.assertEqual(got[0]["ID"], stored["_id"])
        self.assertEqual(got[0]["STREAM"], "s")
        self.assertEqual(got[0]["DOCUMENT KEY"], "7")
        self.assertEqual(got[0]["ERROR TYPE"], "Payment.Declined")
        self.assertEqual(got[0]["ATTEMPTS"], "1")
        self.assertEqual(got[0]["STATUS"], "PENDING")
        js = loads(self.dlq("list", "--json", script=path).stdout)
        del stored["fullDocument"]
        self.assertEqual(js, stored)
        self.assertNotIn(SECRET, self.dlq("show", stored["_id"], script=path).stdout)


class Filters(DlqCliTestCase):

    def ids(self, *args):
        cp = self.dlq("list", "--json", *args)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        return [json.loads(ln)["_id"] for ln in cp.stdout.splitlines()]

    def test_every_filter(self):
        old = entry(age_h=48, etype="Http")
        mid = entry(age_h=5, etype="Http.Timeout", status="RESOLVED")
        new = entry(age_h=1, etype="HttpX", attempts=7)
        pay = entry(stream="payments", age_h=2, etype="Http.Timeout.Read", status="DISCARDED")
        self.insert(old, mid, new, pay)
        everything = [old["_id"], mid["_id"], pay["_id"], new["_id"]]
        self.assertEqual(self.ids(), everything)
        self.assertEqual(self.ids("--stream", "payments"), [pay["_id"]])
        self.assertEqual(self.ids("--status", "PENDING"), [old["_id"], new["_id"]])
        self.assertEqual(self.ids("--status", "resolved,DISCARDED"), [mid["_id"], pay["_id"]])
        # Http and its subtypes, never HttpX.
        self.assertEqual(self.ids("--error-type", "Http"), [old["_id"], mid["_id"], pay["_id"]])
        self.assertEqual(self.ids("--error-type", "Http.Timeout"), [mid["_id"], pay["_id"]])
        self.assertEqual(self.ids("--since", "3h"), [pay["_id"], new["_id"]])
        self.assertEqual(self.ids("--since", "6h", "--until", "90m"), [mid["_id"], pay["_id"]])
        day = (now() - datetime.timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.assertEqual(self.ids("--until", day), [old["_id"]])
        self.assertEqual(self.ids("--since", "2000-01-01"), everything)
        self.assertEqual(self.ids("--until", "2000-01-01T00:00:00+02:00"), [])
        self.assertEqual(self.ids("--id", new["_id"], "--id", old["_id"]),
                         [old["_id"], new["_id"]])
        self.assertEqual(self.ids("--limit", "2"), everything[:2])
        self.assertEqual(self.ids("--filter", '{"attempts": {"$gte": 5}}'), [new["_id"]])
        # --filter is ANDed with the others, even when it names the same field.
        self.assertEqual(self.ids("--filter", '{"streamName": "orders"}', "--stream",
                                  "payments"), [])
        self.assertEqual(self.ids("--filter", '{"createdAt": {"$lt": {"$date": "%s"}}}' % day),
                         [old["_id"]])

    def test_filters_apply_to_stats_and_export(self):
        self.insert(entry(etype="Http"), entry(etype="Mongo.Timeout"),
                    entry(stream="payments", etype="Http.Timeout"))
        stats = json.loads(self.dlq("stats", "--json", "--error-type", "Http").stdout)
        self.assertEqual(stats["total"], 2)
        out = self.dlq("export", "--stream", "payments").stdout.splitlines()
        self.assertEqual(len(out), 1)
        self.assertIn('"payments"', out[0])


class DiscardAndPurge(DlqCliTestCase):

    def test_discard_without_yes_refuses_and_changes_nothing(self):
        self.insert(entry(), entry())
        before = self.raw()
        cp = self.dlq("discard", "--reason", "bad data")
        self.assert_fails(cp, "flowwarden dlq: discard would touch 2 entries: add --yes to "
                              "confirm (there is no terminal to ask); nothing was changed")
        self.assertEqual(self.raw(), before)

    def test_discard_with_yes_marks_the_pending_entries(self):
        a, b, done = self.insert(entry(), entry(etype="Validation"),
                                 entry(status="RESOLVED"))
        before = self.raw()
        t0 = now()
        cp = self.dlq("discard", "--reason", "customer deleted", "--yes")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout, "discarded 2 entries\n")
        for e in (a, b):
            got = self.coll().find_one({"_id": e["_id"]})
            self.assertEqual(got["status"], "DISCARDED")
            self.assertEqual(got["discardReason"], "customer deleted")
            self.assertGreaterEqual(got["discardedAt"].replace(tzinfo=UTC), t0)
            self.assertEqual(got["lastTouched"], got["discardedAt"])
            self.assertEqual(got["history"], [{
                "at": got["discardedAt"], "action": "discarded",
                "actor": "cli:%s@%s" % (__import__("pwd").getpwuid(os.geteuid()).pw_name,
                                        os.uname().nodename),
                "result": "customer deleted"}])
            self.assertEqual(got["expiresAt"], e["expiresAt"].replace(tzinfo=None))
        # RESOLVED is not PENDING: left alone.
        self.assertEqual(self.raw()[done["_id"]], before[done["_id"]])

    def test_discard_keeps_the_last_20_history_items(self):
        e = entry(history=[{"at": now(), "action": "replayed", "actor": "x", "result": str(i)}
                           for i in range(20)])
        self.insert(e)
        self.assertEqual(self.dlq("discard", "--reason", "r", "--yes").returncode, 0)
        history = self.coll().find_one()["history"]
        self.assertEqual(len(history), 20)
        self.assertEqual(history[0]["result"], "1")
        self.assertEqual(history[-1]["action"], "discarded")

    def test_discard_by_id_and_error_type(self):
        a, b, c = self.insert(entry(etype="Http"), entry(etype="Http.Timeout"),
                              entry(etype="Mongo"))
        cp = self.dlq("discard", "--reason", "r", "--yes", "--error-type", "Http")
        self.assertEqual(cp.stdout, "discarded 2 entries\n")
        self.assertEqual(self.coll().find_one({"_id": c["_id"]})["status"], "PENDING")
        cp = self.dlq("discard", "--reason", "r", "--yes", "--id", c["_id"], "--json")
        self.assertEqual(json.loads(cp.stdout), {"selected": 1, "discarded": 1})

    def answer_on_a_terminal(self, args, answer):
        """Runs dlq ARGS with stdin and stderr on a terminal, answers the
        prompt; returns (prompt, exit code, stdout)."""
        master, slave = pty.openpty()
        p = subprocess.Popen([BINARY, "dlq"] + args, stdin=slave, stderr=slave,
                             stdout=subprocess.PIPE, env=clean_env())
        os.close(slave)
        seen = b""
        try:
            while b"[y/N] " not in seen:
                seen += os.read(master, 1024)
            os.write(master, answer)
            out = p.communicate(timeout=20)[0]
        finally:
            os.close(master)
        return seen.decode(), p.returncode, out.decode()

    def test_a_terminal_is_asked_and_only_yes_goes_on(self):
        self.insert(entry(), entry())
        before = self.raw()
        args = ["discard", self.path, "--uri", self.uri, "--reason", "r"]
        prompt, rc, out = self.answer_on_a_terminal(args, b"n\n")
        self.assertEqual(prompt, "discard 2 entries? [y/N] ")
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(self.raw(), before)
        prompt, rc, out = self.answer_on_a_terminal(args, b"y\n")
        self.assertEqual((rc, out), (0, "discarded 2 entries\n"))
        self.assertEqual(self.coll().count_documents({"status": "DISCARDED"}), 2)

    def test_discard_needs_a_reason(self):
        self.assert_fails(self.dlq("discard", "--yes"),
                          "flowwarden dlq: discard: --reason TEXT is required")

    def test_purge_without_yes_refuses_and_changes_nothing(self):
        self.insert(entry(status="RESOLVED"))
        before = self.raw()
        self.assert_fails(self.dlq("purge"), "purge would touch 1 entry: add --yes")
        self.assertEqual(self.raw(), before)

    def test_purge_deletes_resolved_and_discarded_ones(self):
        keep, r_old, d_old, r_new = self.insert(entry(age_h=500), entry(status="RESOLVED", age_h=200),
                                                entry(status="DISCARDED", age_h=300),
                                                entry(status="RESOLVED", age_h=1))
        cp = self.dlq("purge", "--older-than", "7d", "--yes")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout, "purged 2 entries\n")
        self.assertEqual(sorted(self.raw()), sorted([keep["_id"], r_new["_id"]]))
        cp = self.dlq("purge", "--yes", "--status", "PENDING")
        self.assertEqual(cp.stdout, "purged 1 entry\n")
        self.assertEqual(list(self.raw()), [r_new["_id"]])

    def test_nothing_selected_needs_no_confirmation(self):
        cp = self.dlq("purge")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout, "purged 0 entries\n")

    def test_an_id_that_does_not_exist_changes_nothing(self):
        self.insert(entry())
        before = self.raw()
        self.assert_fails(self.dlq("discard", "--reason", "r", "--yes", "--id", "nope"),
                          'flowwarden dlq: no DLQ entry with _id or eventId "nope"; nothing was changed')
        done = entry(status="RESOLVED")
        self.insert(done)
        self.assert_fails(self.dlq("discard", "--reason", "r", "--yes", "--id", done["_id"]),
                          'DLQ entry "%s" (status RESOLVED) does not match the filters'
                          % done["_id"])
        before[done["_id"]] = self.raw()[done["_id"]]
        self.assertEqual(self.raw(), before)


class ExportImport(DlqCliTestCase):

    def typed_entries(self):
        return [
            entry(metadata={"dec": Decimal128("1234567890.123456789"), "i64": Int64(2 ** 40),
                            "i32": 7, "dbl": 1.0, "neg0": -0.0,
                            "date": datetime.datetime(2026, 1, 15, 10, 30, 0, 123000),
                            "bin": Binary(b"\x00\x01\xff", 0),
                            "uuid": Binary(uuid.uuid4().bytes, 4),
                            "user": Binary(b"custom", 0x80),
                            "nested": {"arr": [1, Int64(2), 3.5, {"deep": Decimal128("0.1")}],
                                       "empty": {}, "none": None}}),
            entry(stream="payments", status="RESOLVED", reprocessAttempts=Int64(3)),
            entry(stream="audit"),
        ]

    def test_round_trip_is_byte_identical(self):
        a, b, c = self.typed_entries()
        self.insert(a, b)
        self.insert(c, name="audit_dlq")
        before, before_audit = self.raw(), self.raw("audit_dlq")
        out = os.path.join(self.tmp.name, "dlq.jsonl")
        cp = self.dlq("export", "--out", out)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stderr, "exported 3 entries to %s\n" % out)
        with open(out) as f:
            text = f.read()
        self.assertEqual(len(text.splitlines()), 3)
        self.assertIn('"$numberDecimal" : "1234567890.123456789"', text)
        self.assertIn('"$numberLong" : "1099511627776"', text)
        self.assertIn('"$binary" : { "base64" : "AAH/", "subType" : "00" }', text)
        self.coll().drop()
        self.coll("audit_dlq").drop()
        cp = self.dlq("import", out)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout, "imported 3 entries from %s: 3 new, 0 replaced, 0 skipped "
                                    "(other streams), 0 failed\n" % out)
        self.assertEqual(self.raw(), before)
        self.assertEqual(self.raw("audit_dlq"), before_audit)

    def test_import_is_idempotent(self):
        entries = self.typed_entries()
        self.insert(*entries[:2])
        self.insert(entries[2], name="audit_dlq")
        out = os.path.join(self.tmp.name, "dlq.jsonl")
        self.dlq("export", "--out", out)
        before = self.raw()
        for _ in range(2):
            cp = self.dlq("import", out, "--json")
            self.assertEqual(json.loads(cp.stdout), {"inserted": 0, "replaced": 3,
                                                     "skipped": 0, "failed": 0})
        self.assertEqual(self.raw(), before)
        # An entry changed since the export gets its exported state back.
        self.coll().update_one({"_id": entries[0]["_id"]}, {"$set": {"status": "RESOLVED"}})
        self.dlq("import", out)
        self.assertEqual(self.raw(), before)

    def test_export_to_stdout_and_import_from_stdin(self):
        self.insert(entry())
        before = self.raw()
        text = self.dlq("export").stdout
        self.coll().drop()
        path = os.path.join(self.tmp.name, "in.jsonl")
        with open(path, "w") as f:
            f.write(text)
        cp = run_cli(["dlq", "import", self.path, "-", "--uri", self.uri], timeout=20)
        self.assertEqual(cp.returncode, 0)  # stdin is /dev/null: nothing to import
        self.assertEqual(self.dlq("import", path).returncode, 0)
        self.assertEqual(self.raw(), before)

    def test_import_reports_bad_lines_and_goes_on(self):
        good, stray = entry(), entry(stream="elsewhere")
        path = os.path.join(self.tmp.name, "in.jsonl")
        with open(path, "w") as f:
            f.write(json_util.dumps(stray, json_options=json_util.CANONICAL_JSON_OPTIONS) + "\n")
            f.write("not json\n\n")
            f.write(json_util.dumps(good, json_options=json_util.CANONICAL_JSON_OPTIONS) + "\n")
        cp = self.dlq("import", path)
        self.assertEqual(cp.returncode, 1)
        self.assertIn('%s:1: unknown stream "elsewhere": the script has no stream of that name '
                      'with a DLQ (its streams: "orders", "payments", "audit", "nodlq")' % path,
                      cp.stderr)
        self.assertIn("%s:2: not an Extended JSON document" % path, cp.stderr)
        self.assertIn("1 new, 0 replaced, 0 skipped (other streams), 2 failed", cp.stdout)
        self.assertEqual(list(self.raw()), [good["_id"]])

    def test_import_with_stream_skips_the_other_streams(self):
        path = os.path.join(self.tmp.name, "in.jsonl")
        with open(path, "w") as f:
            for e in (entry(), entry(stream="payments")):
                f.write(json_util.dumps(e, json_options=json_util.CANONICAL_JSON_OPTIONS) + "\n")
        cp = self.dlq("import", path, "--stream", "payments", "--json")
        self.assertEqual(json.loads(cp.stdout), {"inserted": 1, "replaced": 0, "skipped": 1,
                                                 "failed": 0})


class BadInput(DlqCliTestCase):

    def test_each_bad_input_has_a_clear_message_and_exits_1(self):
        self.insert(entry())
        cases = [
            (["lsit"], 'flowwarden dlq: unknown verb "lsit" (did you mean "list"?)'),
            (["frobnicate"], 'flowwarden dlq: unknown verb "frobnicate" (use list, show, stats'),
            (["list", "--stream", "nope"],
             'flowwarden dlq: --stream: the script has no stream "nope" (its streams: '
             '"orders", "payments", "audit", "nodlq")'),
            (["list", "--stream", "nodlq"],
             'flowwarden dlq: --stream: stream "nodlq" has no dead-letter queue'),
            (["list", "--status", "DONE"],
             'flowwarden dlq: --status: unknown status "DONE" (use PENDING, REPROCESSING, '
             'RESOLVED, DISCARDED or SCHEDULED'),
            (["list", "--since", "2 hours"],
             'flowwarden dlq: --since: "2 hours" is neither a duration'),
            (["list", "--until", "2026-02-31"],
             'flowwarden dlq: --until: "2026-02-31" is neither a duration'),
            (["purge", "--older-than", "7days"],
             'flowwarden dlq: --older-than: "7days" is neither a duration'),
            (["list", "--limit", "0"],
             'flowwarden dlq: --limit: expected a positive whole number, got "0"'),
            (["list", "--limit", "-3"],
             'flowwarden dlq: --limit: expected a positive whole number, got "-3"'),
            (["show", "no-such-id"], 'flowwarden dlq: no DLQ entry with _id or eventId "no-such-id"'),
            (["list", "--filter", "{not json"], "flowwarden dlq: --filter: not valid Extended JSON"),
            (["list", "--filter", "[1]"], "flowwarden dlq: --filter: expected a JSON object"),
            (["list", "--reason", "x"], "flowwarden dlq: list does not take --reason"),
            (["list", "--bogus"], "flowwarden dlq: unknown option --bogus"),
            (["show"], "flowwarden dlq: show: missing ID"),
            (["list", "extra"], 'flowwarden dlq: list: unexpected argument "extra"'),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                if args[0] in ("lsit", "frobnicate"):
                    cp = run_cli(["dlq", args[0], self.path])
                else:
                    cp = self.dlq(*args)
                self.assert_fails(cp, message)
                self.assertEqual(cp.stdout, "")

    def test_missing_verb_and_script(self):
        self.assert_fails(run_cli(["dlq"]), "flowwarden dlq: missing verb")
        self.assert_fails(run_cli(["dlq", "list"]), "flowwarden dlq: list: missing SCRIPT")
        self.assertEqual(run_cli(["dlq", "--help"]).returncode, 0)
        self.assertIn("flowwarden dlq list|show", run_cli(["--help"]).stdout)

    def test_a_script_without_a_dlq(self):
        path = self.script('fw.stream { name = "s", collection = "c", on_insert = print }',
                           name="plain.lua")
        self.assert_fails(self.dlq("list", script=path),
                          "declares no stream with a dead-letter queue")

    def test_an_unreachable_server_exits_1(self):
        probe = ConnectionProbe()
        probe.close()
        cp = self.dlq("list", uri="mongodb://127.0.0.1:%d/%s?serverSelectionTimeoutMS=300"
                      % (probe.port, self.db_name))
        self.assert_fails(cp, "flowwarden dlq: the query on ")
        self.assertIn("_fw_dlq (connection \"default\") failed", cp.stderr)


class NonsenseEntries(DlqCliTestCase):

    def test_fields_of_the_wrong_type_print_as_question_marks(self):
        bad = {"_id": ObjectId(), "streamName": ["orders"], "operationType": 5,
               "documentKey": "k", "error": "just a string", "attempts": "three",
               "reprocessAttempts": {"n": 1}, "status": None, "createdAt": "yesterday",
               "history": "none"}
        worse = {"_id": "x", "streamName": "orders"}
        self.insert(bad, worse, entry())
        cp = self.dlq("list")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        got = {r["ID"]: r for r in rows(cp.stdout)}
        self.assertEqual(got[str(bad["_id"])], {
            "ID": str(bad["_id"]), "STREAM": "?", "OPERATION": "?", "DOCUMENT KEY": "?",
            "ERROR TYPE": "?", "ATTEMPTS": "?", "REPROCESSED": "?", "AGE": "?", "STATUS": "?"})
        self.assertEqual(got["x"]["ERROR TYPE"], "?")
        for args in (["list", "--json"], ["show", "x"], ["show", "x", "--json"], ["stats"],
                     ["stats", "--json"], ["export"]):
            cp = self.dlq(*args)
            self.assertEqual(cp.returncode, 0, (args, cp.stderr))
        stats = json.loads(self.dlq("stats", "--json").stdout)
        self.assertEqual(stats["total"], 3)
        self.assertEqual(stats["by_stream"], {"orders": 2, "?": 1})
        self.assertEqual(stats["by_status"], {"?": 2, "PENDING": 1})


class Connections(DlqCliTestCase):

    def test_a_dlq_on_a_named_connection_uses_its_uri(self):
        # The run URI goes nowhere: only the audit connection's URI can work.
        probe = ConnectionProbe()
        path = self.script("""
fw.connection { name = "audit", uri = "%s" }
fw.stream { name = "s", database = "%s", collection = "c", dlq = { connection = "audit" },
            on_insert = print }
""" % (self.uri, self.db_name), name="conn.lua")
        e = entry(stream="s")
        self.insert(e)
        cp = self.dlq("list", "--json", uri=probe.uri, script=path)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(json.loads(cp.stdout)["_id"], e["_id"])
        self.assertEqual(probe.connections(), 0)
        probe.close()

    def test_uri_from_the_environment(self):
        self.insert(entry())
        cp = run_cli(["dlq", "stats", self.path, "--json"],
                     env=dict(os.environ, FLOWWARDEN_URI=self.uri, MONGOC_DISABLE_SHM="1"))
        self.assertEqual(json.loads(cp.stdout)["total"], 1)
