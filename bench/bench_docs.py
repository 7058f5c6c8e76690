"""Documents and handler work shared by bench/run_bench.py and bench/pymongo_loop.py.

The shapes match bench/event_path_bench.c (make_event/append_doc) and the handlers match the
Lua ones run_bench.py generates and bench/node/loop.js:

  S1  no-op
  S2  reads three fields of the full document, one nested: seq, amount, customer.name
  S3  walks the whole full document recursively, counting leaves

S6 and S7 (bench/io_scenarios.py) use io_doc: the small document plus `group`, a key with
IO_GROUPS distinct values.
"""

import datetime

CREATED = datetime.datetime(2024, 1, 15, 12, 0, 0)
DESC = "standard line item description, 48 chars long.."


def small_doc(i):
    """~300 bytes of BSON with its ObjectId _id (added by the driver on insert)."""
    return {
        "seq": i,
        "status": "paid",
        "customer": {"name": "cust-%06d" % (i % 100000), "tier": "gold", "city": "Lyon"},
        "amount": (i % 10000) / 100.0 + 0.5,
        "qty": i % 7 + 1,
        "items": [{"sku": "SKU-%05d" % (i % 50000), "qty": 2, "price": 9.99},
                  {"sku": "SKU-%05d" % ((i * 7) % 50000), "qty": 1, "price": 24.5}],
        "region": "eu-west",
        "created": CREATED,
    }


IO_GROUPS = 100


def io_doc(i):
    """The small document plus `group` ("g00".."g99"): S6 upserts one counter per group."""
    d = small_doc(i)
    d["group"] = "g%02d" % (i % IO_GROUPS)
    return d


def large_doc(i):
    """~4 KB: the small document plus 36 order lines."""
    d = small_doc(i)
    d["lines"] = [{"sku": "SKU-%05d" % ((i + k * 13) % 50000), "qty": k % 5 + 1,
                   "price": 1.25 * (k + 1), "desc": DESC} for k in range(36)]
    return d


# ---- handler work (pymongo loop) --------------------------------------------

class Work:
    """The per-event work of each scenario, with accumulators so nothing is dead code."""

    def __init__(self):
        self.acc = 0.0
        self.nlen = 0
        self.leaves = 0

    def s1(self, change):
        pass

    def s2(self, change):
        d = change["fullDocument"]
        self.acc += d["seq"] + d["amount"]
        self.nlen += len(d["customer"]["name"])

    def s3(self, change):
        self.leaves += walk(change["fullDocument"])

    def checksum(self):
        return {"acc": self.acc, "nlen": self.nlen, "leaves": self.leaves}


def walk(v):
    n = 0
    for x in (v.values() if isinstance(v, dict) else v):
        if isinstance(x, (dict, list)):
            n += walk(x)
        else:
            n += 1
    return n
