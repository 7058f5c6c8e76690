"""Secrets never leak: a password in a connection URI and a value read with
fw.env, used by handlers whose IO fails, appear in no log line, no `check`
output, no error message and no DLQ entry.

Against a stand-in that requires authentication, flowwarden (libmongoc) logs
in with the password of its URI, and a wrong or mistyped one is never shown.
The harness's scan (StandInTestCase.assert_no_secret, run at the end of every
test against such a stand-in, and of the whole suite under FW_TEST_AUTH=1) is
itself tested here: it must find a leak when there is one."""
import http.server
import json
import tempfile
import threading
import urllib.request

import fwtest
from fwtest import (needs_standin, StandInTestCase, clean_env, refused_port, run_cli,
                    with_credentials)

PASSWORD = "Pw-s3cr3t-1f2e"      # recognisable, and not a substring of anything else
TOKEN = "tok-s3cr3t-9c8d"
# The stand-in's user's password: '/' and '@' must be percent-encoded in a URI.
AUTH_PASSWORD = "Au7h-s3cr3t/4b5c@9e1d"


class Refuse(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"busy")

    def log_message(self, *args):
        pass


def closed_port():
    return refused_port()


class SecretsTest(StandInTestCase):

    def test_no_secret_in_logs_check_output_errors_or_dlq_entries(self):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        audit = ("mongodb://writer:%s@127.0.0.1:%d/?replicaSet=rs0&serverSelectionTimeoutMS=300"
                 "&connectTimeoutMS=300" % (PASSWORD, closed_port()))
        script = self.script("""
            fw.connection { name = "audit", uri = fw.env("AUDIT_URI") }
            local token = fw.env("HOOK_TOKEN")
            fw.stream {
              name = "s", collection = "orders", dlq = true, timeout = "5s",
              on_insert = function(ctx)
                local doc = ctx:full_document()
                if doc.via == "mongo" then
                  fw.mongo.collection("audit", "log", { connection = "audit" }):insert_one({ x = 1 })
                else
                  fw.http.post("http://u:" .. token .. "@127.0.0.1:%d/hook?key=" .. token,
                    { json = { id = doc._id }, headers = { Authorization = "Bearer " .. token },
                      raise_for_status = true })
                end
              end,
              on_error = function(err, ctx)
                fw.log.warn("failed:", tostring(err))
              end,
            }
        """ % srv.server_port)
        env = clean_env({"AUDIT_URI": audit, "HOOK_TOKEN": TOKEN})
        check = run_cli(["check", script],
                        env=clean_env({"AUDIT_URI": audit, "HOOK_TOKEN": TOKEN,
                                       "FLOWWARDEN_URI": self.uri}))
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("connection audit: mongodb://writer:***@", check.stdout)

        p = self.run_fw(script, env=env, extra=["--log-level", "debug"])
        p.wait_open()
        self.db.orders.insert_many([{"_id": 1, "via": "mongo"}, {"_id": 2, "via": "http"}])
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 2, 60, "two DLQ entries")
        self.assertEqual(p.stop(), 0)

        entries = list(self.db["_fw_dlq"].find())
        types = sorted(e["error"]["type"] for e in entries)
        self.assertEqual(types, ["Http.Status.Transient", "Mongo.Network"])
        seen = "\n".join(p.raw_lines()) + check.stdout + check.stderr + json.dumps(
            entries, default=str)
        for secret in (PASSWORD, TOKEN):
            self.assertNotIn(secret, seen)


AUTH_SCRIPT = """
    fw.stream {
      name = "s", collection = "orders", dlq = true,
      on_insert = function(ctx)
        local doc = ctx:full_document()
        if doc.bad then error(fw.error("Validation", "rejected " .. tostring(doc._id))) end
        fw.mongo.collection("%s", "effects"):insert_one({ _id = doc._id })
        report({ id = doc._id })
      end,
    }
"""


@needs_standin("users (--auth writer:...)")
class AuthenticatedServer(StandInTestCase):
    """A stand-in that requires authentication (--auth): the tearDown of every
    test scans for AUTH_PASSWORD (fwtest's assert_no_secret)."""

    standin_auth = ("writer", AUTH_PASSWORD)

    def plain_uri(self):
        return "mongodb://127.0.0.1:%d/%s?replicaSet=rs0" % (self.standin.port, self.db_name)

    def test_flowwarden_logs_in_with_the_password_of_its_uri(self):
        script = self.script(AUTH_SCRIPT % self.db_name)
        self.assertIn("writer:Au7h-s3cr3t%2F4b5c%409e1d@", self.uri)
        check = run_cli(["check", script], env=clean_env({"FLOWWARDEN_URI": self.uri}))
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("uri: mongodb://writer:***@127.0.0.1:%d/%s?replicaSet=rs0&authSource=admin "
                      "(from --uri or FLOWWARDEN_URI)\n" % (self.standin.port, self.db_name),
                      check.stdout)
        p = self.run_fw(script, extra=["--log-level", "debug"])
        p.wait_open()
        self.db.orders.insert_many([{"_id": 1}, {"_id": 2, "bad": True}])
        self.assertEqual(p.wait_reports(1), [{"id": 1}])
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 1, 30, "the DLQ entry")
        self.assertEqual(self.db.effects.count_documents({}), 1)
        listed = run_cli(["dlq", "list", script, "--uri", self.uri])
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("Validation", listed.stdout)
        self.assertEqual(p.stop(), 0)
        self.assert_no_secret(AUTH_PASSWORD)

    def test_a_wrong_password_is_refused_and_never_shown(self):
        wrong = "Wr0ng-s3cr3t/6a7b"
        uri = with_credentials(self.plain_uri() + "&serverSelectionTimeoutMS=2000",
                               ("writer", wrong))
        script = self.script(AUTH_SCRIPT % self.db_name)
        p = self.run_fw(script, uri=uri, extra=["--log-level", "debug"])
        p.wait_log("Authentication failed.")
        self.assertEqual(p.stop(), 0)
        stats = run_cli(["dlq", "stats", script, "--uri", uri])
        self.assertNotEqual(stats.returncode, 0)
        self.assertIn("Authentication failed.", stats.stderr)
        self.assert_no_secret(wrong)

    def test_a_password_that_is_not_percent_encoded_is_never_shown(self):
        # The regression: libmongoc rejects the URI ('/' ends the host list), and
        # the error message and `check` printed it, password and all.
        raw = "mongodb://writer:%s@127.0.0.1:%d/%s?replicaSet=rs0" % (
            AUTH_PASSWORD, self.standin.port, self.db_name)
        shown = "mongodb://writer:***@127.0.0.1:%d/%s?replicaSet=rs0" % (
            self.standin.port, self.db_name)
        script = self.script(AUTH_SCRIPT % self.db_name)
        r = run_cli(["run", script, "--uri", raw])
        self.assertEqual(r.returncode, 1)
        self.assertIn('invalid MongoDB URI "%s"' % shown, r.stderr)
        r = run_cli(["check", script], env=clean_env({"FLOWWARDEN_URI": raw}))
        self.assertIn("uri: %s (from --uri or FLOWWARDEN_URI)" % shown, r.stdout)
        conn = self.script('''fw.connection { name = "audit", uri = fw.env("AUDIT_URI") }\n'''
                           + AUTH_SCRIPT % self.db_name, "conn.lua")
        r = run_cli(["check", conn], env=clean_env({"AUDIT_URI": raw, "FLOWWARDEN_URI": self.uri}))
        self.assertIn('connection "audit": uri: invalid MongoDB URI', r.stdout + r.stderr)
        self.assert_no_secret(AUTH_PASSWORD)


def get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
        return r.read().decode()


# Issue 25, 1: a handler's own message quoting a value of fw.env. The token
# must be absent and the marker present in each place flowwarden writes.
HANDLER_SCRIPT = """
    local token = fw.env("HOOK_TOKEN")
    local region = fw.env("REGION", { secret = false })
    local short = fw.env("SHORT")
    local calls = fw.metrics.counter("hook_calls_total", "Hook calls, by token.",
                                     { labels = { "token" } })
    fw.stream {
      name = "s", collection = "orders", dlq = true, retry = { max_attempts = 1 },
      on_insert = function(ctx)
        calls:inc(1, { token = token })
        fw.log.info("calling with", token, "in", region, "as", short)
        if ctx:full_document().typed then
          error(fw.error("Auth.Failed", "refused " .. token .. " in " .. region))
        end
        error("cannot reach https://svc/?token=" .. token)
      end,
    }
    fw.stream {
      name = "doomed", collection = "c", pipeline = { { ["$x" .. token] = {} } },
      restart = { max_attempts = 1, initial_delay = "50ms" },
      on_insert = function(ctx) end,
    }
"""
MARK = "[redacted]"


class EnvValuesAreRedacted(StandInTestCase):

    def env(self):
        return clean_env({"HOOK_TOKEN": TOKEN, "REGION": "eu-west-1", "SHORT": "abc",
                          "FLOWWARDEN_URI": self.uri})

    def run_handlers(self, log_format):
        script = self.script(HANDLER_SCRIPT)
        p = self.run_fw(script, env=self.env(), log_format=log_format,
                        extra=["--admin", "127.0.0.1:0"])
        port = p.admin_port()
        p.wait_log("STREAM STOPPED")          # doomed: its reason quotes the stage
        p.wait_log("change stream open")      # s (doomed never opens)
        self.db.orders.insert_many([{"_id": 1}, {"_id": 2, "typed": True}])
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({"streamName": "s"}) == 2, 60,
                      "two DLQ entries")
        metrics = get(port, "/metrics")
        status = get(port, "/v1/streams/doomed")
        cli_status = run_cli(["status", "--admin", "http://127.0.0.1:%d" % port])
        self.assertEqual(p.stop(), 0)
        return p, metrics, status, cli_status

    def check_dlq_entries(self):
        entries = {e["_id"]: e for e in (doc | {"_id": doc["documentKey"]["_id"]}
                                         for doc in self.db["_fw_dlq"].find({"streamName": "s"}))}
        plain, typed = entries[1]["error"], entries[2]["error"]
        self.assertEqual(plain["type"], "RuntimeError")
        self.assertTrue(plain["message"].endswith("cannot reach https://svc/?token=" + MARK),
                        plain["message"])
        self.assertEqual(typed["type"], "Auth.Failed")
        self.assertEqual(typed["message"], "refused %s in eu-west-1" % MARK)
        for e in (plain, typed):
            self.assertNotIn(TOKEN, e["message"] + e.get("stackTrace", ""))

    def check_logs(self, p):
        lines = "\n".join(p.raw_lines())
        self.assertNotIn(TOKEN, lines)
        dead = [line for line in p.raw_lines() if "dead-lettered" in line]
        self.assertEqual(len(dead), 2, lines)
        self.assertTrue(all(MARK in line for line in dead), dead)
        self.assertIn("calling with %s in eu-west-1 as abc" % MARK, lines)
        return lines

    def test_a_handler_error_quoting_an_env_value_is_redacted_in_text_logs_and_the_dlq(self):
        p, metrics, status, cli_status = self.run_handlers("text")
        self.check_logs(p)
        self.check_dlq_entries()
        self.assert_no_secret(TOKEN)

    def test_json_logs_status_and_metrics_labels_show_the_marker(self):
        p, metrics, status, cli_status = self.run_handlers("json")
        lines = self.check_logs(p)
        self.assertIn('"msg" : "calling with %s in eu-west-1 as abc"' % MARK, lines)
        self.check_dlq_entries()
        self.assertIn('hook_calls_total{stream="s",token="%s"} 2' % MARK, metrics)
        self.assertNotIn(TOKEN, metrics)
        # Status carries no script text here but the error type; it is
        # written by the same escaper as the labels (ops/strbuf.c).
        self.assertEqual(json.loads(status)["state"], "failed")
        self.assertIn("Auth.Failed", cli_status.stdout)
        self.assertNotIn(TOKEN, status + cli_status.stdout + cli_status.stderr)
        self.assert_no_secret(TOKEN)

    def test_check_output_and_its_load_errors_hide_env_values(self):
        script = self.script(HANDLER_SCRIPT)
        check = run_cli(["check", script], env=self.env())
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertNotIn(TOKEN, check.stdout + check.stderr)
        broken = self.script('error("bad token " .. fw.env("HOOK_TOKEN"))', "broken.lua")
        check = run_cli(["check", broken], env=self.env())
        self.assertEqual(check.returncode, 1)
        self.assertIn("bad token " + MARK, check.stderr)
        self.assertNotIn(TOKEN, check.stdout + check.stderr)

    def test_check_hides_a_uri_s_user_name_and_not_the_same_word_elsewhere(self):
        # A user name without a password is hidden as the URI's userinfo only: the
        # stream named after it stays readable.
        script = self.script("""
            fw.connection { name = "reporting",
                            uri = fw.env("PG_URI", "postgresql://fwreporter@127.0.0.1:5432/db") }
            fw.stream { name = "fwreporter-orders", collection = "orders",
                        on_insert = function(ctx) end }
        """, "userinfo.lua")
        check = run_cli(["check", script], env=self.env())
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("postgresql://" + MARK + "@127.0.0.1:5432", check.stdout)
        self.assertIn('stream "fwreporter-orders"', check.stdout)


# Issue 37, 9e: a handler's own print and log arguments (a table among them), an
# fw.error's fields, and what an enqueue policy stores as diagnostics.
OWN_TEXT_SCRIPT = """
    local token = fw.env("HOOK_TOKEN")
    fw.stream {
      name = "s", collection = "orders", retry = { max_attempts = 1 },
      dlq = { enqueue_policy = function(letter, err)
        return fw.dlq.requeue { diagnostics = { last = "token " .. token,
                                                 nested = { t = token } } }
      end },
      on_insert = function(ctx)
        print("printing", token)
        fw.log.warn("a table", { t = token })
        error(fw.error("Auth.Failed", "refused", { header = "Bearer " .. token }))
      end,
    }
"""


class OwnTextIsRedacted(StandInTestCase):

    def test_print_log_tables_error_fields_and_diagnostics_hide_env_values(self):
        script = self.script(OWN_TEXT_SCRIPT)
        env = clean_env({"HOOK_TOKEN": TOKEN, "FLOWWARDEN_URI": self.uri})
        out = tempfile.TemporaryFile()
        self.addCleanup(out.close)
        p = fwtest.Flowwarden(script, self.uri, env=env, stdout=out)
        self.procs.append(p)
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 1, 30, "the DLQ entry")
        r = run_cli(["dlq", "replay", script], env=env)
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)  # failed again: requeued
        self.assertEqual(p.stop(), 0)
        entry = self.db["_fw_dlq"].find_one({})
        self.assert_no_secret(TOKEN)
        self.assertEqual(entry["diagnostics"]["last"], "token " + MARK)
        self.assertEqual(entry["diagnostics"]["nested"], {"t": MARK})
        out.seek(0)
        printed = out.read().decode()
        self.assertIn("printing\t" + MARK, printed)
        self.assertNotIn(TOKEN, printed)


class ScanFindsLeaks(StandInTestCase):
    """The scan must fail when a secret is there: else a clean run proves nothing."""

    def test_the_scan_finds_a_secret_in_a_log_line_and_in_a_dlq_entry(self):
        leak = "Leak-s3cr3t/5d6e"
        script = self.script("""
            fw.stream {
              name = "s", collection = "orders", dlq = true,
              on_insert = function(ctx)
                -- secret = false: else flowwarden hides them and nothing leaks
                local leak = fw.env("LEAK", { secret = false })
                fw.log.info("token", leak)
                fw.log.info("encoded", fw.env("LEAK_URL", { secret = false }))
                error(fw.error("Validation", "token " .. leak))
              end,
            }
        """)
        p = self.run_fw(script, env=clean_env({"LEAK": leak, "LEAK_URL": "Leak-s3cr3t%2F5d6e"}))
        p.wait_open()
        self.db.orders.insert_one({"_id": 1})
        self.wait_for(lambda: self.db["_fw_dlq"].count_documents({}) == 1, 30, "the DLQ entry")
        self.assertEqual(p.stop(), 0)
        with self.assertRaises(AssertionError) as cm:
            self.assert_no_secret(leak)
        report = str(cm.exception)
        self.assertIn('"msg" : "token <SECRET>"', report)
        self.assertIn('"msg" : "encoded <SECRET>"', report)     # its URL-encoded form
        self.assertIn("%s._fw_dlq: " % self.db_name, report)
        self.assertIn("<SECRET>", report)
        self.assertNotIn(leak, report)
        if fwtest.CAPTURE_DIR:      # FW_TEST_AUTH: the wrapper's copy of its stderr too
            self.assertIn("output of flowwarden pid %d.err: " % p.proc.pid, report)
        self.client.drop_database(self.db_name)
