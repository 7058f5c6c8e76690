"""The README's $inc read model (shop.customer_totals: orders and amount per
customer) as the exactly-once chaos tests read it, and its recomputation
from the orders, and the kill -9 run over it. A test case mixin: the model is
read from self.model_db (self.db unless a test keeps it on another
deployment)."""

import os
import random
import threading
import time

from chaostest import figures


class IncReadModel:

    @property
    def model_db(self):
        return self.db

    def totals(self):
        return {d["_id"]: (d["orders"], d["amount"]) for d in self.model_db.customer_totals.find()}

    def want(self, docs):
        want = {}
        for o in docs:
            c = want.setdefault(o["customer"], (0, 0))
            want[o["customer"]] = (c[0] + 1, c[1] + o["total"])
        return want

    def applied(self):
        return sum(v[0] for v in self.totals().values())

    def wait_applied(self, n, timeout=120):
        """Until n orders are applied, or nothing more was applied for timeout seconds."""
        last, deadline = -1, time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.applied()
            if now >= n:
                return
            if now != last:
                last, deadline = now, time.monotonic() + timeout
            time.sleep(0.1)

    def run_with_kills(self, body, scenario, events, kills, write, env=None):
        """Runs the script body while write() inserts `events` orders (each handler
        reporting its order's n), kills flowwarden with kill -9 when the reports pass
        `kills` random orders (FW_CHAOS_SEED picks them again), restarts it each time,
        and checks every counter of the read model exact; prints the figures."""
        seed = (int(os.environ.get("FW_CHAOS_SEED", "0"))
                or random.SystemRandom().randrange(1, 2**31))
        rng = random.Random(seed)
        kill_at = sorted(rng.sample(range(1, events - 1), kills))
        script = self.script(body)
        started = time.monotonic()
        p = self.run_fw(script, env=env)
        p.wait_open()
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        logs = []
        for target in kill_at:
            # A run killed just after a batch's reports may have committed every order up to
            # the last one written: the next run then has nothing to report, and is killed idle.
            p.wait_until(lambda: any(r["n"] >= target for r in p.reports()[-5:])
                         or (not writer.is_alive() and self.applied() >= events), timeout=120,
                         what="event %d (seed %d)" % (target, seed))
            p.kill9()
            logs += [m for m in p.messages() if "REPORT" not in m]
            p = self.run_fw(script, env=env)
        writer.join()
        p.wait_open()
        self.wait_applied(events)
        self.assertEqual(p.stop(), 0)
        logs += [m for m in p.messages() if "REPORT" not in m]
        got, want = self.totals(), self.want(self.db.orders.find())
        if got != want:
            print("\n".join(logs[:80]))
        applied = sum(v[0] for v in got.values())
        figures(scenario, seed=seed, events=events, kills=kills, applied=applied,
                lost=max(0, events - applied), doubled=max(0, applied - events),
                seconds="%.1f" % (time.monotonic() - started))
        self.assertEqual(got, want, "every counter exact after %d kills (seed %d)"
                         % (kills, seed))
