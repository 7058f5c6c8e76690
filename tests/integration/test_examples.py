"""The scripts in examples/ run as documented: every one passes `check`,
materialize.lua keeps its read model equal to a recomputation, webhook.lua
posts paid orders to a loopback server, retries a 503 and dead-letters a 404."""
import collections
import http.server
import json
import os
import random
import threading
import unittest

from fwtest import SOURCE_DIR, StandInTestCase, clean_env, run_cli

EXAMPLES = os.path.join(SOURCE_DIR, "examples")
# As the examples' headers run them: the database is the URI's path.
CHECK_ENV = {"HOOK_URL": "http://127.0.0.1:9/orders", "HOOK_TOKEN": "t0ken",
             "FLOWWARDEN_URI": "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"}


class Hook(http.server.BaseHTTPRequestHandler):
    """Answers POSTs with the next status of the server's script (then 200)."""
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        srv = self.server
        with srv.lock:
            status = srv.statuses.pop(0) if srv.statuses else 200
            srv.calls.append({"status": status, "body": json.loads(body),
                              "auth": self.headers.get("Authorization"),
                              "key": self.headers.get("Idempotency-Key")})
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class ExamplesTest(StandInTestCase):

    def test_every_example_passes_check(self):
        for name in sorted(os.listdir(EXAMPLES)):
            # The *_spec.lua files are specs (`flowwarden test`), not scripts.
            if name.endswith(".lua") and not name.endswith("_spec.lua"):
                with self.subTest(example=name):
                    cp = run_cli(["check", os.path.join(EXAMPLES, name)],
                                 env=clean_env(CHECK_ENV))
                    self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_check_without_a_uri_leaves_the_database_to_run_s_uri(self):
        # pg_orders.lua's database is the URI's path: check, given no URI, passes with a
        # warning saying where run takes it from; given a URI, it checks against it.
        script = os.path.join(EXAMPLES, "pg_orders.lua")
        env = clean_env({})
        cp = run_cli(["check", script], env=env)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("database                       (the path of run's --uri): none in the "
                      "script, and check was given no URI", cp.stdout)
        self.assertIn('warning: stream "orders-to-pg": database: none in the script; run takes '
                      "it from the path of its --uri", cp.stdout)
        self.assertEqual(run_cli(["check", script, "--strict"], env=env).returncode, 1)
        cp = run_cli(["check", script, "--uri", "mongodb://127.0.0.1:27017/shop"], env=env)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("shop (from the URI)", cp.stdout)
        self.assertNotIn("database: none", cp.stdout)
        cp = run_cli(["check", script, "--uri", "mongodb://127.0.0.1:27017/"], env=env)
        self.assertEqual(cp.returncode, 1)
        self.assertIn('stream "orders-to-pg": database: missing', cp.stderr)
        cp = run_cli(["check", script], env=dict(env, FLOWWARDEN_URI="mongodb://127.0.0.1/"))
        self.assertEqual(cp.returncode, 1)

    def test_materialize_keeps_totals_equal_to_a_recomputation(self):
        p = self.run_fw(os.path.join(EXAMPLES, "materialize.lua"))
        p.wait_open()
        rng = random.Random(5)
        live = []
        for i in range(300):
            self.db.orders.insert_one({"_id": i, "customer": "c%d" % rng.randrange(8),
                                       "total": rng.randrange(1, 100)})
            live.append(i)
            if i % 3 == 2:
                self.db.orders.update_one({"_id": rng.choice(live)}, {"$inc": {"total": 5}})
                self.db.orders.delete_one({"_id": live.pop(rng.randrange(len(live)))})
        expected = collections.Counter()
        counts = collections.Counter()
        for o in self.db.orders.find():
            expected[o["customer"]] += o["total"]
            counts[o["customer"]] += 1

        def settled():
            got = {t["_id"]: (t["orders"], t["amount"]) for t in self.db.customer_totals.find()}
            return got == {c: (counts[c], expected[c]) for c in counts}
        self.wait_for(settled, timeout=60, what="totals equal to a recomputation")
        self.assertEqual(self.db.order_view.count_documents({}), len(live))
        self.assertEqual(p.stop(), 0)

    def test_webhook_posts_paid_orders_retries_5xx_and_dead_letters_4xx(self):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        srv.lock, srv.calls, srv.statuses = threading.Lock(), [], [503, 200, 404]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        env = clean_env({"HOOK_URL": "http://127.0.0.1:%d/orders" % srv.server_port,
                         "HOOK_TOKEN": "t0ken"})
        p = self.run_fw(os.path.join(EXAMPLES, "webhook.lua"), env=env)
        p.wait_open()
        self.db.orders.insert_many([{"_id": 1, "total": 10}, {"_id": 2, "total": 20}])
        self.db.orders.update_one({"_id": 1}, {"$set": {"status": "PAID"}})
        entry = None
        self.db.orders.update_one({"_id": 2}, {"$set": {"status": "PAID"}})
        entry = self.wait_for(lambda: self.db["webhook_dlq"].find_one(), what="the DLQ entry")
        self.assertEqual(entry["documentKey"], {"_id": 2})
        self.assertEqual(entry["error"]["type"], "Http.Status.Permanent")
        self.assertEqual(entry["attempts"], 1)
        calls = srv.calls
        self.assertEqual([(c["status"], c["body"]["order"]) for c in calls],
                         [(503, 1), (200, 1), (404, 2)])
        self.assertEqual({c["auth"] for c in calls}, {"Bearer t0ken"})
        self.assertEqual(calls[0]["key"], calls[1]["key"])   # the same event, retried
        self.assertNotIn("t0ken", "\n".join(p.raw_lines()))
        self.assertEqual(p.stop(), 0)


if __name__ == "__main__":
    unittest.main()
