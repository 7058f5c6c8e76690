"""Dependency outages (issue 29): the circuit breaker holds events instead of
dead-lettering them while the handler's dependency is down, probes, and goes
on in order after the recovery; the rate limit bounds handler attempts.

The dependency is a file: while it says "down" the handler raises
Http.Connect (what fw.http raises when a hook refuses connections), while it
says "bad" a Validation error; without it, the handler succeeds."""
import datetime
import json
import os
import threading
import signal
import socket
import subprocess
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dlqtest import FailureTestCase, timed_reports, wait_for
from fwtest import needs_standin, run_cli
from test_admin import PROMTOOL, http, parse_metrics, value


def refusing_port():
    """A loopback socket bound but not listening: connections to its port are refused, and no
    other process can take the port before serve() listens on it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


def serve(sock, handler):
    """A ThreadingHTTPServer listening on sock (from refusing_port), serving in a thread."""
    server = ThreadingHTTPServer(sock.getsockname(), handler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_activate()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server

HANDLER = """
local FLAG = %(flag)s
local function dependency()
  local f = io.open(FLAG, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
local function deliver(ctx)
  local doc = ctx:full_document()
  report({ id = doc._id, attempt = ctx:attempt_number() })
  local state = dependency()
  if state == "down" then error(fw.error("Http.Connect", "connection refused")) end
  if state == "bad" or doc.bad then error(fw.error("Validation", "rejected")) end
end
"""

def utc(text):
    """A timestamp of flowwarden's log or API (ISO 8601, UTC, 'Z') as a datetime."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


RETRY = '{ max_attempts = 2, initial_delay = "20ms", jitter = false }'

# FW_CHAOS_LONG=1: the scenario in full (500 events, the hook down
# for 10 s, at most 40 requests meanwhile); by default 30 events, 1.5 s.
LONG = os.environ.get("FW_CHAOS_LONG", "") not in ("", "0")
HOOK_EVENTS, HOOK_DOWN_S, HOOK_MAX_DURING = (500, 10.0, 40) if LONG else (30, 1.5, 8)


class Outage(FailureTestCase):

    def setUp(self):
        super().setUp()
        self.flag = os.path.join(self.tmp.name, "dependency")

    def set_dependency(self, state):
        if state is None:
            if os.path.exists(self.flag):
                os.remove(self.flag)
            return
        with open(self.flag + ".tmp", "w") as f:
            f.write(state)
        os.replace(self.flag + ".tmp", self.flag)

    def start_outage(self, streams, admin=True):
        body = HANDLER % {"flag": json.dumps(self.flag)} + streams
        p = self.run_fw(self.script(body), extra=["--admin", "127.0.0.1:0"] if admin else [])
        port = p.admin_port() if admin else None
        return p, port

    def ids(self, p, stream):
        return [r["id"] for r in p.reports(stream)]

    def test_breaker_holds_events_probes_and_delivers_in_order_after_recovery(self):
        self.set_dependency("down")
        p, port = self.start_outage("""
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        retry = %s, circuit = { open_for = "1500ms", max_open_for = "10s" } }
            fw.stream { name = "plain", collection = "plain", on_insert = deliver, dlq = true,
                        retry = %s }
            """ % (RETRY, RETRY))
        p.wait_open(2)
        self.db.orders.insert_many([{"_id": i} for i in range(1, 6)])
        # Without circuit the same outage dead-letters (the breaker is what bites).
        self.db.plain.insert_one({"_id": 100})
        entries = self.wait_dlq(1, stream="plain")
        self.assertEqual(entries[0]["error"]["type"], "Http.Connect")

        p.wait_log("circuit OPEN", stream="s")
        opened_at = time.monotonic()
        held = p.report_count("s")
        self.assertEqual(self.attempts_of(p, 1, "s"), [1, 2])
        # Seen: /v1/streams, status, metrics.
        st = json.loads(http(port, "GET", "/v1/streams/s")[1])
        self.assertEqual(st["circuit"]["state"], "open")
        self.assertEqual(st["circuit"]["error_type"], "Http.Connect")
        self.assertIsNotNone(st["circuit"]["since"])
        self.assertIsNotNone(st["circuit"]["next_probe"])
        r = run_cli(["status", "--admin", "http://127.0.0.1:%d" % port])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^s: circuit: open \(Http\.Connect\) since \S+Z; "
                                   r"next probe \S+Z$")
        text = http(port, "GET", "/metrics")[1]
        if PROMTOOL:
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, text=True,
                               capture_output=True)
            self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))
        got = parse_metrics(text)
        self.assertEqual(value(got, "flowwarden_stream_circuit_state", stream="s"), 1)
        self.assertIsNone(value(got, "flowwarden_stream_circuit_state", stream="plain"))
        self.assertEqual(value(got, "flowwarden_circuit_opened_total", stream="s",
                               type="Http.Connect"), 1)

        # No handler runs while it is open; then one probe (the held event).
        p.wait_log("circuit half-open: probing", stream="s")
        self.assertGreaterEqual(time.monotonic() - opened_at, 1.3)
        self.assertEqual(self.ids(p, "s")[held:], [1][:len(self.ids(p, "s")[held:])])
        p.wait_log("circuit open again", stream="s")
        self.assertEqual(self.attempts_of(p, 1, "s"), [1, 2, 3])
        self.assertEqual(self.ids(p, "s"), [1, 1, 1])

        # A reload while it is open keeps it open.
        with open(p.script, "a") as f:
            f.write("-- reloaded\n")
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log("reloaded ")
        st = json.loads(http(port, "GET", "/v1/streams/s")[1])
        self.assertEqual(st["circuit"]["state"], "open")

        # Recovery; resume probes at once instead of at the next probe (3 s after it opened
        # again): the probe's success is logged before the time the stream showed for it, both
        # on flowwarden's clock.
        self.set_dependency(None)
        next_probe = json.loads(http(port, "GET", "/v1/streams/s")[1])["circuit"]["next_probe"]
        r = run_cli(["resume", "s", "--admin", "http://127.0.0.1:%d" % port])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("circuit open: probing now", r.stdout)
        p.wait_log("circuit closed: the probe succeeded", stream="s")
        closed = [rec["ts"] for rec in p.records if rec.get("stream") == "s"
                  and "circuit closed: the probe succeeded" in rec.get("msg", "")]
        self.assertLess(utc(closed[0]), utc(next_probe), (closed, next_probe))
        p.wait_until(lambda: self.ids(p, "s")[-1:] == [5], what="every event")
        self.assertEqual(self.ids(p, "s"), [1, 1, 1, 1, 2, 3, 4, 5])
        self.assertEqual(self.dlq_entries(stream="s"), [])
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "flowwarden_stream_circuit_state", stream="s"), 0)
        self.assertEqual(json.loads(http(port, "GET", "/v1/streams/s")[1])["circuit"]["state"],
                         "closed")
        self.assertEqual(p.count_log("circuit OPEN", stream="s"), 1)
        self.assertEqual(p.count_log("circuit half-open: probing", stream="s"), 2)
        self.stop_cleanly(p)

    def test_a_hook_refusing_connections_then_back(self):
        """fw.http against a local port that refuses, then answers: the default
        circuit.on catches Http.Connect, few attempts during the outage, every
        event arrives once the hook is back, in order, and the DLQ stays empty
        (FW_CHAOS_LONG=1: 500 events, 10 s down, at most 40 attempts)."""
        sock, port = refusing_port()
        self.addCleanup(sock.close)
        p, _ = self.start_outage("""
            fw.stream { name = "s", collection = "orders", dlq = true,
                        retry = %s, circuit = { open_for = "300ms", max_open_for = "1s" },
                        on_insert = function(ctx)
                          local doc = ctx:full_document()
                          report({ id = doc._id, attempt = ctx:attempt_number() })
                          fw.http.post("http://127.0.0.1:%d/hook", { json = { id = doc._id },
                                       timeout = 2, raise_for_status = true })
                        end }
            """ % (RETRY, port), admin=False)
        p.wait_open()
        self.db.orders.insert_many([{"_id": i} for i in range(1, HOOK_EVENTS + 1)])
        p.wait_log("circuit OPEN")
        self.assertIn("with Http.Connect", [m for m in p.messages() if "circuit OPEN" in m][0])
        time.sleep(HOOK_DOWN_S)  # the outage goes on: probes at 300 ms, 600 ms, then every 1 s
        self.assertLessEqual(p.report_count("s"), HOOK_MAX_DURING)

        got = []

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append((time.monotonic(), json.loads(body)["id"]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = serve(sock, Hook)
        back = time.monotonic()
        try:
            wait_for(lambda: len(got) >= HOOK_EVENTS, 60, "%d requests" % HOOK_EVENTS)
        finally:
            server.shutdown()
            server.server_close()
        self.assertEqual([i for _, i in got], list(range(1, HOOK_EVENTS + 1)))
        # Handling again within 2 x max_open_for + 1 s of the recovery.
        self.assertLess(got[0][0] - back, 3.0)
        self.assertEqual(self.dlq_entries(), [])
        self.stop_cleanly(p)

    def test_other_errors_dead_letter_and_give_up_after_lets_the_stream_go_on(self):
        self.set_dependency(None)
        p, _ = self.start_outage("""
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        retry = %s,
                        circuit = { open_for = "200ms", give_up_after = "1s" } }
            """ % RETRY, admin=False)
        p.wait_open()
        # A Validation error while closed: DLQ, the breaker stays closed.
        self.db.orders.insert_one({"_id": 1, "bad": True})
        self.assertEqual(self.wait_dlq(1)[0]["error"]["type"], "Validation")
        self.assertEqual(p.count_log("circuit OPEN"), 0)

        # A probe failing with a Validation error dead-letters the held event.
        self.set_dependency("down")
        self.db.orders.insert_one({"_id": 2})
        p.wait_log("circuit OPEN")
        self.set_dependency("bad")
        entries = self.wait_dlq(2)
        self.assertEqual((entries[1]["documentKey"]["_id"], entries[1]["error"]["type"]),
                         (2, "Validation"))
        p.wait_log("not an outage type")

        # give_up_after: the held event is dead-lettered after 1 s, the stream goes on.
        self.set_dependency("down")
        t0 = time.monotonic()
        self.db.orders.insert_one({"_id": 3})
        entries = self.wait_dlq(3)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        self.assertEqual((entries[2]["documentKey"]["_id"], entries[2]["error"]["type"]),
                         (3, "Http.Connect"))
        self.assertGreater(entries[2]["attempts"], 2)
        p.wait_log("give_up_after")
        self.set_dependency(None)
        self.db.orders.insert_one({"_id": 4})
        p.wait_until(lambda: self.ids(p, "s")[-1:] == [4], what="event 4")
        self.stop_cleanly(p)

    def test_lanes_share_the_breaker(self):
        self.set_dependency("down")
        p, _ = self.start_outage("""
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        retry = %s, lanes = 4, circuit = { open_for = "1s" } }
            """ % RETRY, admin=False)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_log("circuit OPEN")
        before = p.report_count("s")
        # Events of other keys (other lanes) arrive while it is open.
        self.db.orders.insert_many([{"_id": i} for i in range(2, 9)])
        p.wait_log("circuit open again")
        # Every lane paused: the probe is the only attempt since.
        self.assertEqual(p.report_count("s") - before, 1)
        self.set_dependency(None)
        p.wait_until(lambda: set(self.ids(p, "s")) >= set(range(1, 9)) and
                     p.count_log("circuit closed") >= 1, what="every event")
        self.assertEqual(self.dlq_entries(), [])
        self.stop_cleanly(p)

    def circuit_doc(self, stream="s"):
        return self.db["_fw_checkpoints"].find_one({"_id": stream + "#circuit"})

    def status_circuit(self, port, stream="s"):
        return json.loads(http(port, "GET", "/v1/streams/" + stream)[1])["circuit"]

    def test_a_restart_during_an_outage_keeps_the_breaker_open(self):
        """Issue 37: the breaker lives in <stream>#circuit in _fw_checkpoints.
        A kill -9 while it is open and a restart while the hook still refuses:
        status says open at once, the first call comes no earlier than the
        probe time kept, one attempt per probe (not max_attempts); the hook
        back, it closes, the document goes, every event arrives in order."""
        sock, port = refusing_port()
        self.addCleanup(sock.close)
        streams = """
            fw.stream { name = "s", collection = "orders", dlq = true,
                        retry = { max_attempts = 3, initial_delay = "20ms", jitter = false },
                        circuit = { open_for = "%s", max_open_for = "%s" },
                        on_insert = function(ctx)
                          local doc = ctx:full_document()
                          report({ id = doc._id, attempt = ctx:attempt_number() })
                          fw.http.post("http://127.0.0.1:%d/hook", { json = { id = doc._id },
                                       timeout = 2, raise_for_status = true })
                        end }
            """
        p, _ = self.start_outage(streams % ("3s", "6s", port), admin=False)
        p.wait_open()
        self.db.orders.insert_many([{"_id": i} for i in range(1, 4)])
        p.wait_log("circuit OPEN", stream="s")
        self.assertEqual(self.attempts_of(p, 1, "s"), [1, 2, 3])
        self.wait_for(lambda: self.circuit_doc() is not None, what="the breaker's document")
        kept = self.circuit_doc()
        self.assertEqual((kept["state"], kept["errorType"], kept["stream"]),
                         ("open", "Http.Connect", "s"))
        self.assertEqual(kept["openForMs"], 3000)
        # Without ha it carries the run's writer generation (a killed run's late save never
        # replaces a newer run's: docs/operations.md#checkpoints).
        first_gen = self.checkpoint("s")["writerGen"]
        self.assertEqual(kept["writerGen"], first_gen)
        next_probe_ms = kept["nextProbeAt"].replace(
            tzinfo=datetime.timezone.utc).timestamp() * 1000.0
        p.kill9()
        self.assertEqual(self.circuit_doc()["nextProbeAt"], kept["nextProbeAt"])

        # The restart: open from the start, in status, /v1/streams and metrics.
        p, admin = self.start_outage(streams % ("1s", "2s", port))
        p.wait_log("circuit OPEN (restored)", stream="s")
        if p.report_count("s") == 0:
            st = self.status_circuit(admin)
            self.assertEqual((st["state"], st["error_type"]), ("open", "Http.Connect"))
            got = parse_metrics(http(admin, "GET", "/metrics")[1])
            self.assertEqual(value(got, "flowwarden_stream_circuit_state", stream="s"), 1)
            r = run_cli(["status", "--admin", "http://127.0.0.1:%d" % admin])
            self.assertRegex(r.stdout, r"(?m)^s: circuit: open \(Http\.Connect\)")
        # The first call no earlier than the probe kept, and one attempt per
        # probe: a failed probe opens it again (for twice the kept pause).
        p.wait_log("circuit open again", stream="s")
        first_ms = timed_reports(p, "s")[0][0]
        self.assertGreaterEqual(first_ms, next_probe_ms - 2)
        self.assertEqual(self.attempts_of(p, 1, "s"), [1])
        self.assertEqual(self.ids(p, "s"), [1])
        self.assertEqual(p.count_log("circuit OPEN:", stream="s"), 0)
        # the kept pause (3 s) doubled, capped by this run's max_open_for (2 s)
        self.wait_for(lambda: self.circuit_doc()["openForMs"] == 2000, what="the probe kept")
        self.assertEqual(self.circuit_doc()["writerGen"], first_gen + 1)
        self.assertEqual(self.status_circuit(admin)["state"], "open")

        got = []

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append(json.loads(body)["id"])
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = serve(sock, Hook)
        try:
            r = run_cli(["resume", "s", "--admin", "http://127.0.0.1:%d" % admin])
            self.assertEqual(r.returncode, 0, r.stderr)
            wait_for(lambda: len(got) >= 3, 30, "3 requests")
        finally:
            server.shutdown()
            server.server_close()
        p.wait_log("circuit closed: the probe succeeded", stream="s")
        self.assertEqual(got, [1, 2, 3])
        self.assertIsNone(self.circuit_doc())
        self.assertEqual(self.status_circuit(admin)["state"], "closed")
        self.assertEqual(self.dlq_entries(), [])
        self.stop_cleanly(p)

    def test_a_stop_keeps_the_breaker_and_lanes_share_the_restored_one(self):
        """Issue 37: a SIGTERM while the breaker is open leaves its document;
        the restart (4 lanes) holds every lane until one probe closes it."""
        self.set_dependency("down")
        streams = """
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        retry = { max_attempts = 3, initial_delay = "20ms", jitter = false },
                        lanes = 4, circuit = { open_for = "%s" } }
            """
        p, _ = self.start_outage(streams % "1s", admin=False)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_log("circuit OPEN", stream="s")
        self.wait_for(lambda: self.circuit_doc() is not None, what="the breaker's document")
        self.assertEqual(p.stop(), 0)
        self.assertIsNotNone(self.circuit_doc())

        p, admin = self.start_outage(streams % "1s")
        p.wait_log("circuit OPEN (restored)", stream="s")
        self.db.orders.insert_many([{"_id": i} for i in range(2, 9)])
        p.wait_log("circuit open again", stream="s")
        # Every lane paused: the probe (whichever lane's event came first
        # holds the restored breaker) is the only attempt of this run so far.
        self.assertEqual(len(self.ids(p, "s")), 1)
        self.set_dependency(None)
        p.wait_until(lambda: set(self.ids(p, "s")) >= set(range(1, 9)) and
                     p.count_log("circuit closed", stream="s") >= 1, what="every event")
        self.assertIsNone(self.circuit_doc())
        self.assertEqual(self.status_circuit(admin)["state"], "closed")
        self.assertEqual(self.dlq_entries(), [])
        self.stop_cleanly(p)

    def test_the_kept_breaker_is_fenced_by_the_leaders_epoch(self):
        """Issue 37, ha.mode = "leader": the leader writes the breaker with its
        lease's epoch; a document of a newer epoch (a newer leader's) is
        neither overwritten nor deleted by this one, and it goes on running."""
        self.set_dependency("down")
        p, _ = self.start_outage("""
            fw.defaults { ha = { mode = "leader", lease = "2s" } }
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        retry = %s, circuit = { open_for = "500ms", max_open_for = "500ms" } }
            """ % RETRY, admin=False)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        p.wait_log("circuit OPEN", stream="s")
        self.wait_for(lambda: self.circuit_doc() is not None, what="the breaker's document")
        epoch = self.checkpoint("s")["epoch"]
        self.assertGreater(epoch, 0)
        self.assertEqual(self.circuit_doc()["epoch"], epoch)
        self.db["_fw_checkpoints"].update_one({"_id": "s#circuit"},
                                              {"$set": {"epoch": epoch + 1, "probes": -7}})
        p.wait_log("circuit open again", count=2, stream="s")
        self.assertEqual(self.circuit_doc()["probes"], -7)   # not overwritten
        self.set_dependency(None)
        p.wait_log("circuit closed: the probe succeeded", stream="s")
        self.assertEqual(self.circuit_doc()["probes"], -7)   # nor deleted
        self.assertEqual(p.count_log("breaker goes on in memory"), 0)
        self.assertEqual(self.ids(p, "s")[-1], 1)
        self.stop_cleanly(p)

    def test_a_kept_breaker_that_no_longer_applies_starts_closed(self):
        """Issue 37: a kept breaker is dropped (document deleted, the stream
        handles at once) when the script has no circuit any more, or when its
        give_up_after passed while flowwarden was down."""
        now = datetime.datetime.now(datetime.timezone.utc)
        coll = self.db["_fw_checkpoints"]

        def keep(opened_ago_s):
            coll.replace_one({"_id": "s#circuit"}, {
                "_id": "s#circuit", "stream": "s", "state": "open", "errorType": "Http.Connect",
                "openedAt": now - datetime.timedelta(seconds=opened_ago_s), "openForMs": 60000,
                "nextProbeAt": now + datetime.timedelta(seconds=60), "probes": 3, "epoch": 0},
                upsert=True)

        self.set_dependency(None)
        for circuit, why, ago in (("", "the script has no circuit", 10),
                                  (', circuit = { give_up_after = "1m" }',
                                   "passed give_up_after", 120)):
            keep(ago)
            p, _ = self.start_outage("""
                fw.stream { name = "s", collection = "orders", on_insert = deliver,
                            dlq = true, retry = %s%s }
                """ % (RETRY, circuit), admin=False)
            p.wait_log(why, stream="s")
            p.wait_open()
            self.assertIsNone(self.circuit_doc())
            self.db.orders.insert_one({"_id": ago})
            p.wait_until(lambda: self.ids(p, "s") == [ago], what="the event handled at once")
            self.assertEqual(p.count_log("circuit OPEN"), 0)
            self.stop_cleanly(p)

    def test_rate_limit_bounds_attempts_retries_included(self):
        self.set_dependency(None)
        p, port = self.start_outage("""
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        retry = { max_attempts = 2, initial_delay = "1ms", jitter = false },
                        rate_limit = "50/s" }
            """)
        p.wait_open()
        # Every other event fails once (a retry: two attempts).
        self.db.orders.insert_many([{"_id": i, "bad": i % 2 == 0} for i in range(1, 101)])
        p.wait_until(lambda: p.report_count("s") >= 150, timeout=20, what="150 attempts")
        times = self.attempt_times(p)
        self.assertGreaterEqual(len(times), 150)
        # A burst of 50, then 50/s: the last 100 attempts need at least 2 s.
        self.assertGreaterEqual(times[149] - times[0], 1990)
        # The documented bound: at most burst + rate * t attempts in any t seconds
        # (log times are ms; one extra for their rounding).
        for i in range(len(times)):
            for j in range(i, len(times)):
                t = (times[j] - times[i]) / 1000.0
                self.assertLessEqual(j - i + 1, 50 + 50 * t + 1,
                                     "%d attempts in %.3f s" % (j - i + 1, t))
        st = json.loads(http(port, "GET", "/v1/streams/s")[1])
        self.assertEqual(st["rate_limit"]["rate"], "50/s")
        self.assertGreater(st["rate_limit"]["wait_seconds"], 0.5)
        r = run_cli(["status", "--admin", "http://127.0.0.1:%d" % port])
        self.assertRegex(r.stdout, r"(?m)^s: rate_limit: 50/s \(\d+\.\d s waited for tokens\)$")
        self.stop_cleanly(p)

    def test_rate_limit_burst_0_never_exceeds_the_rate_in_any_second(self):
        """Issue 38: "50/s" let 99 attempts through in one second after a
        pause (a full bucket, then the rate); { rate, burst = 0 } does not."""
        self.set_dependency(None)
        p, _ = self.start_outage("""
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        rate_limit = { rate = "20/s", burst = 0 } }
            """, admin=False)
        p.wait_open()
        self.db.orders.insert_many([{"_id": i} for i in range(1, 51)])
        p.wait_until(lambda: p.report_count("s") >= 50, timeout=20, what="50 attempts")
        times = self.attempt_times(p)
        self.assertEqual(len(times), 50)
        # 20/s from a bucket of one: 49 gaps of 50 ms (log times are ms).
        self.assertGreaterEqual(times[49] - times[0], 49 * 50 - 2)
        for i in range(len(times)):
            # Any one-second window (less the log's rounding) holds at most 20.
            inside = [t for t in times[i:] if t - times[i] < 1000 - 2]
            self.assertLessEqual(len(inside), 20, "%d attempts within a second" % len(inside))
        self.stop_cleanly(p)

    def attempt_times(self, p):
        from dlqtest import timed_reports
        return [ms for ms, _ in timed_reports(p, "s")]


@needs_standin("version mode (--server-version 7.0)")
class OutagePartitions(FailureTestCase):
    """partitions need $toHashedIndexKey (MongoDB 7.0)."""
    standin_args = ("--server-version", "7.0")
    def setUp(self):
        super().setUp()
        self.flag = os.path.join(self.tmp.name, "dependency")

    set_dependency = Outage.set_dependency
    start_outage = Outage.start_outage
    ids = Outage.ids

    def test_each_partition_unit_keeps_its_own_breaker(self):
        """Issue 37, partitions = 2: each unit has its breaker, kept under its
        own checkpoint id (<stream>#k/N#circuit) and restored by it."""
        self.set_dependency("down")
        script = """
            fw.stream { name = "s", collection = "orders", on_insert = deliver, dlq = true,
                        retry = %s, partitions = 2, circuit = { open_for = "500ms" } }
            """ % RETRY
        p, _ = self.start_outage(script, admin=False)
        p.wait_open(2)
        self.db.orders.insert_many([{"_id": i} for i in range(1, 21)])
        p.wait_log("circuit OPEN", count=2)
        ids = ["s#0/2#circuit", "s#1/2#circuit"]
        coll = self.db["_fw_checkpoints"]
        self.wait_for(lambda: coll.count_documents({"_id": {"$in": ids}}) == 2,
                      what="a breaker document per unit")
        self.assertEqual(sorted(d["stream"] for d in coll.find({"_id": {"$in": ids}})),
                         ["s#0/2", "s#1/2"])
        p.kill9()

        p, _ = self.start_outage(script, admin=False)
        p.wait_log("circuit OPEN (restored)", count=2)
        p.wait_log("circuit open again", count=2)
        self.set_dependency(None)
        p.wait_until(lambda: set(self.ids(p, None)) >= set(range(1, 21)) and
                     p.count_log("circuit closed: the probe succeeded") >= 2, what="every event")
        self.wait_for(lambda: coll.count_documents({"_id": {"$regex": "#circuit$"}}) == 0,
                      what="the breaker documents gone")
        self.assertEqual(self.dlq_entries(), [])
        self.stop_cleanly(p)


if __name__ == "__main__":
    unittest.main()
