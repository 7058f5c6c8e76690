"""`flowwarden record` against the stand-in and `flowwarden replay` offline
(issue 15): the demo's events, recorded while `run` handles them, replay to
the same outcomes as the live run (the same events dead-lettered, with the
same error and attempts; the same retries); with --uri the handlers write the
same read model to the server. Also --redact, --limit and bad input."""
import json
import os
import signal
import subprocess
import textwrap
import threading

from fwtest import (needs_standin, BINARY, SOURCE_DIR, StandInTestCase, clean_env, run_cli, wait_until)

ORDERS = os.path.join(SOURCE_DIR, "examples", "orders.lua")
STREAM = "order-watcher"


class Recorder:
    """A `flowwarden record` process whose stderr lines are collected."""

    def __init__(self, args):
        self.lines = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([BINARY, "record"] + list(args), stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=clean_env())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in iter(self.proc.stderr.readline, ""):
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def stderr(self):
        with self._lock:
            return "\n".join(self.lines)

    def wait_recording(self, timeout=30):
        """Waits until the change stream is open (the banner is printed after
        the server accepted the watch), so every later write is recorded."""
        wait_until(lambda: "recording stream" in self.stderr() or self.proc.poll() is not None,
                   timeout, 0.02, "record's change stream")
        if "recording stream" not in self.stderr():
            raise AssertionError("record exited: " + self.stderr())

    def wait_exit(self, timeout=30):
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        self.proc.stderr.close()
        return rc

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        if not self.proc.stderr.closed:
            self.proc.stderr.close()


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@needs_standin("database named shop, which the tests drop (a fixed name)")
class RecordReplayTest(StandInTestCase):

    def setUp(self):
        super().setUp()
        # orders.lua writes shop.customer_totals by name: a clean "shop" per test.
        self.client.drop_database("shop")
        self.shop = self.client.shop
        self.shop_uri = self.base_uri("shop")
        self.out = os.path.join(self.tmp.name, "events.jsonl")
        self.recorders = []

    def tearDown(self):
        for r in self.recorders:
            r.stop()
        super().tearDown()

    def record(self, *extra, script=ORDERS, stream=STREAM):
        r = Recorder([script, "--stream", stream, "--uri", self.shop_uri, "--out", self.out]
                     + list(extra))
        self.recorders.append(r)
        return r

    def replay(self, *extra, events=None):
        cp = run_cli(["replay", ORDERS, "--events", events or self.out, "--json"] + list(extra),
                     timeout=60)
        lines = [json.loads(line) for line in cp.stdout.splitlines() if line.strip()]
        return cp, [l for l in lines if "n" in l], [l for l in lines if "summary" in l]

    def demo_writes(self):
        """The client side of examples/run_demo.py."""
        orders = self.shop.orders
        orders.insert_one({"_id": 1, "item": "keyboard", "qty": 1, "total": 49.90,
                           "gateway": "ok", "customer": "ada"})
        orders.insert_one({"_id": 2, "item": "monitor", "qty": 2, "total": 398.00,
                           "gateway": "flaky", "customer": "ada"})
        orders.insert_one({"_id": 3, "item": "cable", "qty": 3, "total": -5.00,
                           "gateway": "ok", "customer": "bob"})
        orders.insert_one({"_id": 4, "item": "laptop", "qty": 1, "total": 1299.00,
                           "gateway": "down", "customer": "bob"})
        orders.update_one({"_id": 1}, {"$set": {"status": "PAID"}})
        orders.delete_one({"_id": 1})

    def test_the_demo_replays_offline_to_the_live_runs_outcomes(self):
        live = self.run_fw(ORDERS, uri=self.shop_uri)
        live.wait_open()
        rec = self.record("--limit", "6")
        rec.wait_recording()
        self.demo_writes()
        self.assertEqual(rec.wait_exit(), 0, rec.stderr())
        self.assertIn("recorded 6 event(s) to " + self.out, rec.stderr())
        live.wait_log("order 1 was deleted")
        self.wait_for(lambda: self.shop.orders_dlq.count_documents({}) == 2,
                      what="the live run's two DLQ entries")
        live.stop()
        live_dlq = {e["eventId"]: e for e in self.shop.orders_dlq.find()}
        live_totals = sorted(self.shop.customer_totals.find(), key=lambda d: d["_id"])

        events = read_events(self.out)
        self.assertEqual([e["operationType"] for e in events],
                         ["insert"] * 4 + ["update", "delete"])
        cp, per_event, summary = self.replay()
        self.assertEqual(cp.returncode, 3, cp.stderr)  # two events end in the DLQ
        self.assertEqual([r["outcome"] for r in per_event],
                         ["handled", "handled", "dlq", "dlq", "handled", "handled"])
        # The same events dead-lettered, with the same error and attempts.
        replay_dlq = {r["event_id"]: r for r in per_event if r["outcome"] == "dlq"}
        self.assertEqual(set(replay_dlq), set(live_dlq))
        for event_id, r in replay_dlq.items():
            with self.subTest(event=event_id):
                self.assertEqual(r["attempts"], live_dlq[event_id]["attempts"])
                self.assertEqual(r["error_type"], live_dlq[event_id]["error"]["type"])
        # The same retries: the flaky gateway's order is accepted on attempt 3
        # in both runs.
        self.assertIn("order 2 accepted: monitor x2 = 398.00 (attempt 3)",
                      live.messages())
        self.assertEqual(per_event[1]["attempts"], 3)
        self.assertEqual(summary, [{"events": 6, "summary": {STREAM: {"handled": 4, "dlq": 2}}}])

        # --uri: fw.mongo reaches the server instead of the fake; the handlers
        # rebuild the live run's read model from the recording.
        self.assertEqual(live_totals, [{"_id": "ada", "orders": 2, "amount": 447.9}])
        self.shop.customer_totals.drop()
        self.shop.orders_dlq.drop()
        cp, per_event_uri, _ = self.replay("--uri", self.shop_uri)
        self.assertEqual(cp.returncode, 3, cp.stderr)
        self.assertEqual([r["outcome"] for r in per_event_uri], [r["outcome"] for r in per_event])
        self.assertEqual(sorted(self.shop.customer_totals.find(), key=lambda d: d["_id"]),
                         live_totals)
        # The DLQ of a replay is in memory: nothing is written to the server's.
        self.assertEqual(self.shop.orders_dlq.count_documents({}), 0)

    def test_fwt_load_with_opts_mongo_writes_to_the_server_not_the_fake(self):
        spec = os.path.join(self.tmp.name, "server_spec.lua")
        with open(spec, "w") as f:
            f.write(textwrap.dedent("""\
                local fwt = require("flowwarden.testing")
                describe("opts.mongo", function()
                  it("gives fw.mongo the server", function()
                    local app = fwt.load(os.getenv("ORDERS"), { mongo = os.getenv("SHOP_URI") })
                    local r = app:deliver("order-watcher", fwt.insert {
                      _id = 9, item = "pen", qty = 1, total = 2.5, customer = "cy" })
                    assert.equal("handled", r.outcome)
                    assert.is_nil(app.mongo:collection("shop", "customer_totals"):find_one {})
                  end)
                end)
                """))
        cp = run_cli(["test", "-o", "TAP", spec], timeout=60,
                     env=clean_env({"ORDERS": ORDERS, "SHOP_URI": self.shop_uri}))
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("ok 1 - opts.mongo gives fw.mongo the server", cp.stdout)
        self.assertEqual(list(self.shop.customer_totals.find()),
                         [{"_id": "cy", "orders": 1, "amount": 2.5}])

    def test_redact_replaces_nested_fields_with_stars(self):
        rec = self.record("--redact", "card.number,customer", "--limit", "2")
        rec.wait_recording()
        self.shop.orders.insert_one({"_id": 1, "total": 5, "customer": "ada",
                                     "card": {"number": "4111", "exp": "12/30"}})
        self.shop.orders.update_one({"_id": 1}, {"$set": {"card.number": "5555",
                                                          "customer": "bea", "total": 6}})
        self.assertEqual(rec.wait_exit(), 0, rec.stderr())
        ins, upd = read_events(self.out)
        self.assertEqual(ins["fullDocument"]["card"], {"number": "***", "exp": "12/30"})
        self.assertEqual(ins["fullDocument"]["customer"], "***")
        self.assertEqual(ins["fullDocument"]["total"], {"$numberInt": "5"})
        fields = upd["updateDescription"]["updatedFields"]
        self.assertEqual(fields["card.number"], "***")
        self.assertEqual(fields["customer"], "***")
        self.assertEqual(fields["total"], {"$numberInt": "6"})
        # updateLookup's document is redacted too.
        self.assertEqual(upd["fullDocument"]["card"]["number"], "***")
        with open(self.out) as f:
            text = f.read()
        self.assertNotIn("4111", text)
        self.assertNotIn("5555", text)

    def test_limit_stops_after_n_events(self):
        rec = self.record("--limit", "2")
        rec.wait_recording()
        self.shop.orders.insert_many([{"_id": i, "total": i, "customer": "c"} for i in range(3)])
        self.assertEqual(rec.wait_exit(), 0, rec.stderr())
        self.assertEqual([e["documentKey"]["_id"] for e in read_events(self.out)],
                         [{"$numberInt": "0"}, {"$numberInt": "1"}])

    def test_sigterm_stops_recording_and_keeps_the_events(self):
        rec = self.record()
        rec.wait_recording()
        self.shop.orders.insert_one({"_id": 1, "total": 1, "customer": "c"})
        wait_until(lambda: os.path.getsize(self.out) > 0, 30, 0.02, "the recorded event")
        rec.proc.send_signal(signal.SIGTERM)
        self.assertEqual(rec.wait_exit(), 0, rec.stderr())
        self.assertIn("recorded 1 event(s)", rec.stderr())
        self.assertEqual(len(read_events(self.out)), 1)

    def test_record_refuses_an_unknown_stream(self):
        cp = run_cli(["record", ORDERS, "--stream", "nope", "--uri", self.shop_uri,
                      "--out", self.out])
        self.assertEqual(cp.returncode, 1)
        self.assertEqual(cp.stderr, 'flowwarden: record: unknown stream "nope" in %s\n' % ORDERS)
        self.assertFalse(os.path.exists(self.out))

    def test_record_names_an_output_it_cannot_write(self):
        out = os.path.join(self.tmp.name, "missing", "events.jsonl")
        cp = run_cli(["record", ORDERS, "--stream", STREAM, "--uri", self.shop_uri,
                      "--out", out])
        self.assertEqual(cp.returncode, 1)
        self.assertEqual(cp.stderr, "flowwarden: record: cannot write %s: "
                         "No such file or directory\n" % out)

    def test_replay_of_a_malformed_events_file_names_the_line(self):
        good = ('{"_id": {"_data": "01"}, "operationType": "delete", '
                '"ns": {"db": "shop", "coll": "orders"}, "documentKey": {"_id": 1}}')
        with open(self.out, "w") as f:
            f.write(good + "\n\n" + '{"_id": {"_data": "02"}, "operationType": ' + "\n")
        cp, per_event, _ = self.replay()
        self.assertEqual(cp.returncode, 1)
        self.assertEqual(per_event, [])
        self.assertRegex(cp.stderr, r"^flowwarden: replay: %s:3: not an Extended JSON document: "
                         % self.out)

    def test_replay_of_a_line_that_is_not_a_change_event_names_the_line(self):
        with open(self.out, "w") as f:
            f.write('{"hello": "world"}\n')
        cp, per_event, _ = self.replay()
        self.assertEqual(cp.returncode, 1)
        self.assertRegex(cp.stderr, r"^flowwarden: replay: %s: event 1: deliver: the event is not a "
                         r"change event: " % self.out)

    def test_replay_refuses_an_unknown_stream(self):
        with open(self.out, "w") as f:
            f.write("")
        cp, _, _ = self.replay("--stream", "nope")
        self.assertEqual(cp.returncode, 1)
        self.assertEqual(cp.stderr, 'flowwarden: replay: unknown stream "nope" in %s\n' % ORDERS)

    def test_replay_names_a_missing_events_file(self):
        missing = os.path.join(self.tmp.name, "nope.jsonl")
        cp, _, _ = self.replay(events=missing)
        self.assertEqual(cp.returncode, 1)
        self.assertEqual(cp.stderr, "flowwarden: replay: events_from: cannot open %s: "
                         "No such file or directory\n" % missing)


if __name__ == "__main__":
    import unittest
    unittest.main()
