"""The admin console (issue 42): the page, its headers and JSON routes, the token file,
and, in headless Chromium (tests/browser/console_check.mjs), what an operator does with
it: watch a stream's lag, be refused without the token, find a dead letter by filter,
replay it, and see markup in a document as text."""
import datetime
import json
import os
import shutil
import stat
import subprocess
import unittest
import urllib.parse
import uuid

from bson.timestamp import Timestamp

from fwtest import BINARY, SOURCE_DIR, Flowwarden, StandInTestCase, clean_env, write_script
from test_admin import http

CHROMIUM = os.environ.get("FW_CHROMIUM", "/usr/bin/chromium")
BROWSER_DIR = os.path.join(SOURCE_DIR, "tests", "browser")

SCRIPT = """
-- orders: a replay (ctx:dead_letter() is set) succeeds. slow: its event stays in flight
-- for about 40 s of retries, so its lag grows while the page watches.
fw.stream { name = "orders", collection = "orders", dlq = true,
  on_insert = function(ctx) if not ctx:dead_letter() then error(fw.error("Validation", "no")) end end }
fw.stream { name = "slow", collection = "slow", dlq = true,
  retry = { max_attempts = 40, initial_delay = "1s", multiplier = 1, jitter = false },
  on_insert = function(ctx) error(fw.error("Slow", "not yet")) end }
"""

XSS_DOC = '<img src=x onerror="window.__pwned=1;alert(1)">'
XSS_ERROR = "<script>window.__pwned=2</script> failed"


class ConsoleTestCase(StandInTestCase):

    def entry(self, i, error_type, message="failed", doc=None):
        """A PENDING DLQ entry of stream orders, as run writes it, for event i."""
        now = datetime.datetime.utcnow().replace(microsecond=0)
        token = "82%08X%08X" % (1700000000, i + 1)
        return {"_id": str(uuid.uuid4()), "streamName": "orders", "operationType": "INSERT",
                "documentKey": {"_id": i}, "fullDocument": doc or {"_id": i, "n": i},
                "resumeToken": {"_data": token},
                "error": {"type": error_type, "message": message,
                          "stackTrace": "stack traceback:\n\t[C]: in ?"},
                "attempts": 3, "status": "PENDING", "firstAttemptAt": now,
                "lastAttemptAt": now, "createdAt": now + datetime.timedelta(milliseconds=i),
                "expiresAt": None, "metadata": {}, "eventId": token,
                "ns": {"db": self.db_name, "coll": "orders"},
                "clusterTime": Timestamp(1700000000, i + 1), "scriptVersion": "000000000000",
                "lastTouched": now, "reprocessAttempts": 0, "diagnostics": {},
                "history": [{"at": now, "action": "enqueued", "actor": "test",
                             "result": error_type}]}

    def start(self, token_mode=0o600, token="s3cret-Token_42", listen="127.0.0.1:0"):
        path = os.path.join(self.tmp.name, "token")
        with open(path, "w") as f:
            f.write(token + "\n")
        os.chmod(path, token_mode)
        script = write_script(self.tmp.name, SCRIPT)
        fw = Flowwarden(script, self.uri, ["--admin", listen, "--admin-token-file", path])
        self.procs.append(fw)
        fw.wait_open(2)
        return fw, fw.admin_port(), token

    def fill(self):
        found = self.entry(1, "Http.Timeout", "slow answer")
        other = self.entry(2, "Validation")
        xss = self.entry(3, "Validation", XSS_ERROR, {"_id": 3, "note": XSS_DOC})
        self.db["_fw_dlq"].insert_many([found, other, xss])
        return found["_id"], other["_id"], xss["_id"]


class TheEndpoint(ConsoleTestCase):

    def test_the_page_routes_and_token(self):
        fw, port, token = self.start()
        found, other, xss = self.fill()

        status, body, headers = http(port, "GET", "/")
        self.assertEqual(status, 200)
        self.assertIn('<script src="/console.js"', body)
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        csp = headers["Content-Security-Policy"]
        for part in ("default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"):
            self.assertIn(part, csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertEqual(headers["X-Content-Type-Options"], "nosniff")
        for path, kind in (("/console.js", "text/javascript"), ("/console.css", "text/css")):
            status, body, headers = http(port, "GET", path)
            self.assertEqual((status, headers["Content-Type"].split(";")[0]), (200, kind))
        self.assertNotIn("innerHTML", http(port, "GET", "/console.js")[1])

        info = json.loads(http(port, "GET", "/v1/console")[1])
        self.assertTrue(info["token_required"])

        # Filters as `dlq list`'s options; a document only with the token.
        q = urllib.parse.urlencode({"status": "PENDING", "error_type": "Http"})
        listed = json.loads(http(port, "GET", "/v1/dlq/entries?" + q)[1])["entries"]
        self.assertEqual([e["_id"] for e in listed], [found])
        self.assertNotIn("fullDocument", listed[0])
        status, body, _ = http(port, "GET", "/v1/dlq/entries?status=NOPE")
        self.assertEqual(status, 422)
        self.assertIn("unknown status", json.loads(body)["error"])
        shown = json.loads(http(port, "GET", "/v1/dlq/entries/" + xss)[1])
        self.assertEqual(shown["hidden"], ["fullDocument"])
        self.assertNotIn("fullDocument", shown["entry"])
        self.assertEqual(shown["entry"]["error"]["message"], XSS_ERROR)
        status, body, _ = http(port, "GET", "/v1/dlq/entries/%s?documents=1" % xss)
        self.assertEqual(status, 401)
        status, body, _ = http(port, "GET", "/v1/dlq/entries/%s?documents=1" % xss, token)
        self.assertEqual(json.loads(body)["entry"]["fullDocument"]["note"], XSS_DOC)
        self.assertEqual(http(port, "GET", "/v1/dlq/entries/nope")[0], 404)
        self.assertEqual(json.loads(http(port, "GET", "/v1/dlq/sequences")[1]), {"sequences": []})

        # Every action needs the token: 401 says why.
        for verb in ("/v1/dlq/entries/%s/discard" % other, "/v1/dlq/entries/%s/replay" % found,
                     "/v1/streams/orders/pause", "/v1/reload"):
            status, body, _ = http(port, "POST", verb)
            self.assertEqual(status, 401)
            self.assertIn("This request sent no token", json.loads(body)["error"])
            status, body, _ = http(port, "POST", verb, "wrong")
            self.assertEqual(status, 401)
            self.assertIn("This request sent a wrong token", json.loads(body)["error"])

        # Dry run changes nothing; replay resolves; discard discards, once.
        status, body, _ = http(port, "POST", "/v1/dlq/entries/%s/replay?dry_run=1" % found, token)
        self.assertEqual((status, json.loads(body)["result"]), (200, "dry run"), body)
        self.assertEqual(self.db["_fw_dlq"].find_one({"_id": found})["status"], "PENDING")
        status, body, _ = http(port, "POST", "/v1/dlq/entries/%s/replay" % found, token)
        self.assertEqual((status, json.loads(body)["result"]), (200, "resolved"), body)
        self.assertEqual(self.db["_fw_dlq"].find_one({"_id": found})["status"], "RESOLVED")
        status, body, _ = http(port, "POST", "/v1/dlq/entries/%s/discard" % other, token)
        self.assertEqual((status, json.loads(body)["discarded"]), (200, 1), body)
        doc = self.db["_fw_dlq"].find_one({"_id": other})
        self.assertEqual((doc["status"], doc["history"][-1]["actor"]), ("DISCARDED", "admin:console"))
        status, body, _ = http(port, "POST", "/v1/dlq/entries/%s/discard" % other, token)
        self.assertEqual(status, 422, body)

        # A sequence's parked events, in their order; the sequences of the DLQ.
        parked = []
        for idx in (2, 0, 1):
            e = self.entry(10 + idx, "Http.Timeout" if idx == 0 else None)
            e.update({"sequenceId": "customer-7", "sequenceIndex": idx})
            if idx:
                e["error"] = None
            parked.append(e)
        self.db["_fw_dlq"].insert_many(parked)
        q = urllib.parse.urlencode({"stream": "orders", "sequence": "customer-7"})
        listed = json.loads(http(port, "GET", "/v1/dlq/entries?" + q)[1])["entries"]
        self.assertEqual(sorted(e["sequenceIndex"] for e in listed), [0, 1, 2])
        seqs = json.loads(http(port, "GET", "/v1/dlq/sequences?stream=orders")[1])["sequences"]
        self.assertEqual([(s["sequenceId"], s["size"], s["parked"]) for s in seqs],
                         [("customer-7", 3, 2)])

        # The chart's history: a sample of each stream at start.
        hist = json.loads(http(port, "GET", "/v1/history")[1])
        self.assertEqual((hist["step_seconds"], hist["window_seconds"]), (5, 900))
        self.assertEqual(sorted(hist["streams"]), ["orders", "slow"])
        self.assertGreaterEqual(len(hist["streams"]["orders"]["t"]), 1)
        self.assertNotIn(token, "\n".join(fw.raw_lines()))

    def test_token_file_errors(self):
        script = write_script(self.tmp.name, SCRIPT)
        missing = os.path.join(self.tmp.name, "missing")
        empty = os.path.join(self.tmp.name, "empty")
        open(empty, "w").close()
        for path, says in ((missing, "cannot read %s" % missing), (empty, "%s is empty" % empty)):
            cp = subprocess.run([BINARY, "run", script, "--uri", self.uri, "--admin",
                                 "127.0.0.1:0", "--admin-token-file", path],
                                capture_output=True, text=True, timeout=30, env=clean_env(),
                                stdin=subprocess.DEVNULL)
            self.assertNotEqual(cp.returncode, 0)
            self.assertIn("--admin-token-file: " + says, cp.stderr)
        # A token file others may read is used, with a warning; so is an address beyond
        # loopback (it has a token), with a warning that reads need none.
        fw, port, token = self.start(token_mode=0o644, listen="0.0.0.0:0")
        warnings = fw.messages("warn")
        self.assertTrue(any("can be read by every user" in m for m in warnings), warnings)
        self.assertTrue(any("beyond this machine: actions need the token, but reads do not"
                            in m for m in warnings), warnings)
        self.assertEqual(http(port, "POST", "/v1/reload")[0], 401)


@unittest.skipUnless(os.access(CHROMIUM, os.X_OK),
                     "no chromium at %s: ./setup.sh installs Debian's chromium" % CHROMIUM)
class InTheBrowser(ConsoleTestCase):

    def test_an_operator_watches_is_refused_finds_replays_and_sees_markup_as_text(self):
        node = shutil.which("node")
        self.assertTrue(node and os.path.isdir(os.path.join(BROWSER_DIR, "node_modules",
                                                            "playwright-core")),
                        "node and tests/browser/node_modules are missing: run ./setup.sh")
        fw, port, token = self.start()
        found, other, xss = self.fill()
        self.db.slow.insert_one({"_id": 1})
        shots = os.environ.get("FW_CONSOLE_SCREENSHOTS", "")
        env = clean_env({"FW_URL": "http://127.0.0.1:%d" % port, "FW_TOKEN": token,
                         "FW_SLOW": "slow", "FW_PAUSE": "orders", "FW_FIND_TYPE": "Http.Timeout",
                         "FW_FIND_ID": found, "FW_OTHER_ID": other, "FW_XSS_ID": xss,
                         "FW_SHOTS": shots, "FW_CHROMIUM": CHROMIUM})
        cp = subprocess.run([node, "console_check.mjs"], cwd=BROWSER_DIR, env=env,
                            capture_output=True, text=True, timeout=240,
                            stdin=subprocess.DEVNULL)
        self.assertEqual(cp.returncode, 0, "browser check failed:\n%s\n%s\nflowwarden log:\n%s"
                         % (cp.stdout, cp.stderr[-4000:], "\n".join(fw.raw_lines()[-30:])))
        print(cp.stdout)
        self.assertEqual(cp.stdout.count("ok: "), 8, cp.stdout)
        self.assertEqual(self.db["_fw_dlq"].find_one({"_id": found})["status"], "RESOLVED")
        self.assertEqual(self.db["_fw_dlq"].find_one({"_id": xss})["status"], "PENDING")


if __name__ == "__main__":
    unittest.main()
