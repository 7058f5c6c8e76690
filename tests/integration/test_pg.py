"""fw.pg through the real binary, against a PostgreSQL cluster from Debian
started here on a loopback port (pgserver.py).

Handlers run one case per inserted document ({case = "..."}); a case
reports what it got, and on_error reports the typed error it raised."""
import os
import socket
import struct
import threading
import time
import unittest

from dlqtest import FailureTestCase
from fwtest import SOURCE_DIR, clean_env
from pgserver import WithPgServer
from slowdns import slow_dns_library

PASSWORD = "Pg-Secret-91c2"

SCRIPT = """
fw.connection { name = "rep", uri = fw.env("PG_URI") }
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
  report({ case = doc.case, attempt = ctx:attempt_number(), error = err.type,
           message = err.message, fields = plain(err.fields) })
end
fw.stream { name = "h", collection = "c", timeout = "%(timeout)s", dlq = true,
            retry = { initial_delay = "20ms", max_delay = "200ms", jitter = false,
                      max_attempts = %(attempts)d },
            on_insert = handle, on_error = on_error }
"""


class CancelBlackhole:
    """A TCP proxy to PostgreSQL that forwards every connection except cancel
    requests, which it accepts and never answers (as a server that became
    unreachable would: the cancel's connect or its wait for the close hangs)."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        for sock in self.held + [self.listener]:
            sock.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        head = b""
        while len(head) < 8:
            chunk = client.recv(8 - len(head))
            if not chunk:
                client.close()
                return
            head += chunk
        length, code = struct.unpack("!ii", head)
        if length == 16 and code == 80877102:      # CancelRequest
            self.held.append(client)
            return
        server = socket.create_connection(("127.0.0.1", self.target_port))
        server.sendall(head)
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class PgTest(WithPgServer, FailureTestCase):
    pg_args = {"password": PASSWORD}

    def setUp(self):
        super().setUp()
        self.pg.sql("DROP TABLE IF EXISTS orders, lines, kinds; "
                    "CREATE TABLE orders (id text PRIMARY KEY, total numeric, n int); "
                    "CREATE TABLE lines (order_id text REFERENCES orders(id), qty int)")

    def start(self, cases, timeout="5s", attempts=3, uri=None):
        script = self.script(SCRIPT % {"cases": cases, "timeout": timeout, "attempts": attempts})
        p = self.run_fw(script, env=clean_env({"PG_URI": uri or self.pg.uri()}))
        p.wait_open()
        return p

    def run_case(self, p, case, reports=1, **doc):
        before = len([r for r in p.reports() if r.get("case") == case])
        self.db.c.insert_one(dict(doc, case=case))
        p.wait_until(lambda: len([r for r in p.reports() if r.get("case") == case])
                     >= before + reports, 30, "%d reports of %s" % (reports, case))
        return [r for r in p.reports() if r.get("case") == case][before:]

    def test_parameters_and_results_are_typed(self):
        p = self.start("""
            cases.types = function()
              local rows = fw.pg.query("rep", [[
                SELECT $1::int AS i, $2::float8 AS f, $3::bool AS b, $4::text AS t,
                       $5::int AS missing, $6::jsonb AS j, 12345678901234567890.25::numeric AS num,
                       '\\x00ff'::bytea AS raw, '2024-01-02 03:04:05+00'::timestamptz AS ts,
                       ARRAY[1,2] AS arr, 9007199254740993::int8 AS big]],
                { 42, 1.5, true, "h\\u{e9}", fw.null, { a = { 1, 2 } } })
              local r = rows[1]
              return { n = #rows, i = r.i, itype = math.type(r.i), f = r.f, b = r.b, t = r.t,
                       missing = r.missing == fw.null, j = r.j.a[2], num = r.num,
                       raw = #r.raw .. ":" .. r.raw:byte(2), ts = r.ts, arr = r.arr,
                       big = tostring(r.big) }
            end
            cases.write = function(doc)
              local n = fw.pg.execute("rep", "INSERT INTO orders (id, total, n) VALUES ($1, $2, $3) "
                .. "ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total", { doc.id, "10.10", 1 })
              local again = fw.pg.execute("rep", "UPDATE orders SET n = n + 1 WHERE id = $1", { doc.id })
              return { n = n, again = again }
            end
            """)
        r = self.run_case(p, "types")[0]
        self.assertEqual((r["n"], r["i"], r["itype"], r["f"], r["b"], r["t"]),
                         (1, 42, "integer", 1.5, True, "h\u00e9"))
        self.assertTrue(r["missing"])
        self.assertEqual(r["j"], 2)
        self.assertEqual(r["num"], "12345678901234567890.25")
        self.assertEqual(r["raw"], "2:255")
        self.assertTrue(r["ts"].startswith("2024-01-02 03:04:05"), r["ts"])
        self.assertEqual((r["arr"], r["big"]), ("{1,2}", "9007199254740993"))
        r = self.run_case(p, "write", id="o1")[0]
        self.assertEqual((r["n"], r["again"]), (1, 1))
        self.assertEqual(self.pg.sql("SELECT id, total, n FROM orders"), [["o1", "10.10", "2"]])
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_transaction_commits_on_return_and_rolls_back_on_error(self):
        p = self.start("""
            cases.tx = function(doc)
              local got = fw.pg.transaction("rep", function(tx)
                tx:execute("INSERT INTO orders (id, n) VALUES ($1, 1)", { doc.id })
                if doc.fail then error(fw.error("Validation", "no")) end
                return tx:query("SELECT count(*) AS c FROM orders")[1].c
              end)
              return { count = got }
            end
            """, attempts=1)
        self.assertEqual(self.run_case(p, "tx", id="a")[0]["count"], 1)
        r = self.run_case(p, "tx", id="b", fail=True)[0]
        self.assertEqual(r["error"], "Validation")
        self.assertEqual(self.pg.sql("SELECT id FROM orders"), [["a"]])
        # The connection is usable after the rollback.
        self.assertEqual(self.run_case(p, "tx", id="c")[0]["count"], 2)
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_a_transaction_never_continues_on_a_new_connection(self):
        # The first statement times out (the connection is closed); the
        # function catches that and goes on: its next statement must fail,
        # not autocommit on a fresh connection.
        p = self.start("""
            cases.lost = function(doc)
              fw.pg.transaction("rep", function(tx)
                pcall(tx.query, tx, "SELECT pg_sleep(30)")
                tx:execute("INSERT INTO orders (id) VALUES ($1)", { doc.id })
              end)
            end
            """, timeout="3s", attempts=1)  # the connect and BEGIN fit in it on a busy machine
        r = self.run_case(p, "lost", id="x")[0]
        self.assertEqual(r["error"], "Pg.Connection")
        self.assertIn("lost during the transaction", r["message"])
        self.assertEqual(self.pg.sql("SELECT count(*) FROM orders"), [["0"]])

    def test_each_error_type_drives_the_retry_policy(self):
        # Every type as the user sees it: the attempts it got (max_attempts = 3)
        # and the DLQ entry's error type, from real server errors where one can
        # be provoked at will (a deadlock cannot: raised with its SQLSTATE).
        from fwtest import refused_port as free_port
        self.pg.sql("INSERT INTO orders (id) VALUES ('dup'); "
                    "DROP TABLE IF EXISTS secret; CREATE TABLE secret (x int); "
                    "DROP ROLE IF EXISTS noperm; CREATE ROLE noperm")
        p = self.start("""
            fw.connection { name = "down", uri = "postgresql://u:p@127.0.0.1:%d/x" }
            fw.connection { name = "slow", uri = fw.env("PG_URI") .. "?options=-c%%20statement_timeout%%3D100" }
            cases["Pg.Connection"] = function() fw.pg.query("down", "SELECT 1") end
            cases["Pg.Timeout"] = function() fw.pg.query("slow", "SELECT pg_sleep(5)") end
            cases["Pg.Serialization"] = function()
              fw.pg.query("rep", "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$")
            end
            cases["Pg.Deadlock"] = function()
              fw.pg.query("rep", "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END $$")
            end
            cases["Pg.UniqueViolation"] = function()
              fw.pg.execute("rep", "INSERT INTO orders (id) VALUES ($1)", { "dup" })
            end
            cases["Pg.ForeignKey"] = function()
              fw.pg.execute("rep", "INSERT INTO lines (order_id, qty) VALUES ($1, 1)", { "none" })
            end
            cases["Pg.Syntax"] = function() fw.pg.query("rep", "SELEC 1") end
            cases["Pg.Permission"] = function()
              fw.pg.transaction("rep", function(tx)
                tx:execute("SET LOCAL ROLE noperm")
                tx:query("SELECT * FROM secret")
              end)
            end
            cases["Pg.Error"] = function() fw.pg.query("rep", "SELECT * FROM no_such_table") end
            """ % free_port())
        want = {"Pg.Connection": (3, None), "Pg.Timeout": (3, "57014"),
                "Pg.Serialization": (3, "40001"), "Pg.Deadlock": (3, "40P01"),
                "Pg.UniqueViolation": (1, "23505"), "Pg.ForeignKey": (1, "23503"),
                "Pg.Syntax": (1, "42601"), "Pg.Permission": (1, "42501"),
                "Pg.Error": (3, "42P01")}
        for case, (attempts, sqlstate) in want.items():
            r = self.run_case(p, case, reports=attempts)
            self.assertEqual([(x["attempt"], x["error"]) for x in r],
                             [(i + 1, case) for i in range(attempts)], case)
            self.assertEqual(r[0]["fields"].get("sqlstate"), sqlstate, case)
            self.assertEqual(r[0]["fields"]["connection"],
                             {"Pg.Connection": "down", "Pg.Timeout": "slow"}.get(case, "rep"))
            if case == "Pg.UniqueViolation":
                self.assertEqual(r[0]["fields"]["constraint"], "orders_pkey")
        entries = self.wait_dlq(len(want))
        self.assertEqual({e["fullDocument"]["case"]: (e["attempts"], e["error"]["type"])
                          for e in entries},
                         {case: (a, case) for case, (a, _) in want.items()})
        dup = [e for e in entries if e["error"]["type"] == "Pg.UniqueViolation"][0]
        self.assertIn('fw.pg: connection "rep":', dup["error"]["message"])
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_a_server_down_opens_the_default_circuit_and_holds_the_event(self):
        # circuit's default `on` has Pg.Connection: the event whose attempts
        # ran out while PostgreSQL was down is held, not dead-lettered, and
        # handled once the server is back.
        script = self.script("""
            fw.connection { name = "rep", uri = fw.env("PG_URI") }
            fw.stream { name = "h", collection = "c", dlq = true,
                        retry = { initial_delay = "20ms", max_attempts = 2 },
                        circuit = { open_for = "300ms", max_open_for = "1s" },
                        on_insert = function(ctx)
                          local d = ctx:full_document()
                          fw.pg.execute("rep", "INSERT INTO orders (id) VALUES ($1)", { d.id })
                          report({ id = d.id })
                        end }
            """)
        p = self.run_fw(script, env=clean_env({"PG_URI": self.pg.uri()}))
        p.wait_open()
        self.pg.stop("immediate")
        self.addCleanup(lambda: self.pg.start() if not self.pg_up() else None)
        self.db.c.insert_one({"id": "held"})
        p.wait_log("circuit OPEN")
        self.assertTrue(any("Pg.Connection" in m for m in p.messages() if "circuit OPEN" in m))
        self.pg.start()
        p.wait_until(lambda: [r.get("id") for r in p.reports()] == ["held"], 30,
                     "the held event handled once the server is back")
        self.assertEqual(self.pg.sql("SELECT id FROM orders"), [["held"]])
        self.assertEqual(self.dlq_entries(), [])
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def pg_up(self):
        try:
            self.pg.sql("SELECT 1")
            return True
        except AssertionError:
            return False

    def test_execute_many_runs_every_row_in_one_round_trip_all_or_nothing(self):
        self.pg.sql("INSERT INTO orders (id) VALUES ('dup')")
        p = self.start("""
            local UPSERT = "INSERT INTO orders (id, n) VALUES ($1, $2) "
              .. "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n"
            cases.many = function(doc)
              local rows = {}
              for i = 1, doc.count do rows[i] = { doc.prefix .. i, i } end
              return { n = fw.pg.execute_many("rep", UPSERT, rows),
                       none = fw.pg.execute_many("rep", UPSERT, {}) }
            end
            cases.dup = function()
              fw.pg.execute_many("rep", "INSERT INTO orders (id, n) VALUES ($1, $2)",
                { { "m1", 1 }, { "dup", 2 }, { "m3", 3 } })
            end
            cases.tx = function()
              return { n = fw.pg.transaction("rep", function(tx)
                local n = tx:execute_many(UPSERT, { { "t1", 1 }, { "t2", 2 } })
                return n + tx:execute_many("UPDATE orders SET n = n + 10 WHERE id = $1",
                                           { { "t1" }, { "none" } })
              end) }
            end
            cases.bad = function()
              fw.pg.execute_many("rep", UPSERT, { { "b1", 1 }, "not a row" })
            end
            """, attempts=1)
        r = self.run_case(p, "many", prefix="a", count=600)[0]
        self.assertEqual((r["n"], r["none"]), (600, 0))
        self.assertEqual(self.pg.sql("SELECT count(*), sum(n) FROM orders WHERE id LIKE 'a%'"),
                         [["600", str(600 * 601 // 2)]])
        r = self.run_case(p, "dup")[0]
        self.assertEqual((r["error"], r["fields"]["row"], r["fields"]["sqlstate"]),
                         ("Pg.UniqueViolation", 2, "23505"))
        # One implicit transaction: the row before the failing one is not there either.
        self.assertEqual(self.pg.sql("SELECT count(*) FROM orders WHERE id IN ('m1', 'm3')"),
                         [["0"]])
        self.assertEqual(self.run_case(p, "tx")[0]["n"], 3)
        self.assertEqual(self.pg.sql("SELECT id, n FROM orders WHERE id LIKE 't%' ORDER BY id"),
                         [["t1", "11"], ["t2", "2"]])
        r = self.run_case(p, "bad")[0]
        self.assertEqual(r["error"], "ArgumentError")
        self.assertIn("rows[2] is a string", r["message"])
        self.assertEqual(self.pg.sql("SELECT count(*) FROM orders WHERE id = 'b1'"), [["0"]])
        self.assertEqual([e["error"]["type"] for e in self.wait_dlq(2)],
                         ["Pg.UniqueViolation", "ArgumentError"])
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_statements_are_prepared_once_per_connection_and_reused(self):
        p = self.start("""
            local function prepared()
              local out = {}
              for _, r in ipairs(fw.pg.query("rep", "SELECT statement FROM pg_prepared_statements"))
              do out[#out + 1] = r.statement end
              return out
            end
            cases.reuse = function(doc)
              for i = 1, 3 do
                fw.pg.execute("rep", "INSERT INTO orders (id, n) VALUES ($1, $2) "
                  .. "ON CONFLICT (id) DO UPDATE SET n = orders.n + 1", { doc.id, i })
              end
              return { prepared = prepared() }
            end
            cases.many_texts = function()
              for i = 1, 70 do fw.pg.query("rep", "SELECT " .. i .. " AS v") end
              return { prepared = prepared() }
            end
            cases.star = function()
              return { n = #fw.pg.query("rep", "SELECT * FROM orders") }
            end
            cases.kill = function()
              fw.pg.query("rep", "SELECT pg_terminate_backend(pg_backend_pid())")
            end
            """, attempts=3)
        r = self.run_case(p, "reuse", id="r1")[0]
        self.assertEqual(sum(1 for t in r["prepared"] if t.startswith("INSERT INTO orders")), 1)
        self.assertEqual(self.pg.sql("SELECT n FROM orders WHERE id = 'r1'"), [["3"]])
        # At most 64 on the server at once: then they are deallocated and prepared anew.
        r = self.run_case(p, "many_texts")[0]
        self.assertLessEqual(len(r["prepared"]), 64)
        self.assertGreater(len(r["prepared"]), 1)
        # A prepared SELECT * whose table changed: the server refuses the stale plan
        # (0A000, a Pg.Error, retried) and the retry prepares it again.
        self.assertEqual(self.run_case(p, "star")[0]["n"], 1)
        self.pg.sql("ALTER TABLE orders ADD COLUMN note text")
        r = self.run_case(p, "star", reports=2)
        self.assertEqual((r[0]["attempt"], r[0]["error"], r[0]["fields"]["sqlstate"]),
                         (1, "Pg.Error", "0A000"))
        self.assertEqual((r[1]["attempt"], r[1]["n"]), (2, 1))
        # A new connection starts with none prepared: the same statements work on it.
        r = self.run_case(p, "kill", reports=3)
        self.assertEqual([x["error"] for x in r], ["Pg.Connection"] * 3)
        r = self.run_case(p, "reuse", id="r2")[0]
        self.assertEqual(sum(1 for t in r["prepared"] if t.startswith("INSERT INTO orders")), 1)
        self.assertEqual(self.pg.sql("SELECT n FROM orders WHERE id = 'r2'"), [["3"]])
        self.assertEqual([e["error"]["type"] for e in self.dlq_entries()], ["Pg.Connection"])
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_deadline_and_statement_timeout_raise_pg_timeout(self):
        p = self.start("""
            cases.slow = function(doc, ctx)
              if ctx:attempt_number() == 1 then fw.pg.query("rep", "SELECT pg_sleep(30)") end
              return { one = fw.pg.query("rep", "SELECT 1 AS one")[1].one }
            end
            """, timeout="1s")
        r = self.run_case(p, "slow", reports=2)
        self.assertEqual((r[0]["attempt"], r[0]["error"]), (1, "Pg.Timeout"))
        self.assertEqual((r[1]["attempt"], r[1]["one"]), (2, 1))
        # The cancel reached the server: the pg_sleep ends long before its 30 s
        # (the backend goes away asynchronously: waited for, within 10 s).
        p.wait_until(lambda: self.pg.sql("SELECT count(*) FROM pg_stat_activity WHERE state = "
                                         "'active' AND query LIKE 'SELECT pg_sleep(30)%'") == [["0"]],
                     10, "the cancelled pg_sleep to end")
        p.stop()
        p = self.start("""
            cases.st = function()
              fw.pg.query("rep", "SELECT pg_sleep(5)")
            end
            """, attempts=1,
            uri=self.pg.uri(query="?options=-c%20statement_timeout%3D200"))
        r = self.run_case(p, "st")[0]
        self.assertEqual((r["error"], r["fields"]["sqlstate"]), ("Pg.Timeout", "57014"))
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_an_unanswered_cancel_does_not_hold_the_handler(self):
        # The statement outlasts the deadline; the cancel request is sent to a
        # server that never answers it. The attempt still ends at the deadline.
        proxy = CancelBlackhole(self.pg.port)
        self.addCleanup(proxy.close)
        p = self.start("""
            cases.slow = function(doc, ctx)
              if ctx:attempt_number() == 1 then fw.pg.query("rep", "SELECT pg_sleep(20)") end
              return { one = fw.pg.query("rep", "SELECT 1 AS one")[1].one }
            end
            """, timeout="1s", uri=self.pg.uri().replace(":%d/" % self.pg.port, ":%d/" % proxy.port))
        t0 = time.monotonic()
        r = self.run_case(p, "slow", reports=2)
        self.assertEqual((r[0]["attempt"], r[0]["error"]), (1, "Pg.Timeout"))
        self.assertEqual((r[1]["attempt"], r[1]["one"]), (2, 1))
        self.assertLess(time.monotonic() - t0, 15, "not held until the 20 s statement ends")
        p.wait_until(lambda: proxy.held, 10, "the cancel request sent")
        # The statement the cancel never reached: ended here for the next tests.
        self.pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'SELECT pg_sleep(20)%' AND pid <> pg_backend_pid()")
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_server_killed_and_restarted_nothing_lost(self):
        p = self.start("""
            cases.up = function(doc)
              fw.pg.execute("rep", "INSERT INTO orders (id, n) VALUES ($1, $2) "
                .. "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n", { doc.id, doc.n })
              return { id = doc.id }
            end
            """, attempts=60)
        self.run_case(p, "up", id="o0", n=0)
        self.pg.stop("immediate")
        self.db.c.insert_many([{"case": "up", "id": "o%d" % i, "n": i} for i in range(1, 6)])
        p.wait_until(lambda: any(r.get("error") == "Pg.Connection" for r in p.reports()),
                     30, "a Pg.Connection error while the server is down")
        self.pg.start()
        p.wait_until(lambda: len({r["id"] for r in p.reports() if "id" in r}) == 6, 30,
                     "every event handled")
        self.assertEqual(self.dlq_entries(), [])
        self.assertEqual(self.pg.sql("SELECT count(*), sum(n) FROM orders"), [["6", "15"]])

    def test_example_pg_orders_keeps_the_table_equal_to_the_collection(self):
        self.check_orders_example("pg_orders.lua")

    def test_example_pg_orders_batch_keeps_the_table_equal_to_the_collection(self):
        self.check_orders_example("pg_orders_batch.lua")

    def check_orders_example(self, name):
        self.pg.sql("DROP TABLE IF EXISTS lines, orders; CREATE TABLE orders (id text PRIMARY KEY, "
                    "customer text, total numeric, status text, doc jsonb)")
        p = self.run_fw(os.path.join(SOURCE_DIR, "examples", name),
                        env=clean_env({"PG_URI": self.pg.uri()}))
        p.wait_open()
        for i in range(30):
            self.db.orders.insert_one({"_id": i, "customer": "c%d" % (i % 4), "total": i * 1.5,
                                       "status": "new"})
        self.db.orders.update_many({"_id": {"$lt": 10}}, {"$set": {"status": "paid"}})
        self.db.orders.delete_many({"_id": {"$gte": 25}})
        self.pg.stop("immediate")      # restarted in the middle: nothing lost
        self.db.orders.insert_one({"_id": 99, "customer": "x", "total": 1, "status": "new"})
        self.pg.start()

        def rows():
            return self.pg.sql("SELECT id, customer, total, status, doc->>'customer' FROM orders "
                               "ORDER BY id")
        want = sorted([str(o["_id"]), o["customer"], "%g" % o["total"], o["status"], o["customer"]]
                      for o in self.db.orders.find())
        p.wait_until(lambda: sorted(rows()) == want, 60, "the table equal to the collection")
        self.assertEqual(self.dlq_entries(), [])
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_host_names_are_looked_up_within_the_deadline(self):
        # "localhost" may resolve to ::1 first (nothing listens there): every
        # address is tried in turn, as libpq does with a name.
        p = self.start("""
            cases.name = function()
              return { one = fw.pg.query("rep", "SELECT 1 AS one")[1].one }
            end
            """, uri=self.pg.uri().replace("@127.0.0.1:", "@localhost:"))
        self.assertEqual(self.run_case(p, "name")[0]["one"], 1)
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")
        shim = slow_dns_library(self.tmp.name)
        if not shim:
            return
        # A name whose lookup hangs (a resolver that does not answer): the
        # attempt ends with Pg.Timeout at the handler's deadline, not after it.
        script = self.script(SCRIPT % {"timeout": "1s", "attempts": 1, "cases": """
            cases.slow = function()
              fw.pg.query("rep", "SELECT 1")
            end
            """})
        p = self.run_fw(script, env=clean_env({
            "PG_URI": self.pg.uri().replace("@127.0.0.1:", "@db.slow.test:"),
            "LD_PRELOAD": shim}))
        p.wait_open()
        t0 = time.monotonic()
        r = self.run_case(p, "slow")[0]
        self.assertEqual(r["error"], "Pg.Timeout")
        self.assertIn('looking up host "db.slow.test" took too long', r["message"])
        self.assertLess(time.monotonic() - t0, 20, "well before the 30 s lookup ends")

    def test_doctor_checks_the_connection(self):
        script = self.script(SCRIPT % {"cases": "", "timeout": "5s", "attempts": 3})
        from fwtest import run_cli
        cp = run_cli(["doctor", script, "--uri", self.uri], env=clean_env({"PG_URI": self.pg.uri()}))
        self.assertIn('connection "rep" (PostgreSQL): reachable and authenticated', cp.stdout)
        cp = run_cli(["doctor", script, "--uri", self.uri],
                     env=clean_env({"PG_URI": self.pg.uri(password="wrong-" + PASSWORD)}))
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)
        self.assertIn("password authentication failed", cp.stdout)
        self.assert_no_secret("wrong-" + PASSWORD)

    def test_password_never_shows(self):
        p = self.start("""
            cases.auth = function()
              return { one = fw.pg.query("rep", "SELECT 1 AS one")[1].one }
            end
            """, attempts=1, uri=self.pg.uri(password="wrong-" + PASSWORD))
        r = self.run_case(p, "auth")[0]
        self.assertEqual(r["error"], "Pg.Connection")
        self.assertIn("password authentication failed", r["message"])
        self.wait_dlq(1)
        p.stop()
        p = self.start("""
            cases.ok = function()
              return { one = fw.pg.query("rep", "SELECT 1 AS one")[1].one }
            end
            """)
        self.assertEqual(self.run_case(p, "ok")[0]["one"], 1)
        self.assert_no_secret(PASSWORD)
        self.assert_no_secret("wrong-" + PASSWORD)


if __name__ == "__main__":
    unittest.main()
