"""Secrets never leak: a password in a connection URI and a value read with
fw.env, used by handlers whose IO fails, appear in no log line, no `check`
output, no error message and no DLQ entry."""
import http.server
import json
import socket
import threading

from fwtest import StandInTestCase, clean_env, run_cli

PASSWORD = "Pw-s3cr3t-1f2e"      # recognisable, and not a substring of anything else
TOKEN = "tok-s3cr3t-9c8d"


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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
