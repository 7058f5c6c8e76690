"""The admin endpoint of a running flowwarden (issue 13): exact numbers in
/metrics for a known workload (checked by promtool when installed), /readyz
following the server, pause / resume / restart / reload through the endpoint
and the CLI, the token, and the refusal to serve an open address without one."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from fwtest import (needs_standin, SOURCE_DIR, StandIn, StandInTestCase, auth_uri, clean_env, run_cli,
                    wait_until, write_script)

PROMTOOL = shutil.which("promtool")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{(name, frozenset(labels.items())): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise AssertionError("not a sample line: %r" % line)
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(metrics, name, **labels):
    return metrics.get((name, frozenset(labels.items())))


def http(port, method, path, token=None, timeout=30):
    """(status, body text, headers) of one request to the endpoint."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=b"" if method == "POST" else None)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKLOAD = """
local processed = fw.metrics.counter("shop_processed_total", "Orders a handler processed.",
                                     { labels = { "kind" } })
local sizes = fw.metrics.histogram("shop_order_items", "Items per order.", { 1, 5, 10 })
fw.stream {
  name = "orders", collection = "orders",
  retry = { max_attempts = 3, initial_delay = "20ms", jitter = false,
            no_retry_on = { "Validation" } },
  dlq = true,
  on_insert = function(ctx)
    local d = ctx:full_document()
    if d.kind == "bad" then error(fw.error("Validation", "rejected")) end
    if d.kind == "flaky" and ctx:attempt_number() == 1 then
      error(fw.error("Transient", "try again"))
    end
    processed:inc(1, { kind = d.kind })
    sizes:observe(d.items)
    -- Handler IO, counted per client.
    fw.mongo.collection("%(db)s", "totals"):update_one({ _id = d.kind }, { ["$inc"] = { n = 1 } },
                                                       { upsert = true })
    if d._id %% 10 == 9 then
      fw.http.get("http://127.0.0.1:%(port)d/healthz")
    end
    report({ id = d._id })
  end,
}
"""


class Metrics(StandInTestCase):

    def run_on_free_port(self, script):
        """flowwarden with script (its %(port)d the endpoint's) serving --admin on a port picked
        free; picked again when another process took it before flowwarden could bind it."""
        for attempt in range(3):
            port = free_port()
            p = self.run_fw(self.script(script % {"db": self.db_name, "port": port}),
                            extra=["--admin", "127.0.0.1:%d" % port])
            serving = "admin endpoint on 127.0.0.1:%d (port %d)" % (port, port)
            p.wait_until(lambda: p.count_log(serving) or p.proc.poll() is not None,
                         30, "the admin endpoint or an exit")
            if p.count_log(serving) == 0 and p.proc.poll() is not None:
                p.wait_exit()
                if p.count_log("is the port in use"):
                    continue
            return p, port
        raise AssertionError("the admin endpoint's port was taken three times")

    def test_a_known_workload_gives_exactly_its_numbers(self):
        n, m, k = 40, 5, 4
        p, port = self.run_on_free_port(WORKLOAD)
        self.assertEqual(p.admin_port(), port)
        p.wait_open()
        # 200 idle connections to the endpoint meanwhile: they must not slow
        # the events down nor block /metrics.
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        try:
            t0 = time.monotonic()
            docs = []
            for i in range(n):
                kind = "bad" if i < m else "flaky" if i < m + k else "ok"
                docs.append({"_id": i, "kind": kind, "items": i % 12})
            self.db.orders.insert_many(docs)
            p.wait_reports(n - m)
            self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == m, what="DLQ entries")
            elapsed = time.monotonic() - t0
            # A handler reports before it returns; its event is counted after.
            self.wait_for(lambda: value(parse_metrics(http(port, "GET", "/metrics", timeout=5)[1]),
                                        "flowwarden_events_handled_total", outcome="ok",
                                        stream="orders") == n - m,
                          what="the last handled event counted")
            status, text, headers = http(port, "GET", "/metrics", timeout=5)
        finally:
            for s in idle:
                s.close()
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
        self.assertLess(elapsed, 20)
        got = parse_metrics(text)
        s = {"stream": "orders"}
        self.assertEqual(value(got, "flowwarden_events_total", operation="insert", **s), n)
        self.assertEqual(value(got, "flowwarden_events_total", operation="update", **s), 0)
        self.assertEqual(value(got, "flowwarden_events_handled_total", outcome="ok", **s), n - m)
        self.assertEqual(value(got, "flowwarden_events_handled_total", outcome="dlq", **s), m)
        self.assertEqual(value(got, "flowwarden_events_handled_total", outcome="skipped", **s), 0)
        self.assertEqual(value(got, "flowwarden_events_handled_total", outcome="lost", **s), 0)
        self.assertEqual(value(got, "flowwarden_retries_total", **s), k)
        self.assertEqual(value(got, "flowwarden_handler_errors_total", error_type="Validation",
                               **s), m)
        self.assertEqual(value(got, "flowwarden_handler_errors_total", error_type="Transient",
                               **s), k)
        self.assertEqual(value(got, "flowwarden_dlq_writes_total", **s), m)
        # One observation per attempt.
        self.assertEqual(value(got, "flowwarden_handler_duration_seconds_count", **s), n + k)
        self.assertEqual(value(got, "flowwarden_handler_duration_seconds_bucket", le="+Inf", **s),
                         n + k)
        self.assertEqual(value(got, "flowwarden_stream_up", **s), 1)
        self.assertEqual(value(got, "flowwarden_stream_state", state="running", **s), 1)
        self.assertEqual(value(got, "flowwarden_stream_state", state="paused", **s), 0)
        self.assertGreater(value(got, "flowwarden_checkpoint_writes_total", **s), 0)
        self.assertEqual(value(got, "flowwarden_checkpoint_errors_total", **s), 0)
        self.assertGreater(value(got, "flowwarden_lua_memory_bytes", **s), 10000)
        self.assertGreater(value(got, "flowwarden_last_event_timestamp_seconds", **s),
                           time.time() - 120)
        self.assertGreaterEqual(value(got, "flowwarden_lag_seconds", **s), 0)
        self.assertEqual(value(got, "flowwarden_reloads_total", result="success"), 0)
        self.assertTrue(any(name == "flowwarden_script_info" for name, _ in got))
        self.assertTrue(any(name == "flowwarden_build_info" for name, _ in got))
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_open_fds", "process_start_time_seconds"):
            self.assertIn((name, frozenset()), got)
        # Handler IO: one update per handled event, a GET every tenth.
        self.assertEqual(value(got, "flowwarden_io_requests_total", client="mongo", result="ok",
                               **s), n - m)
        self.assertEqual(value(got, "flowwarden_io_requests_total", client="mongo",
                               result="error", **s), 0)
        self.assertEqual(value(got, "flowwarden_io_requests_total", client="http", result="ok",
                               **s), 4)
        self.assertEqual(value(got, "flowwarden_io_duration_seconds_count", client="mongo", **s),
                         n - m)
        # The handler's own metrics, per stream.
        self.assertEqual(value(got, "shop_processed_total", kind="ok", **s), n - m - k)
        self.assertEqual(value(got, "shop_processed_total", kind="flaky", **s), k)
        self.assertEqual(value(got, "shop_order_items_count", **s), n - m)
        if PROMTOOL:
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, text=True,
                               capture_output=True)
            self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))
        # The DLQ gauges come from a count (as the stream starts, then every 30 s).
        self.assertIsNotNone(value(got, "flowwarden_dlq_pending", **s))
        wait_until(lambda: value(parse_metrics(http(port, "GET", "/metrics")[1]),
                                 "flowwarden_dlq_pending", **s) == m, 45, 0.5, "the DLQ count")
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertGreater(value(got, "flowwarden_dlq_oldest_pending_age_seconds", **s), 0)
        # What `flowwarden dlq stats --json` prints, through the endpoint.
        status, text, _ = http(port, "GET", "/v1/dlq/stats")
        self.assertEqual(status, 200, text)
        stats = json.loads(text)
        self.assertEqual((stats["total"], stats["by_stream"], stats["by_status"],
                          stats["by_error_type"]),
                         (m, {"orders": m}, {"PENDING": m}, {"Validation": m}))
        self.assertEqual(http(port, "POST", "/v1/dlq/stats")[0], 405)
        p.stop()

    @needs_standin("kill and restart (a stand-in of its own)")
    def test_readyz_follows_the_server(self):
        data = tempfile.TemporaryDirectory()
        self.addCleanup(data.cleanup)
        standin = StandIn(["--data-dir", data.name])
        standin.start()
        self.addCleanup(standin.stop)
        uri = auth_uri("mongodb://%s/rz?replicaSet=rs0&serverSelectionTimeoutMS=2000"
                       % standin.host)
        p = self.run_fw(self.script("""
            fw.stream { name = "rz", collection = "c", restart = { initial_delay = "200ms",
                        max_delay = "1s" }, on_insert = function(ctx) report({}) end }
            """), uri=uri, extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open()
        wait_until(lambda: http(port, "GET", "/readyz")[0] == 200, 10, message="ready")
        status, body, _ = http(port, "GET", "/healthz")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))

        port_mongo = standin.port
        standin.kill9()
        wait_until(lambda: http(port, "GET", "/readyz")[0] == 503, 30, 0.1, "503")
        status, body, _ = http(port, "GET", "/readyz")
        doc = json.loads(body)
        self.assertFalse(doc["ready"])
        self.assertEqual(doc["not_ready"][0]["stream"], "rz")
        self.assertEqual(doc["not_ready"][0]["state"], "restarting")
        # Waiting out the backoff, or probing the server (stream_connect.c).
        self.assertRegex(doc["not_ready"][0]["reason"],
                         r"re-opening it in|cannot reach MongoDB at .*: .*re-opening the change "
                         r"stream once it answers")
        # /healthz still answers: the process is fine.
        self.assertEqual(http(port, "GET", "/healthz")[0], 200)

        standin2 = StandIn(["--data-dir", data.name, "--port", str(port_mongo)])
        standin2.start()
        self.addCleanup(standin2.stop)
        wait_until(lambda: http(port, "GET", "/readyz")[0] == 200, 60, 0.1, "ready again")
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertGreaterEqual(value(got, "flowwarden_stream_restarts_total", stream="rz",
                                      reason="error"), 1)
        p.stop()


class Control(StandInTestCase):

    SCRIPT = """
        fw.stream { name = "s", collection = "c", checkpoint = { save_every = 100 },
                    on_insert = function(ctx) report({ i = ctx:full_document().i }) end }
        fw.stream { name = "other", collection = "o", on_insert = function(ctx) end }
        """

    def test_pause_holds_events_and_resume_delivers_them_in_order(self):
        p = self.run_fw(self.script(self.SCRIPT), extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open(2)
        url = "http://127.0.0.1:%d" % port
        r = run_cli(["pause", "s", "--admin", url])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "pause s: ok: paused: checkpoint written, change stream "
                                   "closed; state paused\n")
        p.wait_log("paused: checkpoint written, change stream closed", stream="s")
        status, body, _ = http(port, "GET", "/v1/streams/s")
        self.assertEqual(json.loads(body)["state"], "paused")
        status, body, _ = http(port, "GET", "/readyz")
        self.assertEqual(status, 503)
        self.assertIn("paused by the operator", body)

        self.db.c.insert_many([{"i": i} for i in range(1000)])
        time.sleep(1.5)
        self.assertEqual(p.report_count("s"), 0)
        r = run_cli(["status", "--admin", url])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^STREAM +STATE +LAG +EVENTS/S +DLQ PENDING +LAST ERROR$")
        self.assertRegex(r.stdout, r"(?m)^s +paused ")
        self.assertRegex(r.stdout, r"(?m)^other +running ")
        self.assertIn("s: paused by the operator", r.stdout)
        # Pausing twice is fine.
        self.assertEqual(http(port, "POST", "/v1/streams/s/pause")[0], 200)

        r = run_cli(["resume", "s", "--admin", url])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resume s: ok: resumed from its checkpoint", r.stdout)
        reports = p.wait_reports(1000, "s")
        self.assertEqual([x["i"] for x in reports], list(range(1000)))
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "flowwarden_events_total", stream="s", operation="insert"),
                         1000)
        time.sleep(0.5)
        self.assertEqual(p.report_count("s"), 1000)  # none twice
        p.stop()

    def test_restart_reload_and_errors_through_the_endpoint(self):
        path = self.script(self.SCRIPT)
        p = self.run_fw(path, extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open(2)
        status, body, _ = http(port, "POST", "/v1/streams/s/restart")
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(doc["message"], "restarted from its checkpoint")
        self.assertEqual(doc["stream"]["state"], "running")
        p.wait_log("restarting: checkpoint written", stream="s")
        self.db.c.insert_one({"i": 1})
        p.wait_reports(1, "s")
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "flowwarden_stream_restarts_total", stream="s",
                               reason="admin"), 1)

        status, body, _ = http(port, "POST", "/v1/streams/nope/pause")
        self.assertEqual((status, json.loads(body)),
                         (404, {"error": 'no stream named "nope"', "status": 404}))
        self.assertEqual(http(port, "GET", "/v1/streams/s/pause")[0], 405)
        self.assertEqual(http(port, "GET", "/v1/nothing")[0], 404)

        # A broken script: 422, the old one runs on.
        with open(path, "a") as f:
            f.write("\nfw.stream { name = 'bad' }\n")
        status, body, _ = http(port, "POST", "/v1/reload")
        self.assertEqual(status, 422, body)
        self.assertIn("reload failed; still running script version", json.loads(body)["error"])
        r = run_cli(["reload", "--admin", "127.0.0.1:%d" % port])
        self.assertEqual(r.returncode, 1)
        self.assertIn("flowwarden reload: reload failed; still running script version", r.stderr)
        self.assertIn("(HTTP 422)", r.stderr)
        # Fixed: 200, counted.
        write_script(self.tmp.name, self.SCRIPT.replace('"other"', '"other2"'))
        status, body, _ = http(port, "POST", "/v1/reload")
        self.assertEqual(status, 200, body)
        self.assertRegex(json.loads(body)["message"], r"^reloaded .*: version \w+ -> \w+ in \d+ "
                         r"ms \(1 kept their position, 0 restarted, 1 added, 1 removed\)$")
        status, body, _ = http(port, "GET", "/v1/streams")
        names = [x["name"] for x in json.loads(body)["streams"]]
        self.assertEqual(sorted(names), ["other2", "s"])
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "flowwarden_reloads_total", result="failure"), 2)
        self.assertEqual(value(got, "flowwarden_reloads_total", result="success"), 1)
        self.assertIsNone(value(got, "flowwarden_stream_up", stream="other"))
        p.stop()


    def test_a_failed_stream_can_be_restarted_and_refuses_pause(self):
        # The server refuses this pipeline: the stream gives up after one
        # restart, while the other runs on.
        p = self.run_fw(self.script("""
            fw.stream { name = "doomed", collection = "c", pipeline = { { ["$nope"] = {} } },
                        restart = { max_attempts = 1, initial_delay = "50ms" },
                        on_insert = function(ctx) end }
            fw.stream { name = "ok", collection = "o", on_insert = function(ctx) end }
            """), extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_log("STREAM STOPPED", stream="doomed")
        status, body, _ = http(port, "GET", "/v1/streams/doomed")
        doc = json.loads(body)
        self.assertEqual(doc["state"], "failed")
        self.assertIn("restart.max_attempts reached", doc["reason"])
        status, body, _ = http(port, "POST", "/v1/streams/doomed/pause")
        self.assertEqual(status, 409)
        self.assertEqual(json.loads(body)["error"],
                         'stream "doomed" stopped on an error: restart it (flowwarden restart '
                         'doomed) or fix the script and reload')
        status, body, _ = http(port, "POST", "/v1/streams/doomed/restart")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["message"],
                         'stream "doomed" started again from its checkpoint')
        p.wait_log("STREAM STOPPED", count=2, stream="doomed")
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "flowwarden_stream_restarts_total", stream="doomed",
                               reason="admin"), 1)
        self.assertIsNone(p.proc.poll())
        p.stop()

    def test_a_restart_after_a_pause_taken_between_opens_is_counted(self):
        # The server refuses the pipeline: the stream waits out its restart
        # backoff with its change stream closed, and is paused there.
        p = self.run_fw(self.script("""
            fw.stream { name = "s", collection = "c", pipeline = { { ["$nope"] = {} } },
                        restart = { max_attempts = 100, initial_delay = "30s" },
                        on_insert = function(ctx) end }
            """), extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_log("cannot open change stream", stream="s")
        status, body, _ = http(port, "POST", "/v1/streams/s/pause")
        self.assertEqual(status, 200, body)
        status, body, _ = http(port, "POST", "/v1/streams/s/restart")
        self.assertEqual(status, 200, body)
        p.wait_log("cannot open change stream", count=2, stream="s")
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "flowwarden_stream_restarts_total", stream="s",
                               reason="admin"), 1)
        p.stop()

    def test_a_reload_that_changes_a_metric_fails_and_keeps_it(self):
        body = """
            local c = fw.metrics.%s("shop_depth", "Depth.")
            fw.stream { name = "s", collection = "c",
                        on_insert = function(ctx) c:%s(5) report({}) end }
            """
        path = self.script(body % ("gauge", "set"))
        p = self.run_fw(path, extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open()
        self.db.c.insert_one({})
        p.wait_reports(1)
        write_script(self.tmp.name, body % ("histogram", "observe"))
        status, text, _ = http(port, "POST", "/v1/reload")
        self.assertEqual(status, 422, text)
        self.assertIn("fw.metrics.histogram: metric shop_depth is already defined as a gauge "
                      "with labels {}; it cannot become a histogram", json.loads(text)["error"])
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "shop_depth", stream="s"), 5)
        self.assertEqual(value(got, "flowwarden_reloads_total", result="failure"), 1)
        # The same definition again is fine, and keeps the value.
        write_script(self.tmp.name, body % ("gauge", "add"))
        self.assertEqual(http(port, "POST", "/v1/reload")[0], 200)
        self.db.c.insert_one({})
        p.wait_reports(2)
        got = parse_metrics(http(port, "GET", "/metrics")[1])
        self.assertEqual(value(got, "shop_depth", stream="s"), 10)
        p.stop()


class Token(StandInTestCase):

    def test_posts_need_the_token_gets_do_not(self):
        script = self.script("""
            fw.defaults { admin = { listen = "127.0.0.1:0", token = fw.env("FW_ADMIN_TOKEN") } }
            fw.stream { name = "s", collection = "c", on_insert = function(ctx) end }
            """)
        p = self.run_fw(script, env=clean_env({"FW_ADMIN_TOKEN": "t0ken-123"}))
        port = p.admin_port()
        p.wait_open()
        self.assertEqual(http(port, "POST", "/v1/streams/s/pause")[0], 401)
        self.assertEqual(http(port, "POST", "/v1/streams/s/pause", token="wrong")[0], 401)
        self.assertEqual(http(port, "POST", "/v1/reload")[0], 401)
        self.assertEqual(http(port, "GET", "/metrics")[0], 200)
        self.assertEqual(http(port, "GET", "/v1/streams")[0], 200)
        url = "127.0.0.1:%d" % port
        r = run_cli(["pause", "s", "--admin", url])
        self.assertEqual(r.returncode, 1)
        self.assertIn("flowwarden pause s: missing or wrong token", r.stderr)
        self.assertIn("(HTTP 401)", r.stderr)
        r = run_cli(["pause", "s", "--admin", url],
                    env=clean_env({"FLOWWARDEN_ADMIN_TOKEN": "t0ken-123"}))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(http(port, "POST", "/v1/streams/s/resume", token="t0ken-123")[0], 200)
        r = run_cli(["status", "--json", "--admin", url])
        self.assertEqual(r.returncode, 0)
        self.assertEqual([s["name"] for s in json.loads(r.stdout)["streams"]], ["s"])
        p.stop()

    def test_an_open_address_without_a_token_is_refused_at_start(self):
        script = self.script("""
            fw.stream { name = "s", collection = "c", on_insert = function(ctx) end }
            """)
        p = self.run_fw(script, extra=["--admin", "0.0.0.0:0"])
        self.assertEqual(p.wait_exit(), 1)
        errors = p.messages(level="error")
        self.assertEqual(errors, [
            "--admin: refusing to serve the admin endpoint on 0.0.0.0:0 without a token: anyone "
            "who can reach that address could pause streams and reload the script. Set a token "
            "(fw.defaults { admin = { token = fw.env(\"FW_ADMIN_TOKEN\") } }) or listen on a "
            "loopback address such as 127.0.0.1"])
        self.assertEqual(p.count_log("change stream open"), 0)
        # With a token (here from FLOWWARDEN_ADMIN_TOKEN) it starts.
        p = self.run_fw(script, extra=["--admin", "0.0.0.0:0"],
                        env=clean_env({"FLOWWARDEN_ADMIN_TOKEN": "t0ken-123"}))
        p.admin_port()
        p.wait_open()
        p.stop()
        # `check` reports the script's own open address without a token.
        bad = write_script(self.tmp.name, """
            fw.defaults { admin = { listen = "0.0.0.0:9464" } }
            fw.stream { name = "s", collection = "c", on_insert = function(ctx) end }
            """, "open.lua")
        r = run_cli(["check", bad])
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"open.lua:\d+: defaults: admin.listen: refusing to serve the "
                                   r"admin endpoint on 0.0.0.0:9464 without a token")

    def test_status_without_an_endpoint_says_so(self):
        r = run_cli(["status", "--admin", "127.0.0.1:1"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("flowwarden status: cannot reach the admin endpoint at http://127.0.0.1:1",
                      r.stderr)
        r = run_cli(["pause"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("flowwarden pause: missing STREAM", r.stderr)


class Examples(StandInTestCase):
    """examples/grafana/flowwarden.json and examples/flowwarden-alerts.yml query only metrics
    a running flowwarden serves."""

    def metric_names(self, expr):
        names = set(re.findall(r"\b((?:flowwarden|process)_[a-z_]+)\b", expr))
        return {re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count"))
                and "duration" in n else n for n in names}

    def test_the_dashboard_and_the_alert_rules_use_metrics_that_exist(self):
        # ha: the group families (flowwarden_unit_*) too, which the alerts use (issue 38).
        p = self.run_fw(self.script("""
            fw.defaults { ha = { mode = "shared", lease = "1s" } }
            fw.stream { name = "s", collection = "c", dlq = true,
                        on_insert = function(ctx) end }
            """), extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_open()
        text = http(port, "GET", "/metrics")[1]
        families = set(re.findall(r"(?m)^# TYPE (\S+) ", text))
        p.stop()

        with open(os.path.join(SOURCE_DIR, "examples", "grafana", "flowwarden.json")) as f:
            dash = json.load(f)
        queried = set()
        for panel in dash["panels"]:
            self.assertTrue(panel["targets"], panel["title"])
            for t in panel["targets"]:
                queried |= self.metric_names(t["expr"])
        for want in ("flowwarden_events_total", "flowwarden_lag_seconds",
                     "flowwarden_handler_duration_seconds", "flowwarden_handler_errors_total",
                     "flowwarden_retries_total", "flowwarden_dlq_pending",
                     "flowwarden_dlq_oldest_pending_age_seconds", "flowwarden_stream_state"):
            self.assertIn(want, queried)
        self.assertEqual(queried - families, set())

        rules = os.path.join(SOURCE_DIR, "examples", "flowwarden-alerts.yml")
        with open(rules) as f:
            text = f.read()
        # One-line expressions and the lines of multi-line ones (expr: |).
        exprs = re.findall(r"(?m)^\s+expr: (.+)$", text) + re.findall(
            r"(?m)^\s+expr: \|\n((?:\s{10,}.+\n)+)", text)
        used = set()
        for e in exprs:
            used |= self.metric_names(e)
        self.assertTrue(used)
        # The oplog window is absent where the oplog cannot be read, as here
        # (test_oplog_window reads it from a stand-in that has one).
        self.assertEqual(used - families - {"flowwarden_oplog_window_seconds"}, set())
        if PROMTOOL:
            r = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
