"""The README's $inc read model (shop.customer_totals: orders and amount per
customer) as the exactly-once chaos tests read it, and its recomputation
from the orders. A test case mixin: the model is read from self.model_db
(self.db unless a test keeps it on another deployment)."""

import time


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
