"""fw.redis through the real binary, against a redis-server from Debian
started here on a loopback port (redisserver.py).

Handlers run one case per inserted document ({case = "..."}); a case
reports what it got, and on_error reports the typed error it raised."""
import collections
import os
import threading
import time
import unittest

from dlqtest import FailureTestCase
from fwtest import SOURCE_DIR, clean_env
from redisserver import RedisServer
from slowdns import slow_dns_library

PASSWORD = "Redis-Secret-7f3a"

SCRIPT = """
fw.connection { name = "cache", uri = fw.env("REDIS_URI") }
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


class RedisTest(FailureTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.redis = RedisServer(password=PASSWORD)
        cls.redis.start()

    @classmethod
    def tearDownClass(cls):
        cls.redis.stop()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        if self.redis.proc.poll() is not None:
            self.redis.start()
        self.redis.command("FLUSHALL")

    def start(self, cases, timeout="5s", attempts=3, uri=None):
        script = self.script(SCRIPT % {"cases": cases, "timeout": timeout, "attempts": attempts})
        env = clean_env({"REDIS_URI": uri or self.redis.uri(1)})
        p = self.run_fw(script, env=env)
        p.wait_open()
        return p

    def run_case(self, p, case, reports=1, **doc):
        before = len([r for r in p.reports() if r.get("case") == case])
        self.db.c.insert_one(dict(doc, case=case))
        p.wait_until(lambda: len([r for r in p.reports() if r.get("case") == case]) >= before + reports,
                     30, "%d reports of %s" % (reports, case))
        return [r for r in p.reports() if r.get("case") == case][before:]

    def test_replies_are_typed_and_arguments_binary_safe(self):
        p = self.start("""
            cases.types = function()
              local set = fw.redis.call("cache", "SET", "k", "a\\0b")
              local got = fw.redis.call("cache", "GET", "k")
              local n = fw.redis.call("cache", "INCRBY", "n", 41)
              local missing = fw.redis.call("cache", "GET", "nope")
              local arr = fw.redis.call("cache", "MGET", "k", "nope", "n")
              return { set = set, len = #got, zero = got:byte(2), n = n, missing = missing == nil,
                       arr1 = #arr[1], arr2 = arr[2] == fw.null, arr3 = arr[3], count = #arr }
            end
            cases.tx = function(doc)
              local r = fw.redis.pipeline("cache", {
                { "MULTI" },
                { "SETNX", "seen:" .. doc.id, "1" },
                { "INCR", "count" },
                { "EXEC" },
              })
              return { multi = r[1], queued = r[2], exec = r[4] }
            end
            """)
        r = self.run_case(p, "types")[0]
        self.assertEqual(r["set"], "OK")
        self.assertEqual((r["len"], r["zero"]), (3, 0))
        self.assertEqual(r["n"], 41)
        self.assertTrue(r["missing"])
        self.assertEqual((r["arr1"], r["arr2"], r["arr3"], r["count"]), (3, True, b"41".decode(), 3))
        r = self.run_case(p, "tx", id="e1")[0]
        self.assertEqual((r["multi"], r["queued"], r["exec"]), ("OK", "QUEUED", [1, 1]))
        # Database 1 of the URI, not 0.
        self.assertEqual(self.redis.command("GET", "count", db=1), b"1")
        self.assertIsNone(self.redis.command("GET", "count"))
        self.assertEqual(p.stop(), 0, "exit status (the sanitized build: no leak, no error)")

    def test_error_reply_is_typed_with_its_prefix_and_goes_to_the_dlq_unretried(self):
        p = self.start("""
            cases.wrongtype = function()
              fw.redis.call("cache", "LPUSH", "list", "x")
              fw.redis.call("cache", "INCR", "list")
            end
            cases.piped = function()
              fw.redis.pipeline("cache", { { "SET", "a", "1" }, { "INCR", "list" }, { "GET", "a" } })
            end
            """)
        r = self.run_case(p, "wrongtype")
        self.assertEqual([x["attempt"] for x in r], [1])
        self.assertEqual(r[0]["error"], "Redis.Error")
        self.assertEqual(r[0]["fields"], {"connection": "cache", "prefix": "WRONGTYPE"})
        r = self.run_case(p, "piped")[0]
        self.assertEqual(r["error"], "Redis.Error")
        self.assertIn("command #2 of the pipeline", r["message"])
        entries = self.wait_dlq(2)
        self.assertEqual(sorted(e["error"]["type"] for e in entries), ["Redis.Error", "Redis.Error"])
        # The pipeline's other commands ran and the connection stays in step.
        self.assertEqual(self.redis.command("GET", "a", db=1), b"1")
        self.assertEqual(p.stop(), 0)

    def test_each_error_type_drives_the_retry_policy(self):
        # As the user sees them: the attempts (max_attempts = 3) and the DLQ
        # entry's type. Redis.ReadOnly: test_read_only_replica_is_retried.
        from fwtest import refused_port as free_port
        p = self.start("""
            fw.connection { name = "down", uri = "redis://127.0.0.1:%d/0" }
            cases["Redis.Connection"] = function() fw.redis.call("down", "PING") end
            cases["Redis.Timeout"] = function() fw.redis.call("cache", "BLPOP", "never", 30) end
            cases["Redis.Error"] = function()
              fw.redis.call("cache", "SET", "s", "x")
              fw.redis.call("cache", "LPUSH", "s", "y")
            end
            """ % free_port(), timeout="1s")
        want = {"Redis.Connection": 3, "Redis.Timeout": 3, "Redis.Error": 1}
        for case, attempts in want.items():
            r = self.run_case(p, case, reports=attempts)
            self.assertEqual([(x["attempt"], x["error"]) for x in r],
                             [(i + 1, case) for i in range(attempts)], case)
        self.assertEqual(r[0]["fields"], {"connection": "cache", "prefix": "WRONGTYPE"})
        entries = self.wait_dlq(len(want))
        self.assertEqual({e["fullDocument"]["case"]: (e["attempts"], e["error"]["type"])
                          for e in entries},
                         {case: (a, case) for case, a in want.items()})
        self.assertEqual(p.stop(), 0)

    def test_host_names_are_looked_up_within_the_deadline(self):
        p = self.start("""
            cases.name = function()
              return { pong = fw.redis.call("cache", "PING") }
            end
            """, uri=self.redis.uri(1).replace("@127.0.0.1:", "@localhost:"))
        self.assertEqual(self.run_case(p, "name")[0]["pong"], "PONG")
        self.assertEqual(p.stop(), 0)
        shim = slow_dns_library(self.tmp.name)
        if not shim:
            return
        # A resolver that does not answer: Redis.Timeout at the handler's
        # deadline (1 s), not when the lookup gives up 30 s later.
        script = self.script(SCRIPT % {"timeout": "1s", "attempts": 1, "cases": """
            cases.slow = function()
              fw.redis.call("cache", "PING")
            end
            """})
        p = self.run_fw(script, env=clean_env({
            "REDIS_URI": self.redis.uri(1).replace("@127.0.0.1:", "@cache.slow.test:"),
            "LD_PRELOAD": shim}))
        p.wait_open()
        t0 = time.monotonic()
        r = self.run_case(p, "slow")[0]
        self.assertEqual(r["error"], "Redis.Timeout")
        self.assertIn('looking up host "cache.slow.test" took too long', r["message"])
        self.assertLess(time.monotonic() - t0, 20, "well before the 30 s lookup ends")

    def test_timeout_is_typed_retried_and_the_next_call_reconnects(self):
        p = self.start("""
            cases.slow = function(doc, ctx)
              if ctx:attempt_number() == 1 then
                fw.redis.call("cache", "BLPOP", "never", 30)   -- longer than the 1s budget
              end
              return { pong = fw.redis.call("cache", "PING") }
            end
            """, timeout="1s")
        r = self.run_case(p, "slow", reports=2)
        self.assertEqual((r[0]["attempt"], r[0]["error"]), (1, "Redis.Timeout"))
        self.assertEqual((r[1]["attempt"], r[1]["pong"]), (2, "PONG"))

    def test_read_only_replica_is_retried(self):
        replica = RedisServer(args=["--replicaof", "127.0.0.1", str(self.redis.port),
                                    "--masterauth", PASSWORD])
        replica.start()
        self.addCleanup(replica.stop)
        p = self.start("""
            cases.ro = function()
              fw.redis.call("cache", "SET", "k", "v")
            end
            """, uri=replica.uri(0))
        r = self.run_case(p, "ro", reports=3)
        self.assertEqual([(x["attempt"], x["error"]) for x in r],
                         [(1, "Redis.ReadOnly"), (2, "Redis.ReadOnly"), (3, "Redis.ReadOnly")])
        self.assertEqual(self.wait_dlq(1)[0]["error"]["type"], "Redis.ReadOnly")

    def test_server_killed_and_restarted_nothing_lost(self):
        p = self.start("""
            cases.count = function(doc)
              local r = fw.redis.pipeline("cache", {
                { "MULTI" }, { "SETNX", "seen:" .. doc.n, "1" }, { "EXEC" } })
              if r[3][1] == 1 then fw.redis.call("cache", "INCR", "total") end
              return { n = doc.n }
            end
            """, attempts=50)
        self.run_case(p, "count", n=0)
        self.redis.kill()
        self.db.c.insert_many([{"case": "count", "n": i} for i in range(1, 6)])
        p.wait_until(lambda: any(r.get("error") == "Redis.Connection" for r in p.reports()),
                     30, "a Redis.Connection error while the server is down")
        self.redis.start()   # same port, empty (no persistence)
        p.wait_until(lambda: len({r["n"] for r in p.reports() if "n" in r}) == 6, 30,
                     "every event handled")
        self.assertEqual(self.dlq_entries(), [])
        # The first event's key went with the old server: five since the restart.
        self.assertEqual(self.redis.command("GET", "total", db=1), b"5")

    def test_password_never_shows_and_wrong_password_is_typed(self):
        p = self.start("""
            cases.auth = function()
              fw.log.info("connecting")
              return { pong = fw.redis.call("cache", "PING") }
            end
            """, uri="redis://:wrong-%s@127.0.0.1:%d/0" % (PASSWORD, self.redis.port))
        r = self.run_case(p, "auth")
        self.assertEqual(r[0]["error"], "Redis.Error")
        self.assertIn(r[0]["fields"]["prefix"], ("WRONGPASS", "ERR"))
        self.wait_dlq(1)
        self.assert_no_secret("wrong-" + PASSWORD)
        p.stop()
        p = self.start("""
            cases.ok = function()
              return { pong = fw.redis.call("cache", "PING") }
            end
            """)
        self.assertEqual(self.run_case(p, "ok")[0]["pong"], "PONG")
        self.assert_no_secret(PASSWORD)

    def test_example_redis_cache_deletes_keys_and_counts_each_order_once(self):
        for i in range(12):
            self.redis.command("SET", "order:%d" % i, "cached")
        p = self.run_fw(os.path.join(SOURCE_DIR, "examples", "redis_cache.lua"),
                        env=clean_env({"REDIS_URI": self.redis.uri(0)}))
        p.wait_open()
        counts = collections.Counter()
        for i in range(12):
            customer = "c%d" % (i % 3)
            counts[customer] += 1
            self.db.orders.insert_one({"_id": i, "customer": customer, "total": i})
        self.db.orders.update_one({"_id": 0}, {"$set": {"total": 99}})
        self.redis.command("SET", "order:0", "cached again")
        self.db.orders.delete_one({"_id": 0})

        def settled():
            got = {c: self.redis.command("GET", "orders:" + c) for c in counts}
            return got == {c: str(n).encode() for c, n in counts.items()} and \
                self.redis.command("EXISTS", "order:0") == 0
        p.wait_until(settled, 30, "counts per customer and deleted cache keys")
        self.assertEqual([self.redis.command("EXISTS", "order:%d" % i) for i in range(12)], [0] * 12)
        # Kill -9 and a restart from the checkpoint replays events at most from
        # there; the guards keep the counts exact.
        p.kill9()
        p = self.run_fw(os.path.join(SOURCE_DIR, "examples", "redis_cache.lua"),
                        env=clean_env({"REDIS_URI": self.redis.uri(0)}))
        p.wait_open()
        self.db.orders.insert_one({"_id": 100, "customer": "c0"})
        counts["c0"] += 1
        p.wait_until(settled, 30, "counts after a restart")
        self.assertEqual(self.dlq_entries(), [])
        self.assertEqual(p.stop(), 0)

    def test_example_keeps_exact_counts_when_redis_restarts_under_load(self):
        # A server that keeps its data across a restart (an append-only file
        # written before each reply), killed with -9 and started again on the
        # same port while orders keep coming. Commands whose reply was lost
        # may have run: the example's guarded EVAL makes their retries
        # idempotent, so every count is exact; Redis.Connection is retried, so
        # nothing reaches the DLQ.
        durable = RedisServer(args=["--appendonly", "yes", "--appendfsync", "always"])
        durable.start()
        self.addCleanup(durable.stop)
        p = self.run_fw(os.path.join(SOURCE_DIR, "examples", "redis_cache.lua"),
                        env=clean_env({"REDIS_URI": durable.uri(0)}))
        p.wait_open()
        n, customers = 600, 6
        want = collections.Counter("c%d" % (i % customers) for i in range(n))
        stop, killed = threading.Event(), threading.Event()

        def insert():
            for i in range(n):
                if i == n // 3:
                    killed.wait(60)    # the rest come after the kill, whatever the pace
                if stop.is_set():
                    return
                self.db.orders.insert_one({"_id": i, "customer": "c%d" % (i % customers)})
                time.sleep(0.004)      # pacing: events keep flowing across the restart
        writer = threading.Thread(target=insert)
        writer.start()
        self.addCleanup(writer.join, 60)
        self.addCleanup(stop.set)

        def counted():
            try:
                return sum(int(durable.command("GET", "orders:" + c) or 0) for c in want)
            except OSError:
                return 0
        p.wait_until(lambda: counted() >= 100, 60, "100 orders counted")
        durable.kill()
        killed.set()
        durable.start()
        p.wait_until(lambda: p.count_log("Redis.Connection") > 0, 30,
                     "a Redis.Connection error retried while the server restarted")
        writer.join(120)
        self.assertGreater(counted(), 0, "the counts survived the restart")
        p.wait_until(lambda: {c: durable.command("GET", "orders:" + c) for c in want}
                     == {c: str(k).encode() for c, k in want.items()}, 60,
                     "exact counts per customer")
        self.assertEqual(self.dlq_entries(), [])
        self.assertEqual(p.stop(), 0)

    def test_doctor_checks_the_connection(self):
        script = self.script(SCRIPT % {"cases": "", "timeout": "5s", "attempts": 3})
        from fwtest import run_cli
        cp = run_cli(["doctor", script, "--uri", self.uri],
                     env=clean_env({"REDIS_URI": self.redis.uri(1)}))
        self.assertIn('connection "cache" (Redis): reachable and authenticated', cp.stdout)
        cp = run_cli(["doctor", script, "--uri", self.uri],
                     env=clean_env({"REDIS_URI": "redis://:wrong-%s@127.0.0.1:%d/0"
                                    % (PASSWORD, self.redis.port)}))
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)
        self.assertIn('connection "cache" (Redis): fw.redis: connection "cache":', cp.stdout)
        self.assert_no_secret("wrong-" + PASSWORD)

    def test_a_failed_select_closes_the_connection(self):
        # Database 99 does not exist (16 by default): each event's call fails,
        # and the second one does not run in database 0 on the connection
        # whose SELECT failed.
        p = self.start("""
            cases.sel = function()
              fw.redis.call("cache", "SET", "where", "here")
            end
            """, uri=self.redis.uri(99))
        first = self.run_case(p, "sel")
        second = self.run_case(p, "sel")
        self.assertEqual([x["error"] for x in first + second], ["Redis.Error", "Redis.Error"])
        self.assertIn("DB index is out of range", second[0]["message"])
        self.assertIsNone(self.redis.command("GET", "where"))

    def test_check_refuses_a_cluster_url_naming_the_connection(self):
        script = self.script(SCRIPT % {"cases": "", "timeout": "5s", "attempts": 3})
        from fwtest import run_cli
        cp = run_cli(["check", script],
                     env=clean_env({"REDIS_URI": "redis://:%s@h1:7000,h2:7001" % PASSWORD}))
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn('connection "cache": uri: invalid Redis URI: Redis Cluster is not supported',
                      cp.stderr + cp.stdout)
        self.assert_no_secret(PASSWORD)


if __name__ == "__main__":
    unittest.main()
