"""A database-wide stream never sees flowwarden's own writes in its database (issue 23 §5):
the checkpoints, the leases, its sequenced DLQ and that DLQ's sequences, and the DLQ and
sequences of another stream of the script in the same database. Before, a sequenced DLQ's
`<dlq>_sequences` writes reached the handler as user events."""
import unittest

from fwtest import StandInTestCase

# "all" watches the whole database and dead-letters documents with fail_all; "orders" watches
# one collection and dead-letters documents with fail_orders into its own sequenced DLQ.
# ha.mode = "leader" makes both streams write their leases (renewed every 333 ms).
SCRIPT = """
fw.defaults { ha = { mode = "leader", lease = "1s" } }
fw.stream { name = "all", checkpoint = { save_every = 1 }, dlq = { sequenced = true },
  on_change = function(ctx)
    -- Reports every event it is given (flowwarden's documents have non-string _ids: only
    -- string ones are reported), and fails only on a user document asking for it.
    local d = ctx:operation_type() == "insert" and ctx:full_document() or nil
    local id = d and type(d._id) == "string" and d._id or nil
    report({ op = ctx:operation_type(), coll = ctx:collection_name(), eid = ctx:event_id(),
             id = id })
    if id and d.fail_all == true then error(fw.error("Validation", "rejected by all")) end
  end }
fw.stream { name = "orders", collection = "orders", checkpoint = { save_every = 1 },
  dlq = { collection = "orders_dlq", sequenced = true },
  on_insert = function(ctx)
    local d = ctx:full_document()
    report({ op = "insert", coll = "orders", eid = ctx:event_id(), id = d._id })
    if d.fail_orders then error(fw.error("Validation", "rejected by orders")) end
  end }
"""

OWNED = ["_fw_checkpoints", "_fw_leases", "_fw_dlq", "_fw_dlq_sequences", "orders_dlq",
         "orders_dlq_sequences"]


class DatabaseWideExclusions(StandInTestCase):

    def processed(self, stream, eid):
        cp = self.checkpoint(stream)
        return cp and cp.get("lastProcessedToken", {}).get("_data") == eid

    def test_a_database_wide_stream_never_sees_a_flowwarden_collection(self):
        p = self.run_fw(self.script(SCRIPT))
        p.wait_open(streams=2)
        self.db.items.insert_one({"_id": "a", "fail_all": True})
        self.db.orders.insert_one({"_id": "o", "fail_orders": True})
        p.wait_reports(2, stream="all")
        p.wait_reports(1, stream="orders")
        # Every flowwarden collection has been written in this database...
        for coll in OWNED:
            self.wait_for(lambda: self.db[coll].find_one() is not None, what=coll + " written")
        self.wait_for(lambda: self.db["_fw_dlq"].find_one({"fullDocument._id": "a"}),
                      what="the DLQ entry of all")
        self.wait_for(lambda: self.db["orders_dlq"].find_one({"fullDocument._id": "o"}),
                      what="the DLQ entry of orders")
        self.wait_for(lambda: self.processed("all", p.reports("all")[-1]["eid"]),
                      what="all's checkpoint")
        self.wait_for(lambda: self.processed("orders", p.reports("orders")[-1]["eid"]),
                      what="orders' checkpoint")
        # ... before this sentinel: an event of any of them would come before it.
        self.db.zeta.insert_one({"_id": "sentinel"})
        self.wait_for(lambda: any(r.get("id") == "sentinel" for r in p.reports("all")),
                      what="the sentinel")
        self.assertEqual(p.stop(), 0)
        seen = [r["coll"] for r in p.reports("all")]
        for coll in OWNED:
            with self.subTest(collection=coll):
                self.assertNotIn(coll, seen)
        self.assertEqual(seen, ["items", "orders", "zeta"])


if __name__ == "__main__":
    unittest.main()
