"""fw.http through the real binary, against a loopback HTTP server started
here (127.0.0.1 only: no test sends a packet anywhere else).

Handlers run one case per inserted document ({case = "..."}); a case
reports what it got, and on_error reports the typed error it raised."""
import json
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fwtest import StandInTestCase, clean_env, refused_port, run_cli, write_script

BIG = 20 * 1024 * 1024
# "é" straddles byte 512: the DLQ keeps the 511 bytes before it.
REJECT_BODY = (b'{"error":"sku ABC-1 unknown","token":"BODYSECRET"}'
               + b"z" * (511 - 50) + "é".encode() + b"z" * 1000)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.port = self.server_address[1]
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.reset()

    def reset(self):
        with self.lock:
            self.connections = 0
            self.requests = []      # (method, path with query, {header: value}, body bytes)
            self.seen_keys = set()

    def process_request(self, request, client_address):
        with self.lock:
            self.connections += 1
        super().process_request(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        srv = self.server
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with srv.lock:
            srv.requests.append((self.command, self.path, dict(self.headers.items()), body))
        path = self.path.split("?", 1)[0]
        parts = path.strip("/").split("/")
        if path == "/ok":
            self.reply(200, b"hello", [("X-Multi", "a"), ("X-Multi", "b"),
                                       ("Content-Type", "text/plain")])
        elif path == "/echo":
            self.reply(201, json.dumps({"method": self.command, "got": json.loads(body)}).encode(),
                       [("Content-Type", "application/json")])
        elif parts[0] == "flaky":           # 500 the first time a key is seen, then 200
            with srv.lock:
                first = parts[1] not in srv.seen_keys
                srv.seen_keys.add(parts[1])
            self.reply(500 if first else 200, b"busy" if first else b"recovered")
        elif parts[0] == "status":
            self.reply(int(parts[1]), b"x" * 5000)
        elif parts[0] == "reject":         # a refusal that says why, then 1000 bytes more
            self.reply(422, REJECT_BODY)
        elif path == "/hang":
            srv.release.wait(30)
        elif path == "/big":               # announced: refused from Content-Length
            self.send_response(200)
            self.send_header("Content-Length", str(BIG))
            self.end_headers()
            self.stream_big()
        elif path == "/bigstream":         # unannounced: stopped while it arrives
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            self.stream_big()
        elif path == "/redirect-meta":
            self.reply(302, b"", [("Location", "http://169.254.169.254/latest/meta-data/")])
        elif path == "/redirect-localhost":
            self.reply(302, b"", [("Location", "http://localhost:%d/ok" % srv.port)])
        else:
            self.reply(404, b"no such path")

    def stream_big(self):
        chunk = b"y" * 65536
        try:
            for _ in range(BIG // len(chunk)):
                self.wfile.write(chunk)
        except OSError:
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = handle_any


SCRIPT = """
local BASE = "http://127.0.0.1:%(port)d"
%(defaults)s
local cases = {}
%(cases)s
local function handle(ctx)
  local doc = ctx:full_document()
  local out = cases[doc.case](doc, ctx)
  if out then
    out.case, out.attempt = doc.case, ctx:attempt_number()
    report(out)
  end
end
local function on_error(err, ctx)
  local doc = ctx:full_document()
  local fields = plain(err.fields)
  if fields.body then  -- a log line has room for a summary only
    fields.body = #fields.body .. " bytes of " .. fields.body:sub(1, 1)
  end
  report({ case = doc.case, attempt = ctx:attempt_number(), error = err.type,
           message = err.message, fields = fields })
  if doc.skip then return fw.SKIP end
end
fw.stream { name = "h", collection = "c", timeout = "%(timeout)s", dlq = true,
            retry = { initial_delay = "10ms", jitter = false },
            on_insert = handle, on_error = on_error }
"""

# Runs f and returns {type, message} of what it raised (typed or not).
CATCH = """
local function catch(f, ...)
  local ok, e = pcall(f, ...)
  if ok then return { type = "none" } end
  if type(e) == "table" then return { type = e.type, message = e.message, where = e.where } end
  return { type = "string", message = tostring(e) }
end
"""


def free_port():
    """A loopback port nothing listens on (connections to it are refused)."""
    return refused_port()


class HttpTest(StandInTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = Server()
        cls.port = cls.server.port
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.release.set()
        cls.server.shutdown()
        cls.server.server_close()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.server.reset()

    def start(self, cases, timeout="5s", defaults="", log_level=None):
        script = self.script(CATCH + SCRIPT % {"port": self.port, "cases": cases,
                                               "timeout": timeout, "defaults": defaults})
        extra = ["--log-level", log_level] if log_level else []
        # No proxy from the environment may take the requests elsewhere.
        env = clean_env({"no_proxy": "*", "NO_PROXY": "*"})
        p = self.run_fw(script, extra=extra, env=env)
        p.wait_open()
        return p

    def run_case(self, p, case, n=1, **doc):
        before = len([r for r in p.reports() if r.get("case") == case])
        self.db.c.insert_one(dict(doc, case=case))
        p.wait_until(lambda: len([r for r in p.reports() if r.get("case") == case]) >= before + n,
                     20, "%d reports of %s" % (n, case))
        return [r for r in p.reports() if r.get("case") == case][before:]

    # --- responses ---------------------------------------------------------
    def test_get_returns_status_headers_and_body_and_logs_no_secrets(self):
        p = self.start("""
            cases.ok = function()
              local res = fw.http.get("http://user:pw@127.0.0.1:" .. BASE:match("%d+$")
                .. "/ok?token=QUERYSECRET", { headers = { Authorization = "Bearer AUTHSECRET" } })
              return { status = res.status, body = res.body, multi = res.headers["x-multi"],
                       ctype = res.headers["content-type"], len = res.headers["content-length"] }
            end
            cases.refused = function(doc)
              return catch(fw.http.post, "http://user:pw@127.0.0.1:" .. doc.port
                .. "/hook?token=QUERYSECRET", { body = "x", timeout = 2 })
            end
        """, log_level="debug")
        r = self.run_case(p, "ok")[0]
        self.assertEqual((r["status"], r["body"], r["multi"], r["ctype"], r["len"]),
                         (200, "hello", "a, b", "text/plain", "5"))
        method, path, headers, _ = self.server.requests[0]
        self.assertEqual((method, path), ("GET", "/ok?token=QUERYSECRET"))
        self.assertEqual(headers["Authorization"], "Bearer AUTHSECRET")
        self.assertEqual(headers["User-Agent"].split("/")[0], "flowwarden")
        port = free_port()
        r = self.run_case(p, "refused", port=port)[0]
        self.assertEqual((r["type"], r["message"]), (
            "Http.Connect", "fw.http: POST http://127.0.0.1:%d/hook: connection refused" % port))
        self.assertEqual(p.stop(), 0)
        logs = "\n".join(p.raw_lines())
        self.assertIn("fw.http: GET http://127.0.0.1:%d/ok -> 200" % self.port, logs)
        for secret in ("QUERYSECRET", "AUTHSECRET", "user:pw", "token="):
            self.assertNotIn(secret, logs)

    def test_json_round_trip(self):
        p = self.start("""
            cases.json = function()
              local res = fw.http.put(BASE .. "/echo", { json = { name = "ü", n = 1, list = { 1.5, true } } })
              local back = res:json()
              return { status = res.status, method = back.method, name = back.got.name,
                       n = back.got.n, int = math.type(back.got.n), second = back.got.list[2] }
            end
            cases.raw = function()
              local res = fw.http.request { method = "post", url = BASE .. "/status/202",
                                            body = "raw \0 bytes" }
              local head = fw.http.request { method = "HEAD", url = BASE .. "/ok" }
              return { status = res.status, head = head.status, head_body = head.body }
            end
        """)
        r = self.run_case(p, "json")[0]
        self.assertEqual(r, {"case": "json", "attempt": 1, "status": 201, "method": "PUT",
                             "name": "ü", "n": 1, "int": "integer", "second": True})
        _, _, headers, body = self.server.requests[0]
        self.assertEqual(body, '{"list":[1.5,true],"n":1,"name":"ü"}'.encode())
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertNotIn("Expect", headers)
        r = self.run_case(p, "raw")[0]
        self.assertEqual((r["status"], r["head"], r["head_body"]), (202, 200, ""))
        method, _, headers, body = self.server.requests[1]
        self.assertEqual((method, body), ("POST", b"raw \0 bytes"))
        self.assertNotIn("Content-Type", headers)   # no form-urlencoded guess
        self.assertEqual(self.server.requests[2][0], "HEAD")

    def test_transient_status_is_retried_and_succeeds(self):
        p = self.start("""
            cases.flaky = function(doc)
              local res = fw.http.get(BASE .. "/flaky/" .. doc.key, { raise_for_status = true })
              return { status = res.status, body = res.body }
            end
        """)
        got = self.run_case(p, "flaky", n=2, key="k1")
        self.assertEqual(got[0]["error"], "Http.Status.Transient")
        self.assertEqual(got[0]["fields"]["status"], 500)
        self.assertEqual(got[0]["message"],
                         "fw.http: GET http://127.0.0.1:%d/flaky/k1: HTTP 500" % self.port)
        self.assertEqual((got[1]["attempt"], got[1]["status"], got[1]["body"]), (2, 200, "recovered"))

    def test_permanent_status_goes_to_the_dlq_without_retry(self):
        p = self.start("""
            cases.missing = function()
              fw.http.delete(BASE .. "/status/404", { raise_for_status = true })
            end
        """)
        r = self.run_case(p, "missing")[0]
        self.assertEqual(r["error"], "Http.Status.Permanent")
        self.assertEqual(r["fields"], {"status": 404, "body": "4096 bytes of x"})
        e = self.wait_for(lambda: self.db["_fw_dlq"].find_one({}), 20, "the DLQ entry")
        self.assertEqual((e["error"]["type"], e["attempts"]), ("Http.Status.Permanent", 1))
        self.assertEqual(len(self.server.requests), 1)

    def test_dead_letter_names_the_host_keeps_the_reply_and_hides_the_secrets(self):
        """Issue 38: a URL read with fw.env showed as "POST [redacted]" and
        the reply's body was lost: the host (and with secret = "query" the
        path) is shown, the secret parts are not, and error.body keeps the
        reply's first 512 bytes (redacted)."""
        script = self.script(SCRIPT % {"port": self.port, "timeout": "5s", "defaults": "", "cases": """
            local BY_QUERY = fw.env("HOOK_URL", { secret = "query" })
            local BY_DEFAULT = fw.env("HOOK_URL_DEFAULT")
            fw.env("BODY_TOKEN")
            cases.query = function()
              fw.http.post(BY_QUERY, { body = "x", raise_for_status = true })
            end
            cases.default = function()
              fw.http.post(BY_DEFAULT, { body = "x", raise_for_status = true })
            end
        """})
        base = "http://127.0.0.1:%d" % self.port
        env = clean_env({"no_proxy": "*", "NO_PROXY": "*",
                         "HOOK_URL": base + "/reject/orders?token=QUERYSECRET1&v=2",
                         "HOOK_URL_DEFAULT": base + "/reject/Tpath-SECRET",
                         "BODY_TOKEN": "BODYSECRET"})
        p = self.run_fw(script, env=env)
        p.wait_open()
        for case in ("query", "default"):
            self.run_case(p, case)
        entries = self.wait_for(lambda: (lambda e: e if len(e) == 2 else None)(
            list(self.db["_fw_dlq"].find({}).sort("createdAt", 1))), 20, "two DLQ entries")
        by_query, by_default = [e["error"] for e in entries]
        self.assertEqual(by_query["message"], "fw.http: POST %s/reject/orders: HTTP 422" % base)
        self.assertEqual(by_default["message"], "fw.http: POST %s[redacted]: HTTP 422" % base)
        for err in (by_query, by_default):
            self.assertEqual((err["type"], err["status"]), ("Http.Status.Permanent", 422))
            self.assertEqual(err["body"], '{"error":"sku ABC-1 unknown","token":"[redacted]"}'
                             + "z" * (511 - 50))
        self.assertEqual(p.stop(), 0)
        text = "\n".join(p.raw_lines()) + repr(entries)
        for secret in ("QUERYSECRET1", "Tpath-SECRET", "BODYSECRET"):
            self.assertNotIn(secret, text)
        self.assertIn("POST %s/reject/orders" % base, text)

    # --- failures ----------------------------------------------------------
    def test_a_server_that_never_answers_times_out_within_the_budget(self):
        p = self.start("""
            cases.hang = function(doc)
              if doc.timeout then fw.http.get(BASE .. "/hang", { timeout = doc.timeout })
              else fw.http.get(BASE .. "/hang") end
            end
        """, timeout="500ms")
        t0 = time.monotonic()
        r = self.run_case(p, "hang", skip=True)[0]
        # Within the 500 ms budget, not fw.http's default 30 s: the bound leaves a loaded
        # machine's event round trip (insert, change stream, report) room.
        self.assertLess(time.monotonic() - t0, 10.0)
        self.assertEqual(r["error"], "Http.Timeout")
        self.assertRegex(r["message"], r"^fw\.http: GET http://127\.0\.0\.1:\d+/hang: no complete "
                         r"response within \d+ ms \(the handler's remaining budget\)$")
        r = self.run_case(p, "hang", skip=True, timeout="100ms")[0]
        self.assertEqual((r["error"], r["message"]), (
            "Http.Timeout",
            "fw.http: GET http://127.0.0.1:%d/hang: no complete response within 100 ms" % self.port))
        # Both requests reached the server (a loaded machine may read them late): none may be
        # counted in the next test.
        self.wait_for(lambda: sum(q[1] == "/hang" for q in self.server.requests) == 2, 20,
                      "the server to see both requests")

    def test_a_body_over_max_body_is_refused(self):
        p = self.start("""
            cases.big = function(doc) return catch(fw.http.get, BASE .. doc.path) end
            cases.small = function() return catch(fw.http.get, BASE .. "/ok", { max_body = "4B" }) end
        """)
        for path in ("/big", "/bigstream"):
            r = self.run_case(p, "big", path=path)[0]
            self.assertEqual((r["type"], r["message"]), (
                "Http.TooLarge", "fw.http: GET http://127.0.0.1:%d%s: the response body is larger "
                "than max_body (16MB)" % (self.port, path)))
        r = self.run_case(p, "small")[0]
        self.assertEqual(r["type"], "Http.TooLarge")

    def test_one_connection_serves_a_hundred_requests(self):
        p = self.start("""
            cases.keep = function()
              local n = 0
              for i = 1, 25 do n = n + #fw.http.get(BASE .. "/ok").body end
              return { n = n }
            end
        """)
        for _ in range(4):
            self.assertEqual(self.run_case(p, "keep")[0]["n"], 125)
        self.assertEqual(len(self.server.requests), 100)
        self.assertEqual(self.server.connections, 1)

    # --- where handlers may connect ------------------------------------------
    def test_allow_hosts_refuses_other_hosts_and_redirects_to_them(self):
        p = self.start("""
            cases.deny = function(doc)
              return catch(fw.http.get, doc.url, { follow_redirects = doc.follow })
            end
        """, defaults='fw.defaults { http = { allow_hosts = { "127.0.0.1", "*.internal" } } }')
        for url, follow, host in (
                ("http://localhost:%d/ok" % self.port, False, "localhost"),
                ("http://internal/x", False, "internal"),
                ("http://evil.internal.example/x", False, "evil.internal.example"),
                ("http://127.0.0.1:%d/redirect-localhost" % self.port, True, "localhost")):
            r = self.run_case(p, "deny", url=url, follow=follow)[0]
            self.assertEqual(r["type"], "Http.Denied", url)
            self.assertTrue(r["message"].endswith(': host "%s" is not in allow_hosts' % host),
                            r["message"])
        self.assertEqual([q[1] for q in self.server.requests], ["/redirect-localhost"])

    def test_link_local_addresses_are_refused_before_connecting(self):
        p = self.start("""
            cases.meta = function(doc)
              return catch(fw.http.get, doc.url, { follow_redirects = true, timeout = "20s" })
            end
        """)
        for url in ("http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/",
                    "http://2852039166/", "http://[::ffff:169.254.169.254]/",
                    "http://127.0.0.1:%d/redirect-meta" % self.port):
            t0 = time.monotonic()
            r = self.run_case(p, "meta", url=url)[0]
            self.assertEqual(r["type"], "Http.Denied", (url, r))
            self.assertRegex(r["message"], r": (169\.254\.169\.254|fe80::1|::ffff:169\.254\.169\.254) is a link-local "
                             r"address \(list it in allow_hosts to allow it\)$")
            # Refused before connecting: a connect to these unroutable addresses would wait
            # out the 20 s timeout (and end Http.Timeout); the bound leaves a loaded machine's
            # event round trip room.
            self.assertLess(time.monotonic() - t0, 10.0)

    # --- misuse ------------------------------------------------------------
    def test_bad_arguments_raise_argument_errors_naming_the_call(self):
        p = self.start("""
            cases.bad = function()
              local n = 0
              local function try(...)  -- one report each: a log line has room for a few only
                local r = catch(...)
                n = n + 1
                r.case, r.i = "bad_item", n
                report(r)
              end
              try(function() fw.http.request { url = "ftp://x" } end)
              try(fw.http.post, BASE, { timout = "1s" })
              try(fw.http.request, { url = BASE, body = "a", json = {} })
              try(fw.http.get, BASE, { headers = { ["X-Count"] = 1 } })
              try(fw.http.get, BASE, { headers = { ["X-A"] = "a\\r\\nInjected: 1" } })
              try(fw.http.get, BASE, { headers = { ["Bad Name"] = "x" } })
              try(fw.http.get, 42)
              try(fw.http.get, BASE, { timeout = "soon" })
              try(fw.http.get, BASE, { timeout = -1 })
              try(fw.http.get, BASE, { max_body = "lots" })
              try(fw.http.get, BASE, { url = BASE })
              try(fw.http.request, { url = BASE, method = "FETCH" })
              try(fw.http.request, "http://x")
              try(fw.http.get, "http://user:pw@/?token=QUERYSECRET")
              try(fw.http.post, BASE, { json = { f = print } })
              try(fw.http.get, BASE, { verify_tls = "no" })
              local res = fw.http.get(BASE .. "/ok")
              try(res.json, res)
              return { n = n }
            end
        """)
        self.run_case(p, "bad")
        out = sorted((r for r in p.reports() if r.get("case") == "bad_item"), key=lambda r: r["i"])
        self.assertEqual([o["type"] for o in out[:-1]], ["ArgumentError"] * (len(out) - 1))
        self.assertRegex(out[0]["where"], r"script\.lua:\d+$")
        self.assertEqual([o["message"] for o in out], [
            'fw.http.request: url must be an http:// or https:// URL, got "ftp://x"',
            'fw.http.post: unknown option "timout" (did you mean "timeout"?)',
            'fw.http.request: body and json are exclusive',
            'fw.http.get: header "X-Count": value must be a string, got number',
            'fw.http.get: header "X-A": value must not contain CR, LF or NUL',
            'fw.http.get: invalid header name "Bad Name" (letters, digits and '
            "!#$%&'*+-.^_`|~ only)",
            'fw.http.get: url must be a string, got number',
            'fw.http.get: timeout: invalid duration "soon" (expected a number followed by ms, s, '
            'm, h, d or w, e.g. "500ms")',
            'fw.http.get: timeout must be a positive number of seconds or a duration such as '
            '"2s", got -1',
            'fw.http.get: max_body: invalid size "lots" (expected an integer followed by B, KB, '
            'MB or GB, e.g. "256MB")',
            'fw.http.get: unknown option "url" (the URL is the first argument and the method is '
            'GET; use fw.http.request for both in a table)',
            'fw.http.request: method must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, '
            'got "FETCH"',
            'fw.http.request: expected a table such as { method = "GET", url = "https://..." }, '
            'got string',
            'fw.http.get: url "http:///" is not a valid URL (No host part in the URL)',
            'fw.http.post: json: cannot encode a function at $.f',
            'fw.http.get: verify_tls must be true or false, got "no"',
            out[-1]["message"],
        ])
        self.assertTrue(out[-1]["message"].startswith("fw.json.decode: "), out[-1])
        self.assertEqual(self.server.requests[0][1], "/ok")   # only the last call went out
        self.assertEqual(len(self.server.requests), 1)

    def test_fw_http_at_the_top_level_is_refused(self):
        script = write_script(self.tmp.name, """
            fw.http.get("http://127.0.0.1:1/")
            fw.stream { name = "s", database = "d", on_change = function() end }
        """)
        cp = run_cli(["check", script])
        self.assertEqual(cp.returncode, 1)
        self.assertIn("fw.http is available inside handlers only", cp.stderr)


if __name__ == "__main__":
    unittest.main()
