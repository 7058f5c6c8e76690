"""`flowwarden dlq list` and `dlq stats` on a sequenced DLQ (issue 14): the
entries of a sequence show their id and index, parked entries print as
parked, `list --sequences` gives one line per sequence (id, stream, state,
size, head entry, its error, age), `stats` counts open sequences, parked
entries and the largest sequence per stream, and DLQs with no sequence print
what they always did. Entries and sequence documents are written the way the
runtime writes them (dlq_entry.c, dlq_sequence.h), or edited into nonsense."""
import datetime
import json
import re

from bson.int64 import Int64
from bson.objectid import ObjectId

from fwtest import StandInTestCase, run_cli
from test_dlq_cli import entry, loads, now, rows

SCRIPT = """
fw.stream { name = "orders", collection = "orders", dlq = { sequenced = true },
            on_insert = function() end }
fw.stream { name = "payments", collection = "payments", dlq = true, on_insert = function() end }
fw.stream { name = "audit", collection = "audit",
            dlq = { collection = "audit_dlq", sequenced = true }, on_insert = function() end }
fw.stream { name = "nodlq", collection = "x", on_insert = function() end }
"""

PLAIN_HEADER = ["ID", "STREAM", "OPERATION", "DOCUMENT KEY", "ERROR TYPE", "ATTEMPTS",
                "REPROCESSED", "AGE", "STATUS"]
SEQUENCE_HEADER = ["SEQUENCE", "STREAM", "STATE", "SIZE", "HEAD", "ERROR TYPE", "MESSAGE", "AGE"]


def re_split(line):
    return re.split(r"\s{2,}", line.strip())


def sequence(sid, size, stream="orders", age_h=3, etype="Validation"):
    """The head (dead-lettered, with its error) and size - 1 parked entries of
    sequence sid, one minute apart, as the runtime stores them."""
    out = []
    for i in range(size):
        e = entry(stream=stream, etype=etype, age_h=age_h, attempts=1 if i == 0 else 0,
                  sequenceId=sid, sequenceIndex=Int64(i))
        e["createdAt"] += datetime.timedelta(minutes=i)
        if i > 0:
            del e["error"]
            e["history"] = [{"at": e["createdAt"], "action": "enqueued", "actor": "stream",
                             "result": "parked"}]
        out.append(e)
    return out


def sequence_doc(sid, stream="orders", open_=True, next_=None, age_h=3):
    t = now() - datetime.timedelta(hours=age_h)
    return {"_id": {"streamName": stream, "sequenceId": sid}, "streamName": stream,
            "sequenceId": sid, "open": open_, "next": Int64(next_ or 0), "inflight": Int64(0),
            "createdAt": t, "openedAt": t, "lastTouched": t, "closedAt": None}


class SequencesCliTestCase(StandInTestCase):

    def setUp(self):
        super().setUp()
        self.path = self.script(SCRIPT)

    def dlq(self, *args, script=None):
        verb, rest = args[0], list(args[1:])
        return run_cli(["dlq", verb, script or self.path, "--uri", self.uri] + rest)

    def ok(self, *args, **kw):
        cp = self.dlq(*args, **kw)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        return cp.stdout

    def insert(self, entries, docs=(), dlq="_fw_dlq"):
        if entries:
            self.db[dlq].insert_many([dict(e) for e in entries])
        if docs:
            self.db[dlq + "_sequences"].insert_many([dict(d) for d in docs])
        return entries

    def table(self, *args):
        out = self.ok("list", *args)
        return out.splitlines()[0].split(), rows(out)


class ListEntries(SequencesCliTestCase):

    def test_entries_of_a_sequence_show_its_id_and_index_and_parked_ones_say_so(self):
        k1 = self.insert(sequence('"k1"', 3), [sequence_doc('"k1"', next_=3)])
        plain = self.insert([entry(stream="payments", age_h=1)])[0]
        header, got = self.table()
        self.assertEqual(header[-2:], ["SEQUENCE", "INDEX"])
        by_id = {r["ID"]: r for r in got}
        self.assertEqual([by_id[e["_id"]]["ERROR TYPE"] for e in k1],
                         ["Validation", "(parked)", "(parked)"])
        self.assertEqual([by_id[e["_id"]]["SEQUENCE"] for e in k1], ['"k1"'] * 3)
        self.assertEqual([by_id[e["_id"]]["INDEX"] for e in k1], ["0", "1", "2"])
        self.assertEqual([by_id[e["_id"]]["ATTEMPTS"] for e in k1], ["1", "0", "0"])
        self.assertEqual(by_id[plain["_id"]]["ERROR TYPE"], "Http.Timeout")
        self.assertEqual((by_id[plain["_id"]]["SEQUENCE"], by_id[plain["_id"]]["INDEX"]),
                         ("-", "-"))
        # --json prints the stored entry: sequenceId and sequenceIndex, no error when parked.
        lines = {d["_id"]: d for d in map(loads, self.ok("list", "--json").splitlines())}
        self.assertEqual(lines[k1[1]["_id"]]["sequenceId"], '"k1"')
        self.assertEqual(lines[k1[1]["_id"]]["sequenceIndex"], 1)
        self.assertNotIn("error", lines[k1[1]["_id"]])
        self.assertNotIn("sequenceId", lines[plain["_id"]])
        # show prints a parked entry field by field, without an error.
        shown = self.ok("show", k1[2]["_id"])
        self.assertRegex(shown, r'(?m)^sequenceId\s+"k1"$')
        self.assertRegex(shown, r"(?m)^sequenceIndex\s+2$")
        self.assertNotIn("error.type", shown)

    def test_one_sequence_with_filter(self):
        k1 = self.insert(sequence('"k1"', 3), [sequence_doc('"k1"', next_=3)])
        self.insert(sequence('"k2"', 2), [sequence_doc('"k2"', next_=2)])
        _, got = self.table("--filter", '{"sequenceId": "\\"k1\\""}')
        self.assertEqual([r["ID"] for r in got], [e["_id"] for e in k1])

    def test_a_document_key_sequence_id_prints_whole(self):
        sid = '{"_id":{"$numberInt":"42"}}'
        self.insert(sequence(sid, 2), [sequence_doc(sid, next_=2)])
        _, got = self.table()
        self.assertEqual([r["SEQUENCE"] for r in got], [sid, sid])

    def test_a_dlq_without_sequences_prints_the_table_it_always_did(self):
        self.insert([entry(), entry(stream="payments")])
        _, got = self.table()
        self.assertEqual(re_split(self.ok("list").splitlines()[0]), PLAIN_HEADER)
        self.assertEqual(len(got), 2)
        self.assertEqual(set(got[0]), set(PLAIN_HEADER))


class ListSequences(SequencesCliTestCase):

    def populate(self):
        k1 = self.insert(sequence('"k1"', 3, age_h=3), [sequence_doc('"k1"', next_=3)])
        k42 = self.insert(sequence('{"_id":{"$numberInt":"42"}}', 1, age_h=1, etype="Http.Timeout"),
                          [sequence_doc('{"_id":{"$numberInt":"42"}}', next_=1)])
        # Resolved and closed: not listed.
        done = sequence('"k7"', 2, age_h=9)
        for e in done:
            e["status"] = "RESOLVED"
        self.insert(done, [sequence_doc('"k7"', open_=False, next_=2)])
        # Open, but nothing waits (a replay resolved everything and is about to close it).
        self.insert([], [sequence_doc('"k5"', next_=4)])
        audit = self.insert(sequence('"a1"', 2, stream="audit", age_h=2, etype="NilError"),
                            [sequence_doc('"a1"', stream="audit", next_=2)], dlq="audit_dlq")
        self.insert([entry(stream="payments", age_h=20)])
        return k1, k42, audit

    def test_one_line_per_open_sequence_oldest_head_first(self):
        k1, k42, audit = self.populate()
        _, got = self.table("--sequences")
        self.assertEqual(re_split(self.ok("list", "--sequences").splitlines()[0]),
                         SEQUENCE_HEADER)
        self.assertEqual([r["SEQUENCE"] for r in got],
                         ['"k1"', '{"_id":{"$numberInt":"42"}}', '"k5"', '"a1"'])
        self.assertEqual(got[0], {
            "SEQUENCE": '"k1"', "STREAM": "orders", "STATE": "open", "SIZE": "3",
            "HEAD": k1[0]["_id"], "ERROR TYPE": "Validation",
            "MESSAGE": "failed with Validation", "AGE": "3h00m"})
        self.assertEqual((got[1]["SIZE"], got[1]["HEAD"], got[1]["ERROR TYPE"], got[1]["AGE"]),
                         ("1", k42[0]["_id"], "Http.Timeout", "1h00m"))
        self.assertEqual(got[2], {
            "SEQUENCE": '"k5"', "STREAM": "orders", "STATE": "open", "SIZE": "0",
            "HEAD": "-", "ERROR TYPE": "-", "MESSAGE": "-", "AGE": "-"})
        self.assertEqual((got[3]["STREAM"], got[3]["SIZE"], got[3]["HEAD"], got[3]["AGE"]),
                         ("audit", "2", audit[0]["_id"], "2h00m"))

    def test_json_is_one_document_per_sequence(self):
        k1, _, _ = self.populate()
        lines = [loads(ln) for ln in self.ok("list", "--sequences", "--json").splitlines()]
        self.assertEqual(len(lines), 4)
        first = lines[0]
        self.assertAlmostEqual(first.pop("ageSeconds"), 3 * 3600, delta=30)
        self.assertEqual(first, {
            "streamName": "orders", "sequenceId": '"k1"', "open": True, "size": 3, "parked": 2,
            "head": {"_id": k1[0]["_id"], "sequenceIndex": 0, "status": "PENDING",
                     "error": {"type": "Validation", "message": "failed with Validation"},
                     "createdAt": k1[0]["createdAt"].replace(tzinfo=None)}})
        empty = lines[2]
        self.assertEqual((empty["sequenceId"], empty["size"], empty["parked"], empty["head"],
                          empty["ageSeconds"]), ('"k5"', 0, 0, None, None))

    def test_a_head_that_is_a_parked_entry_prints_as_parked(self):
        # The dead-lettered head was evicted: the first parked entry is the head now.
        k1 = sequence('"k1"', 3)
        k1[0]["status"] = "DISCARDED"
        k1[1]["status"] = "REPROCESSING"
        self.insert(k1, [sequence_doc('"k1"', next_=3)])
        _, got = self.table("--sequences")
        self.assertEqual(got, [{
            "SEQUENCE": '"k1"', "STREAM": "orders", "STATE": "open", "SIZE": "2",
            "HEAD": k1[1]["_id"], "ERROR TYPE": "(parked)", "MESSAGE": "-", "AGE": "2h59m"}])
        line = loads(self.ok("list", "--sequences", "--json"))
        self.assertEqual((line["size"], line["parked"], line["head"]["sequenceIndex"],
                          line["head"]["status"], line["head"]["error"]),
                         (2, 1, 1, "REPROCESSING", None))

    def test_stream_and_limit_select_sequences_other_filters_their_head(self):
        self.populate()
        _, got = self.table("--sequences", "--stream", "audit")
        self.assertEqual([r["SEQUENCE"] for r in got], ['"a1"'])
        _, got = self.table("--sequences", "--stream", "payments")
        self.assertEqual(got, [])
        _, got = self.table("--sequences", "--limit", "2")
        self.assertEqual([r["SEQUENCE"] for r in got], ['"k1"', '{"_id":{"$numberInt":"42"}}'])
        _, got = self.table("--sequences", "--error-type", "Http")
        self.assertEqual([r["SEQUENCE"] for r in got], ['{"_id":{"$numberInt":"42"}}'])
        _, got = self.table("--sequences", "--since", "150m")
        self.assertEqual([r["SEQUENCE"] for r in got], ['{"_id":{"$numberInt":"42"}}', '"a1"'])
        _, got = self.table("--sequences", "--status", "RESOLVED")
        self.assertEqual(got, [])

    def test_bad_usage(self):
        cp = self.dlq("list", "--sequences", "--documents")
        self.assertEqual(cp.returncode, 1)
        self.assertIn("flowwarden dlq: list --sequences does not take --documents", cp.stderr)
        cp = self.dlq("stats", "--sequences")
        self.assertEqual(cp.returncode, 1)
        self.assertIn("flowwarden dlq: stats does not take --sequences", cp.stderr)
        cp = self.dlq("list", "--sequences", "--stream", "nodlq")
        self.assertEqual(cp.returncode, 1)
        self.assertIn('stream "nodlq" has no dead-letter queue', cp.stderr)

    def test_no_sequence_at_all(self):
        self.insert([entry()])
        lines = self.ok("list", "--sequences").splitlines()
        self.assertEqual([re_split(ln) for ln in lines], [SEQUENCE_HEADER])
        self.assertEqual(self.ok("list", "--sequences", "--json"), "")


class Stats(SequencesCliTestCase):

    def test_stats_count_open_sequences_parked_entries_and_the_largest(self):
        self.insert(sequence('"k1"', 3) + sequence('"k2"', 5) + sequence('"k3"', 1),
                    [sequence_doc('"k1"', next_=3), sequence_doc('"k2"', next_=5),
                     sequence_doc('"k3"', next_=1), sequence_doc('"k9"', open_=False)])
        self.insert([entry(stream="payments")])
        stats = json.loads(self.ok("stats", "--json"))
        self.assertEqual(stats["total"], 10)
        # Parked entries have no error of their own: not the "?" of nonsense.
        self.assertEqual(stats["by_error_type"], {"Validation": 3, "(parked)": 6,
                                                  "Http.Timeout": 1})
        self.assertEqual(stats["sequences"], {
            "orders": {"open": 3, "parked": 6, "largest": 5},
            "audit": {"open": 0, "parked": 0, "largest": 0}})
        text = self.ok("stats")
        self.assertRegex(text, r"(?m)^SEQUENCED STREAM\s+OPEN SEQUENCES\s+PARKED ENTRIES\s+"
                               r"LARGEST$")
        self.assertRegex(text, r"(?m)^orders\s+3\s+6\s+5$")
        self.assertRegex(text, r"(?m)^audit\s+0\s+0\s+0$")
        only = json.loads(self.ok("stats", "--json", "--stream", "orders"))
        self.assertEqual(list(only["sequences"]), ["orders"])

    def test_stats_of_streams_with_no_sequence_are_unchanged(self):
        self.insert([entry(stream="payments")])
        stats = json.loads(self.ok("stats", "--json", "--stream", "payments"))
        self.assertEqual(list(stats), ["total", "by_stream", "by_status", "by_error_type",
                                       "oldest_pending_age_s"])
        self.assertNotIn("SEQUENCED", self.ok("stats", "--stream", "payments"))
        plain = self.script('fw.stream { name = "orders", collection = "o", dlq = true, '
                            'on_insert = print }', name="plain.lua")
        stats = json.loads(self.ok("stats", "--json", script=plain))
        self.assertEqual(list(stats), ["total", "by_stream", "by_status", "by_error_type",
                                       "oldest_pending_age_s"])

    def test_a_sequence_of_a_stream_no_longer_sequenced_still_shows(self):
        # sequenced = false now, but what was parked still waits: say so.
        self.insert(sequence('"k1"', 2, stream="payments"),
                    [sequence_doc('"k1"', stream="payments", next_=2)])
        stats = json.loads(self.ok("stats", "--json", "--stream", "payments"))
        self.assertEqual(stats["sequences"], {"payments": {"open": 1, "parked": 1,
                                                           "largest": 2}})


class Nonsense(SequencesCliTestCase):

    def test_malformed_sequence_documents_and_entries_never_stop_list_or_stats(self):
        seqs = self.db["_fw_dlq_sequences"]
        seqs.insert_many([
            {"_id": "junk", "open": "yes"},                                 # nothing but open
            {"_id": ObjectId(), "streamName": "orders", "sequenceId": '"k9"', "open": 1},
            {"_id": {"streamName": "orders", "sequenceId": '"k8"'}, "open": True},
            {"_id": ObjectId(), "streamName": "orders"},                    # no open, no id
            {"_id": ObjectId(), "streamName": 5, "sequenceId": ["x"], "open": True},
        ])
        bad_head = sequence('"k2"', 2)
        bad_head[0]["error"] = "just a string"
        bad_head[0]["createdAt"] = "yesterday"
        orphan = sequence('"k3"', 2)          # entries, but no sequence document
        closed = sequence('"k6"', 1)          # entries, and a document that says closed
        seqs.insert_one(sequence_doc('"k6"', open_=False, next_=1))
        odd = [entry(sequenceId=7, sequenceIndex="x"),          # not a string id: no sequence
               entry(sequenceId='"k4"', sequenceIndex="first")]  # an index of the wrong type
        self.insert(bad_head + orphan + closed + odd)
        for args in (["list"], ["list", "--json"], ["list", "--sequences"],
                     ["list", "--sequences", "--json"], ["stats"], ["stats", "--json"],
                     ["list", "--sequences", "--error-type", "Validation"]):
            cp = self.dlq(*args)
            self.assertEqual(cp.returncode, 0, (args, cp.stderr))
            self.assertEqual(cp.stderr, "", args)
        _, got = self.table("--sequences")
        by_seq = {}
        for r in got:
            by_seq.setdefault(r["SEQUENCE"], []).append(r)
        self.assertEqual(by_seq['"k2"'][0]["ERROR TYPE"], "?")
        self.assertEqual(by_seq['"k2"'][0]["AGE"], "-")
        self.assertEqual((by_seq['"k3"'][0]["STATE"], by_seq['"k3"'][0]["SIZE"]), ("?", "2"))
        self.assertEqual(by_seq['"k9"'][0]["STATE"], "?")            # open: 1 is not a bool
        self.assertEqual((by_seq['"k6"'][0]["STATE"], by_seq['"k6"'][0]["SIZE"]), ("closed", "1"))
        self.assertEqual((by_seq['"k8"'][0]["STREAM"], by_seq['"k8"'][0]["STATE"]),
                         ("orders", "open"))                           # from its _id
        self.assertEqual((by_seq['"k4"'][0]["SIZE"], by_seq['"k4"'][0]["HEAD"]),
                         ("1", odd[1]["_id"]))
        self.assertIn("?", by_seq)                                     # "junk", and streamName 5
        self.assertEqual(sorted((r["STREAM"], r["STATE"]) for r in by_seq["?"]),
                         [("?", "?"), ("?", "open"), ("orders", "?")])
        _, entries = self.table()
        by_id = {r["ID"]: r for r in entries}
        self.assertEqual((by_id[odd[0]["_id"]]["SEQUENCE"], by_id[odd[0]["_id"]]["INDEX"]),
                         ("?", "?"))
        self.assertEqual(by_id[bad_head[0]["_id"]]["ERROR TYPE"], "?")
        stats = json.loads(self.ok("stats", "--json"))
        self.assertEqual(stats["sequences"]["orders"], {"open": 1, "parked": 2, "largest": 2})
        # k2's head's error is a string: "?"; the parked entries of k2 and k3: "(parked)".
        self.assertEqual(stats["by_error_type"]["?"], 1)
        self.assertEqual(stats["by_error_type"]["(parked)"], 2)
